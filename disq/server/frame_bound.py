"""Frames under a size limit: a flush's messages for one peer, encoded as one frame or, when
they would not fit the receiver's limit, as several, in order.

A frame over the limit of the path that carries it is not sent at all: a job lane's receiver
closes the lane at a length past its limit (job_lane.MAX_FRAME_BYTES, announced in the Link
handshake), so writing one would end the link, and the protocols' retry would resend the same
message into the same failure for ever; protobuf cannot serialize a message past 2 GiB, and a
lane's 4-byte length prefix cannot say 4 GiB. So the size of each message is estimated before
anything is encoded (its bodies: a job's, a schedule's), and a message over the limit on its
own is refused and reported to the caller, which logs it with its type and size and counts it;
the rest still leave. The estimate is checked against the encoded bytes: a frame that came out
over the limit anyway is split in halves until each part fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from disq.core.messages import Message, ReplJob, Result, SchedSync, YourJobs

__all__ = ["MESSAGE_OVERHEAD_BYTES", "STREAM_MAX_FRAME_BYTES", "encode_within", "size_hint"]

# What a message costs beyond its bodies: ids, queue names, counters and protobuf's tags. An
# over-estimate is harmless (a frame split earlier); the encoded check catches the rest.
MESSAGE_OVERHEAD_BYTES = 256
# protobuf's limit for one serialized message (the gRPC stream's frames).
STREAM_MAX_FRAME_BYTES = (2 << 30) - 1


_BODY_TYPES = frozenset((ReplJob, YourJobs, SchedSync, Result))
_RECORD = attrgetter("record")


def size_hint(msg: Message) -> int:
    """An estimate of ``msg``'s encoded size: its bodies plus a fixed overhead per record."""
    if type(msg) is ReplJob:
        return len(msg.record) + MESSAGE_OVERHEAD_BYTES  # the record has body and queue
    if type(msg) is YourJobs:
        records = msg.records
        return sum(map(len, records)) + MESSAGE_OVERHEAD_BYTES * (1 + len(records))
    if type(msg) is SchedSync:
        entries = msg.entries
        return sum(len(e.body) + len(e.spec) for e in entries) + MESSAGE_OVERHEAD_BYTES * (
            1 + len(entries) + len(msg.tick_names)
        )
    if type(msg) is Result:
        return len(msg.value) + MESSAGE_OVERHEAD_BYTES
    return MESSAGE_OVERHEAD_BYTES


def encode_within(
    msgs: Sequence[Message],
    limit: int,
    encode: Callable[[list[Message]], bytes],
) -> tuple[list[tuple[bytes, int]], list[tuple[str, int]]]:
    """``msgs`` as frames of at most ``limit`` bytes each, in order, through ``encode``, each
    with the number of messages it carries; and the messages refused (type name, estimated
    or encoded size), each over ``limit`` alone."""
    # The common case first, in one cheap pass: the whole flush fits, one frame. Only the
    # bodies are looked at (a type test per message: this runs on every flush to a peer).
    # map/set/attrgetter run in C: a flush of a thousand GotJobs pays ~20 ns a message.
    types = set(map(type, msgs))
    if types.isdisjoint(_BODY_TYPES):
        bodies = 0
    elif len(types) == 1 and ReplJob in types:
        bodies = sum(map(len, map(_RECORD, msgs)))
    else:
        bodies = sum(size_hint(m) for m in msgs if type(m) in _BODY_TYPES)
    if bodies + len(msgs) * MESSAGE_OVERHEAD_BYTES <= limit:
        group = msgs if isinstance(msgs, list) else list(msgs)
        data = encode(group)
        if len(data) <= limit:
            return [(data, len(group))], []
    return _split(msgs, limit, encode)


def _split(
    msgs: Sequence[Message],
    limit: int,
    encode: Callable[[list[Message]], bytes],
) -> tuple[list[tuple[bytes, int]], list[tuple[str, int]]]:
    frames: list[tuple[bytes, int]] = []
    refused: list[tuple[str, int]] = []
    group: list[Message] = []
    size = 0
    for msg in msgs:
        n = size_hint(msg)
        if n > limit:
            refused.append((type(msg).__name__, n))
            continue
        if group and size + n > limit:
            _emit(group, limit, encode, frames, refused)
            group = []
            size = 0
        group.append(msg)
        size += n
    if group:
        _emit(group, limit, encode, frames, refused)
    return frames, refused


def _emit(
    group: list[Message],
    limit: int,
    encode: Callable[[list[Message]], bytes],
    frames: list[tuple[bytes, int]],
    refused: list[tuple[str, int]],
) -> None:
    data = encode(group)
    if len(data) <= limit:
        frames.append((data, len(group)))
        return
    if len(group) == 1:
        refused.append((type(group[0]).__name__, len(data)))
        return
    half = len(group) // 2
    _emit(group[:half], limit, encode, frames, refused)
    _emit(group[half:], limit, encode, frames, refused)
