"""AOF payloads (and wire entries) of recurring schedules (disq/core/schedule/).

SCHEDULE   one definition, a later record of the same name replaces it when its version is
           higher (replay merges exactly as a peer's SchedSync does):
           version_ms u64 | repl u16 | retry_s i32 | ttl_s i32 | catchup u32 | flags u8 |
           misfire u8 | vnode_len u8 | name_len u16 | spec_len u16 | zone_len u8 |
           queue_len u32 | body_len u32 | vnode | name | spec | zone | queue | body
           flags: 1 async, 2 paused, 4 deleted (a tombstone)
SCHEDTICK  the last tick a schedule's job was bound to (the highest wins):
           tick_s u64 | name_len u16 | id_len u8 | name | job id

The same bytes are a definition on the wire (SchedSync's entries), so a node reads what a
peer sends with the code that replays its own file.
"""

from __future__ import annotations

import struct

from disq.core.messages import ScheduleDef
from disq.persistence.layout import bytes_text, pack, text_bytes, unpack

REC_SCHEDULE = 20
REC_SCHEDTICK = 21
SCHEDULE_RECORD_TYPES = (REC_SCHEDULE, REC_SCHEDTICK)

_DEF = struct.Struct("<QHiiIBBBHHBII")
_TICK = struct.Struct("<QHB")
_F_ASYNC, _F_PAUSED, _F_DELETED = 1, 2, 4


class ScheduleRecordError(ValueError):
    code = "AOF_BAD_RECORD"


def encode_def(d: ScheduleDef) -> bytes:
    flags = (
        (_F_ASYNC if d.async_ else 0)
        | (_F_PAUSED if d.paused else 0)
        | (_F_DELETED if d.deleted else 0)
    )
    fixed = (d.version_ms, d.repl, d.retry_s, d.ttl_s, d.catchup, flags, d.misfire)
    texts = [text_bytes(x) for x in (d.version_node, d.name, d.spec, d.zone, d.queue)]
    return pack(_DEF, fixed, [*texts, d.body])


def decode_def(payload: bytes | memoryview) -> ScheduleDef:
    (vms, repl, retry, ttl, catchup, flags, misfire), parts = unpack(
        _DEF, bytes(payload), 7, ScheduleRecordError, "SCHEDULE"
    )
    vnode, name, spec, zone, queue = map(bytes_text, parts[:5])
    return ScheduleDef(
        name,
        spec,
        zone,
        queue,
        parts[5],
        repl=repl,
        retry_s=retry,
        ttl_s=ttl,
        async_=bool(flags & _F_ASYNC),
        misfire=misfire,
        catchup=catchup,
        paused=bool(flags & _F_PAUSED),
        deleted=bool(flags & _F_DELETED),
        version_ms=vms,
        version_node=vnode,
    )


def encode_tick(name: str, tick_s: int, job_id: str) -> bytes:
    n, j = text_bytes(name), job_id.encode()
    return _TICK.pack(tick_s, len(n), len(j)) + n + j


def decode_tick(payload: bytes | memoryview) -> tuple[str, int, str]:
    raw = bytes(payload)
    try:
        tick, nl, jl = _TICK.unpack_from(raw, 0)
    except struct.error as exc:
        raise ScheduleRecordError(f"bad SCHEDTICK record: {exc}") from exc
    pos = _TICK.size
    if pos + nl + jl != len(raw):
        raise ScheduleRecordError("SCHEDTICK record length does not match its fields")
    name = bytes_text(raw[pos : pos + nl])
    try:
        job_id = raw[pos + nl :].decode()
    except UnicodeDecodeError as exc:
        raise ScheduleRecordError(f"bad SCHEDTICK record: {exc}") from exc
    return name, tick, job_id
