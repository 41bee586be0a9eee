"""The append-only file: record framing, crash-safe reading, group-commit writing, rewrite.

File layout (``DIR/disq.aof``, all integers little endian)::

    header   magic b"DISQAOF\\n" | u16 version (=1) | 6 reserved bytes (written as zero)
    record   u32 length | u32 crc32 | u8 type | payload
             length = 1 + len(payload); crc32 = zlib.crc32(type byte + payload)

This module knows nothing about what a payload means: a record is ``(rtype, payload)`` with
``rtype`` in 1..255. Type 0 is never written, so a zero-filled region (what some filesystems leave
after a crash that extended the file but lost its data) can never parse as a record.

Crash model. A crash can leave the last group-commit write partially on disk: the file then ends
in a *torn tail*, which ``read_aof`` cuts (with a warning) because those records were never
acknowledged as durable under any fsync policy. A bad record with good records *after* it cannot
come from a torn write; that is corruption, and silently dropping everything behind it would lose
acknowledged data, so we refuse to start and name the repair command instead.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import gc
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn, TypeAlias

if TYPE_CHECKING:
    import re
    from collections.abc import Iterator

__all__ = [
    "AOF_NAME",
    "HEADER",
    "HEADER_SIZE",
    "LOCK_NAME",
    "MAGIC",
    "MAX_RECORD_LENGTH",
    "RECORD_HEADER_SIZE",
    "REWRITE_NAME",
    "VERSION",
    "AofCorruptError",
    "AofError",
    "AofFsyncError",
    "AofLockedError",
    "AofReadResult",
    "AofRewriteError",
    "AofWriteError",
    "AofWriter",
    "FsyncPolicy",
    "count_records",
    "frame",
    "frame_into",
    "iter_frames",
    "read_aof",
    "repair_aof",
]

MAGIC: Final = b"DISQAOF\n"
VERSION: Final = 1
HEADER_SIZE: Final = 16
HEADER: Final = MAGIC + VERSION.to_bytes(2, "little") + bytes(6)
RECORD_HEADER_SIZE: Final = 8
# 1.1 GiB: room for a 1 GiB job body plus its metadata. Anything longer is corruption, which also
# keeps a flipped high bit in a length field from making us slice (copy) gigabytes.
MAX_RECORD_LENGTH: Final = 1_181_116_006

AOF_NAME: Final = "disq.aof"
REWRITE_NAME: Final = "disq.aof.rewrite"
# The initial header is written here and renamed into place, so a crash while creating a data
# directory never leaves a disq.aof shorter than its header.
_INIT_NAME: Final = "disq.aof.init"
LOCK_NAME: Final = "lock"

_HDR: Final = struct.Struct("<IIB")
_LEN: Final = struct.Struct("<I")
# crc32(type byte + payload) == crc32(payload, crc32(type byte)): with this table the hot paths
# checksum the payload slice they need anyway instead of building a second type+payload copy.
_TYPE_CRC: Final = tuple(zlib.crc32(bytes((t,))) for t in range(256))

_Bytes: TypeAlias = bytes | bytearray | memoryview


# --------------------------------------------------------------------------------------- errors


class AofError(Exception):
    """Base class; ``code`` is stable and machine-readable (for logs, metrics, exit reasons).

    Deliberately not a ``DisqError``: those codes go on the wire, these never do. The server maps
    a failed append to ``PersistenceFailed`` for the client.
    """

    code = "AOF_ERROR"


class AofCorruptError(AofError):
    """The file is damaged somewhere a crash cannot explain; the node must not start on it."""

    code = "AOF_CORRUPT"

    def __init__(self, message: str, *, path: Path, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class AofLockedError(AofError):
    """Another process (or another writer in this process) holds the data directory."""

    code = "AOF_LOCKED"


class AofWriteError(AofError):
    """An append failed. The file was rolled back to its previous end, so a retry is safe."""

    code = "AOF_WRITE"


class AofFsyncError(AofWriteError):
    """fsync failed: the writer is now unusable and the node must restart and replay from disk.

    After a failed fsync Linux may have dropped the dirty pages and marked them clean, so a
    retried fsync can succeed without the data ever reaching the disk ("fsyncgate"). Only a
    re-read of the file tells the truth.
    """

    code = "AOF_FSYNC"


class AofRewriteError(AofError):
    """A rewrite failed or was misused; the live file is unaffected and keeps taking writes."""

    code = "AOF_REWRITE"


# -------------------------------------------------------------------------------------- framing


def frame(rtype: int, payload: _Bytes) -> bytes:
    """Return one framed record. ``payload`` must be a byte buffer (itemsize 1)."""
    if not 0 < rtype < 256:
        raise ValueError(f"record type must be 1..255, got {rtype}")
    n = len(payload) + 1
    if n > MAX_RECORD_LENGTH:
        raise ValueError(f"record of {n} bytes exceeds the maximum of {MAX_RECORD_LENGTH}")
    return _HDR.pack(n, zlib.crc32(payload, _TYPE_CRC[rtype]), rtype) + payload


def frame_into(out: bytearray, rtype: int, payload: _Bytes) -> None:
    """Append one framed record to ``out`` (a group-commit buffer) without a temporary copy."""
    if not 0 < rtype < 256:
        raise ValueError(f"record type must be 1..255, got {rtype}")
    n = len(payload) + 1
    if n > MAX_RECORD_LENGTH:
        raise ValueError(f"record of {n} bytes exceeds the maximum of {MAX_RECORD_LENGTH}")
    out += _HDR.pack(n, zlib.crc32(payload, _TYPE_CRC[rtype]), rtype)
    out += payload


def count_records(data: _Bytes) -> int:
    """Number of records in a buffer of whole framed records (checks framing, not CRCs)."""
    unpack = _LEN.unpack_from
    end = len(data)
    off = n = 0
    while off < end:
        if end - off < RECORD_HEADER_SIZE + 1:
            raise ValueError(f"partial record at offset {off} of a {end}-byte buffer")
        off += RECORD_HEADER_SIZE + unpack(data, off)[0]
        n += 1
    if off != end:
        raise ValueError(f"last record runs {off - end} bytes past the end of the buffer")
    return n


# -------------------------------------------------------------------------------------- reading


class AofReadResult:
    """What ``read_aof`` found.

    ``records`` holds ``(rtype, payload)`` in file order; each payload is an independent ``bytes``
    object (not a view), so decoders may keep it without pinning the whole file in memory.
    ``valid_end`` is the offset just after the last good record (the file's size afterwards,
    unless the caller asked not to truncate); ``torn_bytes`` is how many bytes after it were cut.
    """

    __slots__ = ("records", "torn_bytes", "valid_end")

    def __init__(self, records: list[tuple[int, bytes]], valid_end: int, torn_bytes: int) -> None:
        self.records = records
        self.valid_end = valid_end
        self.torn_bytes = torn_bytes

    def __repr__(self) -> str:
        return (
            f"AofReadResult(records=<{len(self.records)}>, valid_end={self.valid_end}, "
            f"torn_bytes={self.torn_bytes})"
        )


def _repair_hint(path: Path) -> str:
    return f"run: disq-node --repair-aof {path.parent}"


def _check_header(buf: bytes, path: Path) -> None:
    if len(buf) < HEADER_SIZE:
        raise AofCorruptError(
            f"{path}: file is {len(buf)} bytes, shorter than the {HEADER_SIZE}-byte AOF header; "
            "it was not written by disq (disq creates it atomically). Move it away to start "
            "with an empty data directory.",
            path=path,
            offset=0,
        )
    if buf[:8] != MAGIC:
        raise AofCorruptError(
            f"{path}: not a disq append-only file (bad magic {buf[:8]!r} at offset 0). "
            "Move it away to start with an empty data directory.",
            path=path,
            offset=0,
        )
    version = int.from_bytes(buf[8:10], "little")
    if version != VERSION:
        # Reserved bytes 10..16 are ignored on purpose: a format change bumps the version.
        raise AofCorruptError(
            f"{path}: AOF format version {version} is not supported (this disq reads version "
            f"{VERSION}); run the disq release that wrote it.",
            path=path,
            offset=8,
        )


def _scan(buf: bytes, start: int, records: list[tuple[int, bytes]]) -> int:
    """Append good records from ``start`` on; return the offset of the first bad one (or EOF).

    This is the start-up hot loop (a million records must scan well under a second), so it does
    one unpack, one slice and one crc32 per record and checks nothing it can check afterwards.
    """
    app = records.append
    unpack = _HDR.unpack_from
    crc32 = zlib.crc32
    type_crc = _TYPE_CRC
    maxlen = MAX_RECORD_LENGTH
    end = len(buf)
    last = end - RECORD_HEADER_SIZE - 1
    off = start
    ln = 0
    while off <= last:
        ln, crc, rtype = unpack(buf, off)
        e = off + 8 + ln
        payload = buf[off + 9 : e]
        if crc32(payload, type_crc[rtype]) != crc or not 0 < ln <= maxlen or not rtype:
            break
        app((rtype, payload))
        off = e
    if off > end:
        # The last record claimed more bytes than the file has and the slice came back short;
        # its CRC matched anyway only by coincidence, so it is bad like any other.
        records.pop()
        off -= 8 + ln
    return off


# Searching behind a bad record (see _find_valid_record) is the only part of reading whose cost
# is not linear in the file size, so it is bounded: past this many candidate offsets we stop and
# let a human decide (repair) instead of stalling start-up for minutes.
_SEARCH_BUDGET: Final = 300_000
# Candidates up to this length are checked by hashing their bytes; longer ones in O(1) with
# _RangeCrc, because hashing every candidate costs O(R^3) behind a torn record of R random bytes.
_DIRECT_CRC_MAX: Final = 16384
_CHECKPOINT_SHIFT: Final = 12

# _SHIFT_TABLES[k] applies T^(2^k), where T^n(v) = crc32(n zero bytes, v) ^ crc32(n zero bytes)
# is linear over GF(2) in v; as four byte-indexed tables it costs four lookups. Built lazily:
# only a damaged file needs them.
_SHIFT_TABLES: list[tuple[list[int], list[int], list[int], list[int]]] = []


class _SearchBudgetExceeded(Exception):
    pass


def _apply_tables(tables: tuple[list[int], list[int], list[int], list[int]], v: int) -> int:
    t0, t1, t2, t3 = tables
    return t0[v & 255] ^ t1[v >> 8 & 255] ^ t2[v >> 16 & 255] ^ t3[v >> 24]


def _shift_tables() -> list[tuple[list[int], list[int], list[int], list[int]]]:
    if not _SHIFT_TABLES:
        zero = zlib.crc32(b"\x00")
        basis = [zlib.crc32(b"\x00", 1 << i) ^ zero for i in range(32)]
        levels = []
        for _ in range(31):  # record lengths are < 2^31
            tables: list[list[int]] = []
            for j in range(4):
                t = [0] * 256
                for byte in range(1, 256):
                    low = byte & -byte
                    t[byte] = t[byte ^ low] ^ basis[8 * j + low.bit_length() - 1]
                tables.append(t)
            level = (tables[0], tables[1], tables[2], tables[3])
            levels.append(level)
            basis = [_apply_tables(level, v) for v in basis]  # T^(2n) = T^n after T^n
        _SHIFT_TABLES.extend(levels)
    return _SHIFT_TABLES


def _crc_shift(v: int, n: int) -> int:
    """T^n(v): what crc32 register value ``v`` contributes after ``n`` more bytes."""
    tables = _shift_tables()
    k = 0
    while n:
        if n & 1:
            v = _apply_tables(tables[k], v)
        n >>= 1
        k += 1
    return v


class _RangeCrc:
    """crc32 of any range of ``buf[base:end]`` in time independent of the range's length.

    With S(p) = crc32(buf[base:p]): crc32(buf[a:b]) = S(b) ^ T^(b-a)(S(a)). S is kept at every
    4 KiB checkpoint (one C-speed pass), so each S(p) hashes under 4 KiB.
    """

    def __init__(self, buf: bytes, base: int, end: int) -> None:
        self.mv = memoryview(buf)
        self.base = base
        crc32 = zlib.crc32
        mv = self.mv
        step = 1 << _CHECKPOINT_SHIFT
        checkpoints = []
        s = 0
        for p in range(base, end, step):
            checkpoints.append(s)
            s = crc32(mv[p : p + step], s)
        checkpoints.append(s)
        self.checkpoints = checkpoints

    def prefix(self, pos: int) -> int:
        k = (pos - self.base) >> _CHECKPOINT_SHIFT
        return zlib.crc32(self.mv[self.base + (k << _CHECKPOINT_SHIFT) : pos], self.checkpoints[k])

    def crc(self, a: int, b: int) -> int:
        return self.prefix(b) ^ _crc_shift(self.prefix(a), b - a)


_ZERO_BLOCK: Final = bytes(1 << 16)


def _skip_zeros(buf: bytes, pos: int, end: int, nonzero: re.Pattern[bytes]) -> int:
    """First offset at or after ``pos`` holding a non-zero byte (``end`` if none).

    Filesystems can leave hundreds of megabytes of zeros after a crash; memcmp against a zero
    block is an order of magnitude faster than a regex scan over them.
    """
    step = len(_ZERO_BLOCK)
    while buf.startswith(_ZERO_BLOCK, pos, end):
        pos += step
    m = nonzero.search(buf, pos, min(end, pos + step))
    return end if m is None else m.start()


def _find_valid_record(buf: bytes, start: int, end: int) -> int | None:
    """Offset of the first structurally valid, CRC-correct record at or after ``start``.

    Trying every offset in Python would take minutes behind a torn multi-megabyte record, so
    candidates are found with C-speed searches on a necessary condition: a record at ``pos`` has
    ``length <= end - pos - 8``, which pins the high bytes of the little-endian length field
    (all zero when the rest of the file is under 16 MiB). The bound only tightens as ``pos``
    grows, so a pattern chosen at one position stays a valid filter for every later one.
    Raises ``_SearchBudgetExceeded`` rather than run for minutes on pathological input.
    """
    import re

    nonzero = re.compile(rb"[^\x00]")
    unpack = _HDR.unpack_from
    mv = memoryview(buf)
    ranges: _RangeCrc | None = None
    budget = _SEARCH_BUDGET
    last = end - RECORD_HEADER_SIZE - 1
    pos = start
    while pos <= last:
        budget -= 1
        if budget < 0:
            raise _SearchBudgetExceeded
        bound = min(MAX_RECORD_LENGTH, end - pos - 8)
        if bound < 1 << 24:
            zeros = 3 if bound < 1 << 8 else 2 if bound < 1 << 16 else 1
            hit = buf.find(b"\x00" * zeros, pos + 4 - zeros, end)
            if hit < 0:
                return None
            cand = hit - (4 - zeros)
        else:
            m = re.compile(b"[\\x00-\\x%02x]" % (bound >> 24)).search(buf, pos + 3, end)
            if m is None:
                return None
            cand = m.start() - 3
        if cand > last:
            return None
        ln: int
        crc: int
        rtype: int
        ln, crc, rtype = unpack(buf, cand)
        if 0 < ln <= min(MAX_RECORD_LENGTH, end - cand - 8) and rtype:
            a = cand + 8
            if ln <= _DIRECT_CRC_MAX:
                ok = zlib.crc32(mv[a : a + ln]) == crc
            else:
                if ranges is None:
                    ranges = _RangeCrc(buf, start, end)
                ok = ranges.crc(a, a + ln) == crc
            if ok:
                return cand
            pos = cand + 1
        elif ln == 0:
            # Inside a zero run every offset has length 0; jump to where a non-zero byte first
            # enters the length field instead of rejecting the run one offset at a time.
            pos = max(cand + 1, _skip_zeros(buf, cand, end, nonzero) - 3)
        else:
            pos = cand + 1
    return None


def _parse_file(path: Path) -> tuple[bytes, list[tuple[int, bytes]], int]:
    """Read and parse ``path``: (whole file, good records, offset of the first bad record)."""
    with open(path, "rb", buffering=0) as f:
        buf = f.read()
    _check_header(buf, path)
    records: list[tuple[int, bytes]] = []
    # A million new tuples trigger over a thousand collections that cannot find anything (the
    # tuples hold only ints and bytes: no cycles), each also walking whatever the process has
    # already allocated. Pausing the collector for the scan makes them zero.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        bad = _scan(buf, HEADER_SIZE, records)
    finally:
        if gc_was_enabled:
            gc.enable()
    return buf, records, bad


def read_aof(path: Path, *, truncate: bool = True) -> AofReadResult:
    """Read every record of the AOF at ``path``, cutting a torn tail.

    The caller must hold the data directory's lock (open an ``AofWriter`` and use its ``load``),
    because cutting a torn tail under a live writer would destroy its appends.

    * shorter than the header, bad magic, unknown version: ``AofCorruptError``.
    * a bad record (length out of range or past EOF, type 0, CRC mismatch) with no valid record
      starting at any later offset: a torn tail. The file is truncated to ``valid_end`` (unless
      ``truncate`` is false), a warning is logged, and the good records are returned.
    * a bad record followed by any valid record: corruption in the middle, ``AofCorruptError``
      naming the file, the offset and the repair command. The file is left untouched.

    The "any valid record after it" test is conservative on purpose: a payload that itself
    contains a well-formed framed record, torn inside that copy, is reported as corruption, never
    silently cut. Refusing to start is recoverable (repair); dropping acknowledged records is not.
    """
    path = Path(path)
    buf, records, bad = _parse_file(path)
    size = len(buf)
    if bad == size:
        return AofReadResult(records, bad, 0)
    try:
        nxt = _find_valid_record(buf, bad + 1, size)
    except _SearchBudgetExceeded:
        raise AofCorruptError(
            f"{path}: bad record at offset {bad} of {size} bytes, and the {size - bad} bytes "
            "after it are too many to search for further valid records at start-up. If the "
            "node crashed while appending a large job, this is a torn tail and nothing "
            f"acknowledged is lost. To cut the file at offset {bad} (a backup copy of the file "
            f"is kept), {_repair_hint(path)}",
            path=path,
            offset=bad,
        ) from None
    if nxt is not None:
        raise AofCorruptError(
            f"{path}: corrupt record at offset {bad} of {size} bytes, with valid records after "
            f"it (the next at offset {nxt}); this is not a torn write from a crash, so disq "
            f"refuses to start rather than drop them. To keep the {len(records)} records before "
            f"offset {bad} and discard the rest (a backup copy of the file is kept), "
            f"{_repair_hint(path)}",
            path=path,
            offset=bad,
        )
    torn = size - bad
    if truncate:
        _truncate_file(path, bad)
    import structlog

    structlog.get_logger().warning(
        "aof_torn_tail_cut" if truncate else "aof_torn_tail_found",
        path=str(path),
        offset=bad,
        bytes_cut=torn,
        records_kept=len(records),
    )
    return AofReadResult(records, bad, torn)


def repair_aof(path: Path) -> int:
    """Cut the AOF at its first bad record; return how many bytes were dropped (0: file is fine).

    The whole original is first copied to ``disq.aof.corrupt-<unix_ts>`` next to it, so nothing
    is destroyed. Takes the data directory lock: refuses (``AofLockedError``) while a node runs.
    A damaged header cannot be repaired here (``AofCorruptError``): there is no good prefix.
    """
    import time

    path = Path(path)
    lock_fd = _acquire_dir_lock(path.parent)
    try:
        buf, _records, bad = _parse_file(path)
        dropped = len(buf) - bad
        if dropped == 0:
            return 0
        ts = int(time.time())
        backup = path.with_name(f"{path.name}.corrupt-{ts}")
        n = 1
        while backup.exists():
            backup = path.with_name(f"{path.name}.corrupt-{ts}.{n}")
            n += 1
        _write_file_synced(backup, buf, exclusive=True)
        # The backup must be durable before the original loses anything.
        _fsync_dir(path.parent)
        _truncate_file(path, bad)
        import structlog

        structlog.get_logger().warning(
            "aof_repaired", path=str(path), offset=bad, bytes_cut=dropped, backup=str(backup)
        )
        return dropped
    finally:
        os.close(lock_fd)


# ------------------------------------------------------------------------------------- file ops


def _write_all(fd: int, data: _Bytes) -> None:
    n = os.write(fd, data)
    total = len(data)
    if n == total:
        return
    view = memoryview(data)
    while n < total:
        w = os.write(fd, view[n:])
        if w == 0:
            # A regular file only returns 0 for a 0-byte request; never spin on it.
            raise OSError(errno.EIO, "write returned 0")
        n += w


def _fsync_dir(directory: Path) -> None:
    # A rename or create is only durable once the directory itself is synced.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file_synced(path: Path, data: _Bytes, *, exclusive: bool) -> None:
    """Write a whole file and fsync it; ``exclusive`` refuses to overwrite one."""
    mode = os.O_EXCL if exclusive else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode | os.O_CLOEXEC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes, tmp: Path | None = None) -> None:
    """Make ``path`` hold ``data`` or its old content after any crash: write a temporary
    file, fsync it, rename it over ``path``, fsync the directory."""
    tmp = tmp if tmp is not None else path.with_name(path.name + ".tmp")
    _write_file_synced(tmp, data, exclusive=False)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _truncate_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _acquire_dir_lock(directory: Path) -> int:
    """Take the exclusive lock on ``directory/lock``; return its fd (closing it unlocks)."""
    lock_path = directory / LOCK_NAME
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # flock, not fcntl/lockf: flock locks belong to the open file description, so a second
        # open in this same process conflicts too, and the kernel drops them when we die.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        os.close(fd)
        raise AofLockedError(
            f"data directory {directory} is in use by another disq-node (pid {holder} holds "
            f"{lock_path}); two nodes must never share a data directory. Stop that process "
            "or give this node its own directory."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        # Only a hint for the message above; the lock itself is what excludes.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    return fd


# -------------------------------------------------------------------------------------- writing


class FsyncPolicy(enum.Enum):
    """When appended records reach the disk; chosen and enforced by the server.

    ALWAYS: fsync after every group-commit write, before replying. EVERYSEC: a worker thread
    calls ``fsync_in_thread`` about once a second (a crash loses at most ~1 s of writes). NO: leave
    it to the OS.
    """

    ALWAYS = "always"
    EVERYSEC = "everysec"
    NO = "no"


class AofWriter:
    """Owns ``DIR/disq.aof`` for appending, and the rewrite that replaces it.

    Opening locks the directory, removes a rewrite left behind by a crash and creates the file if
    it does not exist. If it existed, call ``load`` (which reads it, cutting a torn tail) before
    the first write: appending behind a torn tail would turn it into corruption in the middle.

    Threading contract: every method belongs to one thread (the event loop), except
    ``fsync_in_thread``, which any other thread may call at any time, concurrently with
    ``write``, rewrites and ``close``. It fsyncs a ``dup`` of the current descriptor taken under a
    small lock, so a concurrent ``commit_rewrite`` or ``close`` can neither close the fd under it
    nor let it sync an unrelated file that reused the fd number. ``write`` takes no lock.
    """

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / AOF_NAME
        self.rewrite_path = self.data_dir / REWRITE_NAME
        self.records_written = 0
        self.bytes_written = 0
        self.rewrites_done = 0
        self._fd_lock = threading.Lock()
        self._fd = -1
        self._size = 0
        self._base_size = 0
        self._rw_fd: int | None = None
        self._rw_size = 0
        # Why the last rewrite stopped on its own, so the caller's next call can say so.
        self._rw_abort_reason: str | None = None
        self._ready = False
        self._closed = False
        self._failed: str | None = None
        self._dir_sync_pending = False
        # Bumped by every commit, so a worker thread whose directory fsync predates the latest
        # rename does not clear the "rename not yet durable" flag that rename set.
        self._renames = 0

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _acquire_dir_lock(self.data_dir)
        try:
            self._remove_leftovers()
            if not self.path.exists():
                self._create()
                self._ready = True
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self._size = self._base_size = os.fstat(self._fd).st_size
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- setup

    def _remove_leftovers(self) -> None:
        for name in (REWRITE_NAME, _INIT_NAME):
            leftover = self.data_dir / name
            try:
                size = leftover.stat().st_size
                leftover.unlink()
            except FileNotFoundError:
                continue
            import structlog

            # The live file is still authoritative: a rewrite only wins by its final rename.
            structlog.get_logger().warning("aof_leftover_removed", path=str(leftover), size=size)

    def _create(self) -> None:
        replace_durably(self.path, HEADER, self.data_dir / _INIT_NAME)

    def load(self) -> AofReadResult:
        """Read the existing records (cutting a torn tail) and make the writer ready."""
        self._check_open()
        result = read_aof(self.path)
        self._size = self._base_size = os.fstat(self._fd).st_size
        self._ready = True
        return result

    # -- state

    @property
    def size(self) -> int:
        """Bytes in the current live file, header included."""
        return self._size

    @property
    def base_size(self) -> int:
        """Size when the file was loaded or last rewritten: the reference for growth triggers."""
        return self._base_size

    @property
    def rewrite_active(self) -> bool:
        return self._rw_fd is not None

    @property
    def rewrite_size(self) -> int:
        """Bytes in the rewrite file so far (0 when no rewrite is active)."""
        return self._rw_size if self._rw_fd is not None else 0

    def rewrite_due(self, min_size: int, growth: float) -> bool:
        """True when the file is at least ``min_size`` and grew by ``growth`` (1.0 = doubled)
        since the last rewrite: the trigger that keeps the file bounded by the live data set."""
        return (
            self._rw_fd is None
            and self._size >= min_size
            and self._size >= self._base_size * (1.0 + growth)
        )

    def _check_open(self) -> None:
        if self._closed:
            raise AofWriteError(f"{self.path}: writer is closed")

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise AofWriteError(
                f"{self.path}: writer disabled after an unrecoverable error ({self._failed}); "
                "restart the node so it replays the file from disk"
            )
        self._check_open()

    def _check_writable(self) -> None:
        self._check_usable()
        if not self._ready:
            raise RuntimeError(f"{self.path} existed: call load() before writing to it")

    # -- appending

    def write(self, data: _Bytes, records: int | None = None) -> None:
        """Append ``data`` (whole framed records: one loop iteration's group-commit buffer).

        ``records`` is how many records ``data`` holds, for the stats counter; when omitted they
        are counted from the length prefixes, which also rejects (``ValueError``, nothing
        written) a buffer that is not whole records. During a rewrite the same bytes also go to the
        rewrite file. On failure the live file is cut back to where it was, ``AofWriteError`` is
        raised and the writer stays usable (e.g. retry after ENOSPC clears). A failure of the
        rewrite file only aborts the rewrite: the live file has the data, so the write succeeds.
        """
        if not data:
            return
        self._check_writable()
        if records is None:
            records = count_records(data)
        n = len(data)
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            self._roll_back(exc)
        self._size += n
        self.bytes_written += n
        self.records_written += records
        if self._rw_fd is not None:
            try:
                _write_all(self._rw_fd, data)
            except OSError as exc:
                self._rewrite_failed("write", exc)
            else:
                self._rw_size += n

    def _roll_back(self, exc: OSError) -> NoReturn:
        # A partial append left in place would sit *before* the retried copy of the same
        # records: corruption in the middle at the next start. So it has to go.
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc2:
            self._failed = f"append failed ({exc}) and the rollback failed too ({exc2})"
            raise AofWriteError(
                f"{self.path}: {self._failed}; the file may end in a partial record, which the "
                "next start will cut as a torn tail"
            ) from exc
        raise AofWriteError(
            f"{self.path}: append of records failed at offset {self._size}: {exc}; the file was "
            "rolled back and nothing was written"
        ) from exc

    def fsync(self) -> None:
        """fsync the live file on the calling (owning) thread; for ``FsyncPolicy.ALWAYS``."""
        self._check_usable()
        try:
            os.fsync(self._fd)
            if self._dir_sync_pending:
                _fsync_dir(self.data_dir)
                self._dir_sync_pending = False
        except OSError as exc:
            self._fsync_failed(exc)

    def fsync_in_thread(self) -> int:
        """fsync from any thread; return a ``bytes_written`` watermark now durable.

        Every byte handed to ``write`` before the watermark (compare with ``bytes_written`` read
        right after that write returned) is on disk when this returns. The watermark is read
        before the fsync starts, so it can only under-report. Raises ``AofFsyncError`` (and
        disables the writer) if the fsync fails; returns the watermark untouched if closed.
        """
        with self._fd_lock:
            if self._closed or self._failed is not None:
                if self._failed is not None:
                    raise AofFsyncError(f"{self.path}: writer disabled ({self._failed})")
                return self.bytes_written
            mark = self.bytes_written
            fd = os.dup(self._fd)
            dir_pending = self._dir_sync_pending
            renames = self._renames
        try:
            os.fsync(fd)
            if dir_pending:
                _fsync_dir(self.data_dir)
                with self._fd_lock:
                    if self._renames == renames:
                        self._dir_sync_pending = False
        except OSError as exc:
            self._fsync_failed(exc)
        finally:
            os.close(fd)
        return mark

    def _fsync_failed(self, exc: OSError) -> NoReturn:
        self._failed = f"fsync failed: {exc}"
        raise AofFsyncError(
            f"{self.path}: fsync failed ({exc}); records written since the last successful "
            "fsync may be lost and a retry cannot tell, so the writer is disabled: restart the "
            "node to replay the file from disk"
        ) from exc

    # -- rewrite

    def begin_rewrite(self) -> None:
        """Start a new file next to the live one; from now on ``write`` appends to both.

        The caller then streams the live data set with ``write_snapshot`` over as many loop
        iterations as it likes. The new file interleaves snapshot chunks and live records in the
        order they happened, so replay must tolerate a live record about a job whose snapshot
        record comes later (that snapshot already reflects it).
        """
        self._check_writable()
        if self._rw_fd is not None:
            raise AofRewriteError(f"{self.rewrite_path}: a rewrite is already in progress")
        try:
            fd = os.open(
                self.rewrite_path,
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
                0o644,
            )
        except OSError as exc:
            raise AofRewriteError(f"{self.rewrite_path}: cannot create: {exc}") from exc
        self._rw_fd = fd
        self._rw_size = 0
        self._rw_abort_reason = None
        try:
            _write_all(fd, HEADER)
        except OSError as exc:
            self._rewrite_failed("header write", exc)
            raise AofRewriteError(f"{self.rewrite_path}: header write failed: {exc}") from exc
        self._rw_size = HEADER_SIZE

    def write_snapshot(self, data: _Bytes) -> None:
        """Append whole framed records to the rewrite file only.

        On failure the rewrite is aborted (its file deleted, which also frees the space an
        ENOSPC is about) and ``AofRewriteError`` is raised; the live file is untouched.
        """
        self._check_writable()
        fd = self._rw_fd
        if fd is None:
            raise self._no_rewrite()
        try:
            _write_all(fd, data)
        except OSError as exc:
            self._rewrite_failed("snapshot write", exc)
            raise AofRewriteError(
                f"{self.rewrite_path}: snapshot write failed, rewrite aborted: {exc}"
            ) from exc
        self._rw_size += len(data)

    def commit_rewrite(self) -> None:
        """Make the rewrite file the live file: fsync it, rename it over ``disq.aof``, sync the
        directory, and keep appending to it. On failure before the rename the rewrite is
        aborted and ``AofRewriteError`` raised; the old file stays live and complete."""
        self._check_writable()
        fd = self._rw_fd
        if fd is None:
            raise self._no_rewrite()
        try:
            # Durable before the rename: otherwise a crash could leave the new name pointing
            # at a file whose contents never reached the disk.
            os.fsync(fd)
            os.replace(self.rewrite_path, self.path)
        except OSError as exc:
            self._rewrite_failed("commit", exc)
            raise AofRewriteError(
                f"{self.rewrite_path}: commit failed, rewrite aborted: {exc}"
            ) from exc
        with self._fd_lock:
            old = self._fd
            self._fd = fd
            self._rw_fd = None
            self._size = self._base_size = self._rw_size
            self._rw_size = 0
            self._renames += 1
        os.close(old)
        self.rewrites_done += 1
        try:
            _fsync_dir(self.data_dir)
        except OSError as exc:
            # The rename happened and both names hold complete files, so nothing is lost yet;
            # the next fsync retries making the rename durable (and fails loudly if it cannot).
            with self._fd_lock:
                self._dir_sync_pending = True
            import structlog

            structlog.get_logger().warning(
                "aof_dir_fsync_failed", path=str(self.data_dir), error=str(exc)
            )

    def abort_rewrite(self) -> None:
        """Drop the rewrite in progress (no-op if none); the live file is unaffected."""
        fd = self._rw_fd
        if fd is None:
            return
        self._rw_fd = None
        self._rw_size = 0
        try:
            os.close(fd)
        finally:
            try:
                self.rewrite_path.unlink()
            except FileNotFoundError:
                pass

    def _no_rewrite(self) -> AofRewriteError:
        why = self._rw_abort_reason
        if why is None:
            return AofRewriteError(f"{self.rewrite_path}: no rewrite in progress")
        return AofRewriteError(f"{self.rewrite_path}: the rewrite was aborted: {why}")

    def _rewrite_failed(self, what: str, exc: OSError) -> None:
        self._rw_abort_reason = f"{what} failed: {exc}"
        import structlog

        structlog.get_logger().warning(
            "aof_rewrite_aborted", path=str(self.rewrite_path), stage=what, error=str(exc)
        )
        try:
            self.abort_rewrite()
        except OSError:
            pass

    # -- lifecycle

    def close(self) -> None:
        """Abort any rewrite, close the file and release the directory lock. Idempotent.

        Does not fsync: the caller decides (a clean shutdown should ``fsync`` first).
        """
        if self._closed:
            return
        try:
            self.abort_rewrite()
        finally:
            with self._fd_lock:
                self._closed = True
                fd, self._fd = self._fd, -1
            try:
                if fd >= 0:
                    os.close(fd)
            finally:
                os.close(self._lock_fd)

    def __enter__(self) -> AofWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def iter_frames(data: _Bytes) -> Iterator[tuple[int, bytes]]:
    """Decode a buffer of whole framed records (tests and tools; the server uses ``read_aof``)."""
    buf = bytes(data)
    records: list[tuple[int, bytes]] = []
    off = _scan(buf, 0, records)
    if off != len(buf):
        raise ValueError(f"bad record at offset {off} of a {len(buf)}-byte buffer")
    yield from records
