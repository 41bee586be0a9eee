"""What the SDK's calls agree on when a node does not answer: which failures mean the call
never left (so sending it to the next node cannot make a second copy).

Every loop that moves a call to another node (the async client's adds, the blocking add,
the publish path) asks :func:`was_not_sent`; one list, so they cannot drift apart (the
publish path once lacked a starting node's answer and raised IndeterminateError where an
add moved on).
"""

from __future__ import annotations

from typing import Any

import grpc

from disq.client.starting import STARTING_DETAILS

# UNAVAILABLE with one of these: the call never reached a servicer, safe to send elsewhere.
# The last is a node's own, in the milliseconds after a restart before its client API loads
# (disq/server/late_services.py; disq/client/starting.py asks that node again first).
NOT_SENT_DETAILS = (
    "failed to connect",
    "Connection refused",
    "connections to all backends failing",
    STARTING_DETAILS,
)


def was_not_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call certainly never reached a node's servicer."""
    call: Any = exc  # a failed call is both an RpcError and a grpc.Call (or an AioRpcError)
    if call.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = call.details() or ""
    return any(s in details for s in NOT_SENT_DETAILS)
