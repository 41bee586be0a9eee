"""AOF record framing and buffer scanning: pure functions of bytes (no files, no os, no threads).

File layout (``DIR/disq.aof``, all integers little endian)::

    header   magic b"DISQAOF\\n" | u16 version (=1) | 6 reserved bytes (written as zero)
    record   u32 length | u32 crc32 | u8 type | payload
             length = 1 + len(payload); crc32 = zlib.crc32(type byte + payload)

This module knows nothing about what a payload means: a record is ``(rtype, payload)`` with
``rtype`` in 1..255. Type 0 is never written, so a zero-filled region (what some filesystems leave
after a crash that extended the file but lost its data) can never parse as a record.

The cores frame their records with ``frame`` themselves, so this module may import only the
standard library's struct, zlib, re, typing and collections.abc: importing it must never pull
in file IO. Reading files is ``aof_reader``; writing them is ``aof_writer``.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Final, TypeAlias

if TYPE_CHECKING:
    import re
    from collections.abc import Iterator

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_RECORD_LENGTH",
    "RECORD_HEADER_SIZE",
    "VERSION",
    "Bytes",
    "SearchBudgetExceeded",
    "count_records",
    "find_valid_record",
    "frame",
    "frame_into",
    "iter_frames",
    "scan",
    "scan_split",
    "type_mask",
]

MAGIC: Final = b"DISQAOF\n"
VERSION: Final = 1
HEADER_SIZE: Final = 16
HEADER: Final = MAGIC + VERSION.to_bytes(2, "little") + bytes(6)
RECORD_HEADER_SIZE: Final = 8
# 1.1 GiB: room for a 1 GiB job body plus its metadata. Anything longer is corruption, which also
# keeps a flipped high bit in a length field from making us slice (copy) gigabytes.
MAX_RECORD_LENGTH: Final = 1_181_116_006

_HDR: Final = struct.Struct("<IIB")
_LEN: Final = struct.Struct("<I")
# crc32(type byte + payload) == crc32(payload, crc32(type byte)): with this table the hot paths
# checksum the payload slice they need anyway instead of building a second type+payload copy.
_TYPE_CRC: Final = tuple(zlib.crc32(bytes((t,))) for t in range(256))

Bytes: TypeAlias = bytes | bytearray | memoryview


# -------------------------------------------------------------------------------------- framing


def frame(rtype: int, payload: Bytes) -> bytes:
    """Return one framed record. ``payload`` must be a byte buffer (itemsize 1)."""
    if not 0 < rtype < 256:
        raise ValueError(f"record type must be 1..255, got {rtype}")
    n = len(payload) + 1
    if n > MAX_RECORD_LENGTH:
        raise ValueError(f"record of {n} bytes exceeds the maximum of {MAX_RECORD_LENGTH}")
    return _HDR.pack(n, zlib.crc32(payload, _TYPE_CRC[rtype]), rtype) + payload


def frame_into(out: bytearray, rtype: int, payload: Bytes) -> None:
    """Append one framed record to ``out`` (a group-commit buffer) without a temporary copy."""
    if not 0 < rtype < 256:
        raise ValueError(f"record type must be 1..255, got {rtype}")
    n = len(payload) + 1
    if n > MAX_RECORD_LENGTH:
        raise ValueError(f"record of {n} bytes exceeds the maximum of {MAX_RECORD_LENGTH}")
    out += _HDR.pack(n, zlib.crc32(payload, _TYPE_CRC[rtype]), rtype)
    out += payload


def count_records(data: Bytes) -> int:
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


def iter_frames(data: Bytes) -> Iterator[tuple[int, bytes]]:
    """Decode a buffer of whole framed records (tests and tools; the server uses ``read_aof``)."""
    buf = bytes(data)
    records: list[tuple[int, bytes]] = []
    off = scan(buf, 0, records)
    if off != len(buf):
        raise ValueError(f"bad record at offset {off} of a {len(buf)}-byte buffer")
    yield from records


# ------------------------------------------------------------------------------------- scanning


def scan(buf: bytes, start: int, records: list[tuple[int, bytes]]) -> int:
    """Append good records from ``start`` on; return the offset of the first bad one (or EOF).

    This is the start-up hot loop (a million records must scan well under a second): it is
    ``scan_split``'s, with no record type kept in place.
    """
    return scan_split(buf, start, records, [], _NO_TYPES)


def type_mask(rtypes: tuple[int, ...]) -> bytes:
    """A 256-byte table for ``scan_split``: non-zero at each of ``rtypes``."""
    mask = bytearray(256)
    for t in rtypes:
        mask[t] = 1
    return bytes(mask)


_NO_TYPES = bytes(256)  # a type_mask of no type


def scan_split(
    buf: bytes, start: int, records: list[tuple[int, bytes]], offsets: list[int], mask: bytes
) -> int:
    """``scan``, except that a good record whose type is set in ``mask`` (``type_mask``) is
    not copied out: its offset in ``buf`` (its header's) goes to ``offsets``.

    Why: a million jobs' records copied into a million ``bytes`` only to be decoded once
    cost a second of a restart and the peak memory of a second copy of the file; their
    reader decodes them in place instead (the Disque core's LOADJOB and DELJOB, aof.py).
    Checks every record exactly as ``scan`` does; returns the offset of the first bad one.
    """
    app = records.append
    put = offsets.append
    crc32 = zlib.crc32
    type_crc = _TYPE_CRC
    maxlen = MAX_RECORD_LENGTH
    end = len(buf)
    last = end - RECORD_HEADER_SIZE - 1
    off = start
    while off <= last:
        # The header read byte by byte: compiled, nine byte reads cost less than the tuple
        # and the ints of an unpack.
        ln = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16 | buf[off + 3] << 24
        rtype = buf[off + 8]
        e = off + 8 + ln
        if e > end or not 0 < ln <= maxlen or not rtype:
            break
        crc = buf[off + 4] | buf[off + 5] << 8 | buf[off + 6] << 16 | buf[off + 7] << 24
        payload = buf[off + 9 : e]
        if crc32(payload, type_crc[rtype]) != crc:
            break
        if mask[rtype]:
            put(off)
        else:
            app((rtype, payload))
        off = e
    return off


# Searching behind a bad record (see find_valid_record) is the only part of reading whose cost
# is not linear in the file size, so it is bounded: past this many candidate offsets we stop and
# let a human decide (repair) instead of stalling start-up for minutes.
# Not Final: compiled (mypyc), a Final is inlined, and the tests lower this one.
_SEARCH_BUDGET = 300_000
# Candidates up to this length are checked by hashing their bytes; longer ones in O(1) with
# _RangeCrc, because hashing every candidate costs O(R^3) behind a torn record of R random bytes.
_DIRECT_CRC_MAX: Final = 16384
_CHECKPOINT_SHIFT: Final = 12

# _SHIFT_TABLES[k] applies T^(2^k), where T^n(v) = crc32(n zero bytes, v) ^ crc32(n zero bytes)
# is linear over GF(2) in v; as four byte-indexed tables it costs four lookups. Built lazily:
# only a damaged file needs them.
_SHIFT_TABLES: list[tuple[list[int], list[int], list[int], list[int]]] = []


class SearchBudgetExceeded(Exception):
    """``find_valid_record`` gave up: too many candidate offsets to check at start-up."""


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


def find_valid_record(buf: bytes, start: int, end: int) -> int | None:
    """Offset of the first structurally valid, CRC-correct record at or after ``start``.

    Trying every offset in Python would take minutes behind a torn multi-megabyte record, so
    candidates are found with C-speed searches on a necessary condition: a record at ``pos`` has
    ``length <= end - pos - 8``, which pins the high bytes of the little-endian length field
    (all zero when the rest of the file is under 16 MiB). The bound only tightens as ``pos``
    grows, so a pattern chosen at one position stays a valid filter for every later one.
    Raises ``SearchBudgetExceeded`` rather than run for minutes on pathological input.
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
            raise SearchBudgetExceeded
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
