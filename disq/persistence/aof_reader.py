"""Reading the append-only file at start-up, and repairing it (format in ``framing``).

Crash model. A crash can leave the last group-commit write partially on disk: the file then ends
in a *torn tail*, which ``read_aof`` cuts (with a warning) because those records were never
acknowledged as durable under any fsync policy. A bad record with good records *after* it cannot
come from a torn write; that is corruption, and silently dropping everything behind it would lose
acknowledged data, so we refuse to start and name the repair command instead.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from disq.persistence.aof_errors import AofCorruptError
from disq.persistence.framing import (
    HEADER_SIZE,
    MAGIC,
    VERSION,
    SearchBudgetExceeded,
    find_valid_record,
    scan,
    scan_split,
    type_mask,
)
from disq.persistence.fs import acquire_dir_lock, fsync_dir, truncate_file, write_file_synced

__all__ = ["AofReadResult", "read_aof", "repair_aof"]


class AofReadResult:
    """What ``read_aof`` found.

    ``records`` holds ``(rtype, payload)`` in file order; each payload is an independent ``bytes``
    object (not a view), so decoders may keep it without pinning the whole file in memory.
    ``valid_end`` is the offset just after the last good record (the file's size afterwards,
    unless the caller asked not to truncate); ``torn_bytes`` is how many bytes after it were cut.
    The records of the types asked for ``by_offset`` are not in ``records``: ``offsets`` holds
    where each starts (its header) in ``buf``, the whole file, in file order.
    """

    __slots__ = ("buf", "offsets", "records", "torn_bytes", "valid_end")

    def __init__(
        self,
        records: list[tuple[int, bytes]],
        valid_end: int,
        torn_bytes: int,
        buf: bytes = b"",
        offsets: list[int] | None = None,
    ) -> None:
        self.records = records
        self.valid_end = valid_end
        self.torn_bytes = torn_bytes
        self.buf = buf
        self.offsets: list[int] = [] if offsets is None else offsets

    def __repr__(self) -> str:
        return (
            f"AofReadResult(records=<{len(self.records)}>, offsets=<{len(self.offsets)}>, "
            f"valid_end={self.valid_end}, torn_bytes={self.torn_bytes})"
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


def _parse_file(
    path: Path, by_offset: tuple[int, ...] = (), offsets: list[int] | None = None
) -> tuple[bytes, list[tuple[int, bytes]], int]:
    """Read and parse ``path``: (whole file, good records, offset of the first bad record).
    The records of the types in ``by_offset`` go to ``offsets`` instead (``scan_split``)."""
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
        if by_offset:
            assert offsets is not None
            bad = scan_split(buf, HEADER_SIZE, records, offsets, type_mask(by_offset))
        else:
            bad = scan(buf, HEADER_SIZE, records)
    finally:
        if gc_was_enabled:
            gc.enable()
    return buf, records, bad


def read_aof(
    path: Path, *, truncate: bool = True, by_offset: tuple[int, ...] = ()
) -> AofReadResult:
    """Read every record of the AOF at ``path``, cutting a torn tail.

    The records of the types in ``by_offset`` are left in the file's buffer: the result's
    ``offsets`` say where (a restart decodes a million jobs' records in place).

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
    offsets: list[int] = []
    buf, records, bad = _parse_file(path, by_offset, offsets)
    kept = buf if by_offset else b""
    size = len(buf)
    if bad == size:
        return AofReadResult(records, bad, 0, kept, offsets)
    try:
        nxt = find_valid_record(buf, bad + 1, size)
    except SearchBudgetExceeded:
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
            f"refuses to start rather than drop them. To keep the {len(records) + len(offsets)} "
            f"records before offset {bad} and discard the rest (a backup copy of the file is "
            f"kept), {_repair_hint(path)}",
            path=path,
            offset=bad,
        )
    torn = size - bad
    if truncate:
        truncate_file(path, bad)
    from disq.logging import get_logger

    get_logger().warning(
        "aof_torn_tail_cut" if truncate else "aof_torn_tail_found",
        path=str(path),
        offset=bad,
        bytes_cut=torn,
        records_kept=len(records) + len(offsets),
    )
    return AofReadResult(records, bad, torn, kept, offsets)


def repair_aof(path: Path) -> int:
    """Cut the AOF at its first bad record; return how many bytes were dropped (0: file is fine).

    The whole original is first copied to ``disq.aof.corrupt-<unix_ts>`` next to it, so nothing
    is destroyed. Takes the data directory lock: refuses (``AofLockedError``) while a node runs.
    A damaged header cannot be repaired here (``AofCorruptError``): there is no good prefix.
    """
    import time

    path = Path(path)
    lock_fd = acquire_dir_lock(path.parent)
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
        write_file_synced(backup, buf, exclusive=True)
        # The backup must be durable before the original loses anything.
        fsync_dir(path.parent)
        truncate_file(path, bad)
        from disq.logging import get_logger

        get_logger().warning(
            "aof_repaired", path=str(path), offset=bad, bytes_cut=dropped, backup=str(backup)
        )
        return dropped
    finally:
        os.close(lock_fd)
