"""disq.server.frame_bound: a flush's messages as frames under the receiver's limit.

A message over the limit on its own is refused before it is encoded (an encoder never sees
it: a frame past 2 GiB cannot be serialized, one past 4 GiB cannot be length-prefixed); the
rest are split in order; an estimate that came out low is caught on the encoded bytes.
"""

from __future__ import annotations

from disq.core.messages import GotJob, JobData, Message, ReplJob, SchedSync, ScheduleDef, YourJobs
from disq.server.frame_bound import MESSAGE_OVERHEAD_BYTES, encode_within, size_hint
from disq.server.peer_wire import WireCounters, decode_frame, encode_frame


def _job(i: int, size: int) -> ReplJob:
    return ReplJob.of(JobData(f"D-{i:08x}-{i:024x}-0e10", "q", b"b" * size, 2, i, 0, 300, 3600))


class Encoder:
    def __init__(self) -> None:
        self.calls: list[list[Message]] = []
        self.seq = 0

    def __call__(self, msgs: list[Message]) -> bytes:
        self.calls.append(list(msgs))
        self.seq += 1
        return encode_frame("a" * 40, self.seq, msgs, WireCounters(), True)


def _messages(frames: list[tuple[bytes, int]]) -> list[Message]:
    out: list[Message] = []
    for data, n in frames:
        _node, _seq, msgs = decode_frame(data, WireCounters())
        assert len(msgs) == n
        out.extend(msgs)
    return out


def test_everything_under_the_limit_is_one_frame() -> None:
    enc = Encoder()
    msgs: list[Message] = [_job(i, 100) for i in range(50)] + [GotJob("D-x")]
    frames, refused = encode_within(msgs, 1 << 20, enc)
    assert refused == [] and len(frames) == 1 and len(enc.calls) == 1
    assert _messages(frames) == msgs


def test_a_message_over_the_limit_is_refused_without_being_encoded() -> None:
    enc = Encoder()
    limit = 64 << 10
    too_big = _job(2, 100 << 10)
    msgs: list[Message] = [_job(1, 10), too_big, _job(3, 10)]
    frames, refused = encode_within(msgs, limit, enc)
    assert refused == [("ReplJob", size_hint(too_big))]
    assert all(too_big not in call for call in enc.calls)
    assert _messages(frames) == [_job(1, 10), _job(3, 10)]


def test_messages_are_split_in_order_into_frames_under_the_limit() -> None:
    enc = Encoder()
    limit = 100 << 10
    msgs: list[Message] = [_job(i, 30 << 10) for i in range(10)]
    frames, refused = encode_within(msgs, limit, enc)
    assert refused == []
    assert len(frames) > 1 and all(len(data) <= limit for data, _n in frames)
    assert _messages(frames) == msgs


def test_an_estimate_that_came_out_low_is_split_on_the_encoded_bytes() -> None:
    # GotJob's estimate is the flat overhead; ids far longer than it make the encoded frame
    # bigger than the estimate said, and the frame is split in halves until each fits.
    enc = Encoder()
    msgs: list[Message] = [GotJob("D-" + "x" * 4000) for _ in range(8)]
    limit = 10_000
    assert sum(size_hint(m) for m in msgs) == 8 * MESSAGE_OVERHEAD_BYTES < limit
    frames, refused = encode_within(msgs, limit, enc)
    assert refused == [] and all(len(data) <= limit for data, _n in frames)
    assert _messages(frames) == msgs


def test_size_hints_count_the_bodies() -> None:
    job = JobData("D-1", "q", b"x" * 1000, 1, 1, 0, 1, 1)
    assert size_hint(ReplJob.of(job)) >= 1000
    assert size_hint(YourJobs.of([job, job])) >= 2000
    entry = ScheduleDef("s", "* * * * *", "UTC", "q", b"y" * 5000)
    assert size_hint(SchedSync(entries=[entry, entry])) >= 10_000
