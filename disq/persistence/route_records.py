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

REC_ROUTE = 22
ROUTE_RECORD_TYPES = (REC_ROUTE,)

_ENTRY = struct.Struct("<QQQBBBBHHH")
_F_DELETED = 1
_KINDS = (ROUTE_EXCHANGE, ROUTE_BINDING, ROUTE_QUEUE)


class RouteRecordError(ValueError):
    code = "AOF_BAD_RECORD"


def _b(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def encode_entry(e: RouteEntry) -> bytes:
    vnode, etype, name, queue, key = (
        _b(x) for x in (e.version_node, e.exchange_type, e.name, e.queue, e.routing_key)
    )
    return (
        _ENTRY.pack(
            e.version_ms,
            e.expires_ms,
            e.message_ttl_ms,
            e.kind,
            _F_DELETED if e.deleted else 0,
            len(vnode),
            len(etype),
            len(name),
            len(queue),
            len(key),
        )
        + vnode
        + etype
        + name
        + queue
        + key
    )


def decode_entry(payload: bytes | memoryview) -> RouteEntry:
    raw = bytes(payload)
    try:
        vms, expires, ttl, kind, flags, *lens = _ENTRY.unpack_from(raw, 0)
    except struct.error as exc:
        raise RouteRecordError(f"bad ROUTE record: {exc}") from exc
    if kind not in _KINDS:
        raise RouteRecordError(f"bad ROUTE record: unknown kind {kind}")
    pos = _ENTRY.size
    parts: list[str] = []
    for n in lens:
        parts.append(raw[pos : pos + n].decode("utf-8", "surrogateescape"))
        pos += n
    if pos != len(raw):
        raise RouteRecordError("ROUTE record length does not match its fields")
    vnode, etype, name, queue, key = parts
    return RouteEntry(
        kind,
        name,
        queue=queue,
        routing_key=key,
        exchange_type=etype,
        expires_ms=expires,
        message_ttl_ms=ttl,
        deleted=bool(flags & _F_DELETED),
        version_ms=vms,
        version_node=vnode,
    )
