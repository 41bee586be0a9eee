"""AOF record framing: pure functions of bytes, no files (``disq/persistence/framing.py``)."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from disq.persistence import framing
from disq.persistence.framing import (
    HEADER,
    MAX_RECORD_LENGTH,
    count_records,
    frame,
    frame_into,
    iter_frames,
)


def test_frame_layout_is_the_documented_one() -> None:
    f = frame(7, b"hello")
    length, crc, rtype = struct.unpack_from("<IIB", f)
    assert (length, rtype) == (6, 7)
    assert crc == zlib.crc32(b"\x07hello")
    assert f[9:] == b"hello"
    assert HEADER == b"DISQAOF\n\x01\x00" + bytes(6)


def test_frame_into_matches_frame_and_accepts_buffers() -> None:
    buf = bytearray()
    frame_into(buf, 1, b"a")
    frame_into(buf, 2, memoryview(b"bc"))
    frame_into(buf, 3, bytearray(b""))
    assert bytes(buf) == frame(1, b"a") + frame(2, b"bc") + frame(3, b"")
    assert count_records(buf) == 3
    assert list(iter_frames(buf)) == [(1, b"a"), (2, b"bc"), (3, b"")]


@pytest.mark.parametrize("rtype", [0, 256, -1])
def test_frame_rejects_bad_types(rtype: int) -> None:
    with pytest.raises(ValueError):
        frame(rtype, b"x")
    with pytest.raises(ValueError):
        frame_into(bytearray(), rtype, b"x")


def test_count_records_rejects_partial_buffers() -> None:
    data = frame(1, b"abc") + frame(2, b"de")
    with pytest.raises(ValueError):
        count_records(data[:-1])
    with pytest.raises(ValueError):
        count_records(data + b"\x01")


def test_range_crc_matches_zlib() -> None:
    import random

    rnd = random.Random(7)
    buf = os.urandom(50_000)
    ranges = framing._RangeCrc(buf, 100, len(buf))
    cases = [(100, 100), (100, len(buf)), (len(buf), len(buf)), (100 + 4096, 100 + 8192)]
    for _ in range(500):
        a = rnd.randrange(100, len(buf) + 1)
        cases.append((a, rnd.randrange(a, len(buf) + 1)))
    for a, b in cases:
        assert ranges.crc(a, b) == zlib.crc32(buf[a:b]), (a, b)


def test_max_record_length_is_about_1_1_gib() -> None:
    assert 1 << 30 < MAX_RECORD_LENGTH < 1.2 * (1 << 30)
