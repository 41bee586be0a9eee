"""Deferred answers to their waiters: token -> callback, for every door.

A command that cannot answer at once (a sync ADDJOB waiting for its copies, a GETJOB waiting
for a job) takes a token from the node core's one counter and registers here: a RESP
connection, a gRPC call. The runtime routes each of a Ready's replies through
:meth:`ReplyRouter.route`, after the records they depend on are written. A token nobody
waits on any more (the client went away, and its cancel raced the answer) is dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from disq.core.disque.api import DeferredResult

Waiter = Callable[[int, DeferredResult], None]


class ReplyRouter:
    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[int, Waiter] = {}

    def wait(self, token: int, waiter: Waiter) -> None:
        self._waiting[token] = waiter

    def forget(self, token: int) -> bool:
        """The waiter went away; True if it was still waiting."""
        return self._waiting.pop(token, None) is not None

    def route(self, token: int, result: DeferredResult) -> None:
        waiter = self._waiting.pop(token, None)
        if waiter is not None:
            waiter(token, result)

    def __len__(self) -> int:
        return len(self._waiting)
