"""Payloads of the AOF records a node writes: pure encode/decode, no IO.

Framing (length, CRC, file header) lives in ``framing``. A record states absolute values
(state, priority, deadline, counters), never deltas: replaying the same record twice, or an
older record before a newer full one (as an incremental rewrite interleaves them), converges
on the state of the last record in file order.

Layouts (little-endian):
  PUT     id u64 | pri u32 | delay_ms u64 | ttr_ms u64 | ctime_ms u64 | state u8 |
          deadline_ms i64 | reserves, timeouts, releases, buries, kicks 5*u32 |
          tube_len u16 | tube | body
  UPDATE  id u64 | pri u32 | delay_ms u64 | state u8 | deadline_ms i64 | 5*u32 counters
  DELETE  id u64
  META    next_id u64

ctime_ms and deadline_ms are wall-clock milliseconds on disk (the file outlives the process
and its monotonic clock); in memory they are on the node clock (disq/server/clock.py). The
encoders add ``wall_offset_ms`` (wall minus node), the engine's replay subtracts it.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disq.core.beanstalk.model import Job

REC_PUT = 1
REC_UPDATE = 2
REC_DELETE = 3
REC_META = 4

_PUT = struct.Struct("<QIQQQBqIIIIIH")
PUT_STRUCT = _PUT  # replay decodes PUT records inline (restart time is a target)
_UPDATE = struct.Struct("<QIQBqIIIII")
_DELETE = struct.Struct("<Q")
_META = struct.Struct("<Q")


def _state(job: Job, wall_offset_ms: int) -> tuple[int, ...]:
    """What PUT and UPDATE both end with: the state, the deadline, the five counters."""
    deadline_ms = job.deadline_ms + wall_offset_ms if job.deadline_ms else 0
    return (job.state, deadline_ms, job.reserves, job.timeouts, job.releases, job.buries, job.kicks)


def encode_put(job: Job, wall_offset_ms: int = 0) -> bytes:
    name = job.tube.name.encode()
    ctime_ms = job.ctime_ms + wall_offset_ms
    head = (job.id, job.pri, job.delay_ms, job.ttr_ms, ctime_ms)
    return _PUT.pack(*head, *_state(job, wall_offset_ms), len(name)) + name + job.body


def encode_update(job: Job, wall_offset_ms: int = 0) -> bytes:
    return _UPDATE.pack(job.id, job.pri, job.delay_ms, *_state(job, wall_offset_ms))


def encode_delete(job_id: int) -> bytes:
    return _DELETE.pack(job_id)


def encode_meta(next_id: int) -> bytes:
    return _META.pack(next_id)


def decode_update_fields(payload: bytes | memoryview) -> tuple[int, ...]:
    return tuple(_UPDATE.unpack_from(payload, 0))


def decode_delete(payload: bytes | memoryview) -> int:
    return int(_DELETE.unpack_from(payload, 0)[0])


def decode_meta(payload: bytes | memoryview) -> int:
    return int(_META.unpack_from(payload, 0)[0])
