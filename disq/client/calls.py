"""What the SDK's method mixins (schedules.py, inspection.py) need of
:class:`~disq.client.AsyncClient`: its two ways to call a node.

The mixins annotate ``self`` with :class:`NodeCalls` rather than importing AsyncClient, so
aio.py imports them and they import nothing of it: no circle, and mypy checks at each call
that AsyncClient still has what they use.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from disq.client.failover import NodeAddr, NodeSet

T = TypeVar("T")


class NodeCalls(Protocol):
    @property
    def view(self) -> NodeSet:
        """The nodes the client knows (failover.py)."""
        ...

    timeout_s: float

    # fmt: off
    async def _call(
        self, method: str, request: Any, *, timeout_s: float | None = None,
        prefer: str | None = None,
    ) -> Any:
        # fmt: on
        """A call safe to repeat: tried on each node until one answers (``prefer``: the
        node to try first; ``timeout_s``: its deadline, default AsyncClient's own)."""
        ...

    async def _call_node(
        self, node: str, method: str, request: Any, *, timeout_s: float | None = None
    ) -> Any:
        """One call to one node (its gRPC address), never retried elsewhere (``timeout_s``:
        its deadline, default AsyncClient's own)."""
        ...


class PublishCalls(NodeCalls, Protocol):
    """What the routes mixin's publish and purge need beyond :class:`NodeCalls`: a send to
    one node chosen by the failover rule (failover.py), on the client's channels."""

    _closed: bool

    @property
    def _metadata(self) -> Any: ...

    async def _maybe_refresh(self) -> None: ...

    async def _connected_stub(self, n: NodeAddr) -> Any: ...

    def nodes(self) -> list[NodeAddr]: ...

    async def purge_queue(self, queue: str) -> int: ...


class OnLoop(Protocol):
    """The blocking client as its mixins see it: the async client, whose coroutines it runs
    on its loop thread."""

    @property
    def _aio(self) -> PublishCalls: ...

    def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...
