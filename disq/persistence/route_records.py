"""AOF payloads (and wire entries) of the routes table (disq/core/routes/).

ROUTE  one entry (exchange, binding or queue declaration); a later record of the same key
       replaces it when its version is higher (replay merges exactly as a peer's RouteSync):
       version_ms u64 | expires_ms u64 | message_ttl_ms u64 | kind u8 | flags u8 |
       vnode_len u8 | type_len u8 | name_len u16 | queue_len u16 | key_len u16 |
       vnode | type | name | queue | routing key
       flags: 1 deleted (a tombstone)

The same bytes are an entry on the wire (RouteSync's entries), so a node reads what a peer
sends with the code that replays its own file.
"""

from __future__ import annotations

import struct

from disq.core.messages import ROUTE_BINDING, ROUTE_EXCHANGE, ROUTE_QUEUE, RouteEntry
from disq.persistence.layout import bytes_text, pack, text_bytes, unpack

REC_ROUTE = 22
ROUTE_RECORD_TYPES = (REC_ROUTE,)

_ENTRY = struct.Struct("<QQQBBBBHHH")
_F_DELETED = 1
_KINDS = (ROUTE_EXCHANGE, ROUTE_BINDING, ROUTE_QUEUE)


class RouteRecordError(ValueError):
    code = "AOF_BAD_RECORD"


def encode_entry(e: RouteEntry) -> bytes:
    flags = _F_DELETED if e.deleted else 0
    fixed = (e.version_ms, e.expires_ms, e.message_ttl_ms, e.kind, flags)
    texts = (e.version_node, e.exchange_type, e.name, e.queue, e.routing_key)
    return pack(_ENTRY, fixed, [text_bytes(x) for x in texts])


def decode_entry(payload: bytes | memoryview) -> RouteEntry:
    (vms, expires, ttl, kind, flags), parts = unpack(
        _ENTRY, bytes(payload), 5, RouteRecordError, "ROUTE"
    )
    if kind not in _KINDS:
        raise RouteRecordError(f"bad ROUTE record: unknown kind {kind}")
    vnode, etype, name, queue, key = map(bytes_text, parts)
    deleted = bool(flags & _F_DELETED)
    return RouteEntry(kind, name, queue, key, etype, expires, ttl, deleted, vms, vnode)
