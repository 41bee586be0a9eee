"""Calls asked again while a node is starting.

A node restarted with peers in its view serves its gRPC port (the peers' Link service) before
its client API has loaded, and answers every client call UNAVAILABLE "... the call was not
run" for the milliseconds the API takes to import (disq/server/late_services.py, issue 31).
The call never ran, so asking the same node again is safe, and better than what UNAVAILABLE
otherwise means to the SDK (mark the node down, move on): a client of one node would fail,
and a client of many would move its home node for a blip. So the stubs' unary calls are
wrapped: on that one status they are asked again, every ``POLL_S``, for at most ``WAIT_S``.
Any other status, and streams (whose callers already reconnect), pass through unchanged;
the wrapper costs one call frame when nothing goes wrong.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import grpc.aio

# The tail of late_services.NOT_STARTED_DETAILS (the SDK does not import the server).
STARTING_DETAILS = "the call was not run"
WAIT_S = 5.0  # the API loads in tens of ms; a loaded machine may take far longer
POLL_S = 0.01


def is_starting(exc: grpc.RpcError) -> bool:
    """Whether ``exc`` is a starting node's "not run" answer."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else None
    return code == grpc.StatusCode.UNAVAILABLE and STARTING_DETAILS in (details or "")


class AsyncUnary:
    """A grpc.aio unary multicallable, asked again while its node is starting."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        try:
            return await self._call(request, **kwargs)
        except grpc.aio.AioRpcError as exc:
            if not is_starting(exc):
                raise
        give_up = time.monotonic() + WAIT_S
        while True:
            await asyncio.sleep(POLL_S)
            try:
                return await self._call(request, **kwargs)
            except grpc.aio.AioRpcError as exc:
                if not is_starting(exc) or time.monotonic() >= give_up:
                    raise


class SyncUnary:
    """A blocking grpc unary multicallable, asked again while its node is starting."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        give_up = time.monotonic() + WAIT_S
        while True:
            try:
                return self._call(request, **kwargs)
            except grpc.RpcError as exc:
                if not is_starting(exc) or time.monotonic() >= give_up:
                    raise
            time.sleep(POLL_S)


def wrap_stub(stub: Any) -> Any:
    """``stub`` (a generated grpc.aio stub) with its unary-unary methods wrapped in place."""
    for name, call in list(vars(stub).items()):
        if isinstance(call, grpc.aio.UnaryUnaryMultiCallable):
            setattr(stub, name, AsyncUnary(call))
    return stub
