"""The lifecycle event log: sequence numbers, segments, retention, restart, torn tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from disq.core import events as ev
from disq.persistence.event_log import EventLog, decode, encode, scan


def buf(n: int, t0: int = 1_000, kind: int = ev.ENQUEUED, queue: str = "q") -> ev.EventBuffer:
    b = ev.EventBuffer()
    for i in range(n):
        b.add(kind, t0 + i, queue, f"D-{i:08x}-" + "A" * 24 + "-05a1", i % 3, 100 + i)
    return b


def test_buffer_take_empties_it_and_disabled_records_nothing() -> None:
    b = buf(3)
    taken = b.take()
    assert len(taken) == 3 and len(b) == 0
    off = ev.EventBuffer(enabled=False)
    off.add(ev.ACKED, 1, "q", "id", 0, 0)
    assert len(off) == 0


def test_encode_decode_round_trip_and_torn_or_corrupt_tails() -> None:
    b = buf(5, queue="qu\udcff")
    b.add(ev.DELIVERED, 2000, "", 7, 2, 0)  # a beanstalk job's numeric id, an empty queue
    one = encode(b, 10)
    events, good = decode(one)
    assert good == len(one)
    assert [e.seq for e in events] == [10, 11, 12, 13, 14, 15]
    assert events[0].kind == "enqueued" and events[0].queue == "qu\udcff"
    assert (events[4].attempt, events[4].size, events[4].time_ms) == (1, 104, 1004)
    assert (events[5].job_id, events[5].queue, events[5].kind) == ("7", "", "delivered")
    two = encode(buf(3), 16)
    data = one + two
    assert [e.seq for e in decode(data)[0]] == list(range(10, 19))
    assert [e.seq for e in decode(data, from_seq=16)[0]] == [16, 17, 18]
    for cut in range(len(data)):
        part, at = decode(data[:cut])
        # Whole frames only: nothing of a frame that was cut.
        assert len(part) == (0 if cut < len(one) else 6 if cut < len(data) else 9)
        assert at == (0 if cut < len(one) else len(one))
    bad = bytearray(data)
    bad[-1] ^= 0xFF  # corrupt the second frame
    assert [e.seq for e in decode(bad)[0]] == list(range(10, 16))


@pytest.mark.parametrize("on_disk", [True, False])
def test_sequence_segments_and_size_bound(tmp_path: Path, on_disk: bool) -> None:
    log = EventLog(tmp_path / "ev" if on_disk else None, segment_bytes=1024, max_bytes=4096)
    for _ in range(40):
        log.append(buf(5))
    assert log.next_seq == 201
    assert log.total_bytes <= 4096 + 1024
    assert len(log.segments) >= 2
    first = log.first_seq
    assert first > 1  # the oldest segments were dropped
    got = log.read(0, 10_000)
    assert [e.seq for e in got] == list(range(first, 201))
    assert [e.seq for e in log.read(first + 2, 3)] == [first + 2, first + 3, first + 4]
    if on_disk:
        assert len(list((tmp_path / "ev").iterdir())) == len(log.segments)


def test_retention_by_age_and_time_filter(tmp_path: Path) -> None:
    log = EventLog(tmp_path, segment_bytes=1024, retention_ms=10_000)
    log.append(buf(20, t0=0))
    log.append(buf(20, t0=5_000))
    log.append(buf(20, t0=100_000))  # the first segments are now far past retention
    assert log.first_seq > 1
    assert all(e.time_ms >= 100_000 for e in log.read(0, 1000, since_ms=100_000))


def test_restart_keeps_sequence_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.append(buf(7))
    seg = log.segments[-1].path
    assert seg is not None
    with open(seg, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn write
    again = EventLog(tmp_path)
    assert again.next_seq == 8
    assert [e.seq for e in again.read(1, 100)] == list(range(1, 8))
    again.append(buf(2))
    assert [e.seq for e in EventLog(tmp_path).read(7, 100)] == [7, 8, 9]


def test_a_deferred_log_writes_on_flush_and_readers_see_everything(tmp_path: Path) -> None:
    log = EventLog(tmp_path, segment_bytes=1024, deferred=True)
    log.append(buf(3))
    log.append(buf(2))
    seg = log.segments[-1].path
    assert seg is not None
    assert log.has_unwritten and seg.read_bytes() == b""  # nothing written yet
    assert EventLog(tmp_path).next_seq == 1  # another reader of the files sees none of it
    assert [e.seq for e in log.read(1, 100)] == [1, 2, 3, 4, 5]  # a read writes them first
    assert not log.has_unwritten
    assert [e.seq for e in decode(seg.read_bytes())[0]] == [1, 2, 3, 4, 5]
    # A segment that fills up writes what it owes before the next one starts.
    for _ in range(30):
        log.append(buf(5))
    log.close()
    assert not log.has_unwritten
    again = EventLog(tmp_path)
    assert again.next_seq == log.next_seq == 156
    got = again.read(0, 10_000)
    assert [e.seq for e in got] == list(range(1, 156))


@pytest.mark.parametrize("cut", [0, 1, 7, 8, 20, -1])
def test_scan_agrees_with_decode_on_whole_torn_and_corrupt_segments(cut: int) -> None:
    # What a start-up reads of the last segment: the span of its whole frames, the next
    # sequence number and the last event, the same as decoding it all would give.
    data = encode(buf(5), 1) + encode(buf(4, t0=5_000), 6) + encode(buf(2, t0=9_000), 10)
    if cut > 0:
        data = data[:-cut]  # torn inside (or at the edge of) the last frame
    elif cut < 0:
        data = data[:-3] + b"\x00\x00\x00"  # its payload corrupt: the CRC fails
    events, good = decode(data)
    span, next_seq, last = scan(data)
    assert span == good
    assert next_seq == events[-1].seq + 1
    assert last == events[-1:]
    assert scan(b"") == (0, 0, [])
