"""AOF payloads (and wire entries) of the queue policies (disq/core/policy/).

QPOLICY  one queue's policy; a later record of the same queue replaces it when its version is
         higher (replay merges exactly as a peer's PolicySync):
         version_ms u64 | max_deliveries u32 | backoff_base_s u32 | backoff_max_s u32 |
         flags u8 | vnode_len u8 | queue_len u16 | dead_letter_len u16 |
         vnode | queue | dead_letter
         flags: 1 deleted (a tombstone)

The same bytes are an entry on the wire (PolicySync's entries), so a node reads what a peer
sends with the code that replays its own file.
"""

from __future__ import annotations

import struct

from disq.core.messages import PolicyEntry
from disq.persistence.layout import bytes_text, pack, text_bytes, unpack

REC_QPOLICY = 27
POLICY_RECORD_TYPES = (REC_QPOLICY,)

_ENTRY = struct.Struct("<QIIIBBHH")
_F_DELETED = 1


class PolicyRecordError(ValueError):
    code = "AOF_BAD_RECORD"


def encode_policy(e: PolicyEntry) -> bytes:
    flags = _F_DELETED if e.deleted else 0
    fixed = (e.version_ms, e.max_deliveries, e.backoff_base_s, e.backoff_max_s, flags)
    return pack(_ENTRY, fixed, [text_bytes(x) for x in (e.version_node, e.queue, e.dead_letter)])


def decode_policy(payload: bytes | memoryview) -> PolicyEntry:
    (vms, maxd, base, top, flags), parts = unpack(
        _ENTRY, bytes(payload), 5, PolicyRecordError, "QPOLICY"
    )
    vnode, queue, dead_letter = map(bytes_text, parts)
    if not queue:
        raise PolicyRecordError("bad QPOLICY record: no queue")
    deleted = bool(flags & _F_DELETED)
    return PolicyEntry(queue, maxd, dead_letter, base, top, deleted, vms, vnode)
