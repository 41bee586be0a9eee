"""Records of a fixed head and sized parts: the head (a struct) ends with one length per
part, and the parts follow it, in order. The routes' and the schedules' records are laid out
so (route_records.py, schedule_records.py), on disk and on the wire alike.

Their text is UTF-8 with surrogateescape: any bytes a name was given round-trip.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any


def text_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def bytes_text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def pack(head: struct.Struct, fixed: tuple[Any, ...], parts: Sequence[bytes]) -> bytes:
    """``fixed``, then each part's length, packed by ``head``; then the parts."""
    return head.pack(*fixed, *[len(p) for p in parts]) + b"".join(parts)


def unpack(
    head: struct.Struct, raw: bytes, fixed: int, error: Callable[[str], Exception], what: str
) -> tuple[tuple[Any, ...], list[bytes]]:
    """The first ``fixed`` fields of the head and the parts; ``error`` (named after the
    record ``what``) when the head does not unpack or the parts do not fill the record."""
    try:
        values = head.unpack_from(raw, 0)
    except struct.error as exc:
        raise error(f"bad {what} record: {exc}") from exc
    pos = head.size
    parts: list[bytes] = []
    for n in values[fixed:]:
        parts.append(raw[pos : pos + n])
        pos += n
    if pos != len(raw):
        raise error(f"{what} record length does not match its fields")
    return values[:fixed], parts
