"""The SDK's results: set a job's (or a task's) result, get it, wait for it, delete it.

Every node keeps every result (disq/core/disque/results.py), so each call is one the client
may send to any node and repeat on the next when a node does not answer: a set repeated after
a lost answer stores the same value again. The methods of :class:`~disq.client.AsyncClient`
and :class:`~disq.client.Client` as mixins (calls.py says how a mixin reaches the client).
"""

from __future__ import annotations

from typing import TypedDict, Unpack

from disq.client.calls import NodeCalls, OnLoop
from disq.proto_gen import api_pb2

RESULT_TIMEOUT_MS = 5000  # the node's wait for the result's copies (RESULT SET's TIMEOUT)
FOREVER_S = 365 * 86400.0  # the deadline of a wait asked to last until the result comes


class SetResultOptions(TypedDict, total=False):
    """A result set's options, as the SDK and the integrations' RESP path take them."""

    ttl_s: int | None  # default: a job's result, its job's TTL; any other key's, one day
    replicate: int | None  # default min(3, nodes)
    repl_timeout_ms: int  # the node's wait for the copies, RESULT_TIMEOUT_MS
    ack: bool  # the key is a job's id, acked once the result is held


def _value(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class AsyncResultsMixin:
    """The results methods of AsyncClient."""

    async def set_result(
        self: NodeCalls, key: str, value: bytes | str, **options: Unpack[SetResultOptions]
    ) -> None:
        """Store ``value`` under ``key`` (a job's id, or any printable ASCII key up to 255
        bytes); returns once ``replicate`` nodes hold it (default min(3, nodes)), else
        raises NoReplError. ``ack``: ``key`` is a job's id, acked once the result is held
        (never before: a worker that dies in between leaves the job to run again).
        ``ttl_s``: default a job's TTL for a job's result (it goes with its job), else one
        day."""
        repl_timeout_ms = options.get("repl_timeout_ms", RESULT_TIMEOUT_MS)
        req = api_pb2.SetResultRequest(
            key=key,
            value=_value(value),
            repl_timeout_ms=repl_timeout_ms,
            ack=options.get("ack", False),
        )
        if (ttl_s := options.get("ttl_s")) is not None:
            req.ttl_s = ttl_s
        if (replicate := options.get("replicate")) is not None:
            req.replicate = replicate
        deadline = repl_timeout_ms / 1000 + self.timeout_s
        await self._call("SetResult", req, timeout_s=deadline)

    async def result(self: NodeCalls, key: str, timeout_s: float | None = 0.0) -> bytes | None:
        """The result of ``key``, or None. ``timeout_s`` 0: what is there now; more: wait on
        the node until it is set, up to that long; None: wait until it is set."""
        req = api_pb2.GetResultRequest(key=key)
        deadline = self.timeout_s
        if timeout_s is None:
            req.wait_ms = 0
            deadline = FOREVER_S
        elif timeout_s > 0:
            req.wait_ms = max(1, int(timeout_s * 1000))
            deadline = timeout_s + self.timeout_s
        r = await self._call("GetResult", req, timeout_s=deadline)
        return bytes(r.value) if r.found else None

    async def delete_result(self: NodeCalls, key: str) -> bool:
        """Delete it on every node; whether the node asked held it."""
        r = await self._call("DeleteResult", api_pb2.ResultKey(key=key))
        return bool(r.count)


class SyncResultsMixin:
    """The results methods of the blocking Client (the AsyncClient's, on its loop)."""

    def set_result(
        self: OnLoop, key: str, value: bytes | str, **options: Unpack[SetResultOptions]
    ) -> None:
        self._run(AsyncResultsMixin.set_result(self._aio, key, value, **options))

    def result(self: OnLoop, key: str, timeout_s: float | None = 0.0) -> bytes | None:
        return self._run(AsyncResultsMixin.result(self._aio, key, timeout_s))

    def delete_result(self: OnLoop, key: str) -> bool:
        return self._run(AsyncResultsMixin.delete_result(self._aio, key))
