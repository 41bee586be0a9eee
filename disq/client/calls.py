"""What the SDK's method mixins (schedules.py, inspection.py) need of
:class:`~disq.client.AsyncClient`: its two ways to call a node.

The mixins annotate ``self`` with :class:`NodeCalls` rather than importing AsyncClient, so
aio.py imports them and they import nothing of it: no circle, and mypy checks at each call
that AsyncClient still has what they use.
"""

from __future__ import annotations

from typing import Any, Protocol

from disq.client.failover import NodeSet


class NodeCalls(Protocol):
    @property
    def view(self) -> NodeSet:
        """The nodes the client knows (failover.py)."""
        ...

    async def _call(
        self,
        method: str,
        request: Any,
        *,
        timeout_s: float | None = None,
        prefer: str | None = None,
    ) -> Any:
        """A call safe to repeat: tried on each node until one answers."""
        ...

    async def _call_node(self, node: str, method: str, request: Any) -> Any:
        """One call to one node (its gRPC address), never retried elsewhere."""
        ...
