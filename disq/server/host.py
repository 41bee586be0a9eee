"""The node runtime and its cluster half as their parts see them: small protocols, no code.

The server's modules import downward only (import-linter's ``acyclic_siblings`` contract in
pyproject.toml): ``runtime`` builds the node, ``cluster_services`` attaches the cluster half,
and the parts they are made of (the AOF service, the TCP doors, the node services, the gRPC
API) are typed against these protocols, never against the classes that own them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.disque.core import DisqueCore
    from disq.core.membership import Membership
    from disq.core.messages import Message
    from disq.core.node_core import NodeCore
    from disq.doors.beanstalk_door import Replicator
    from disq.persistence.event_log import EventLog
    from disq.server.aof_service import AofService
    from disq.server.api_service import QueueApi
    from disq.server.flow import Flushable
    from disq.server.node_config import NodeConfig
    from disq.server.peer_link import PeerLinks
    from disq.server.resp_tcp import RespHub
    from disq.server.router import ReplyRouter


class ClusterSettingsView(Protocol):
    host: str
    resp_port: int
    grpc_port: int
    requirepass: str | None
    config_store: Any


class ClusterPart(Protocol):
    """The cluster half (``disq.server.cluster_services.ClusterServices``)."""

    @property
    def settings(self) -> ClusterSettingsView: ...

    membership: Membership
    disque: DisqueCore
    links: PeerLinks | None  # None until the bus loads (cluster_services.load_bus)
    leaving_for_drain: bool
    event_log: EventLog
    hub: RespHub
    api: QueueApi | None

    async def start(self) -> None: ...

    async def start_api(self) -> None: ...

    async def close(self) -> None: ...

    def apply_member_changes(self, changes: list[tuple[str, int]]) -> None: ...

    def enqueue_once_done(self) -> None: ...

    def save_view_now(self) -> None: ...

    def adopt_node_id(self, node_id: str) -> None: ...

    def meet_client_port(self, host: str, port: int) -> None: ...


class NodeHost(Protocol):
    """The runtime (``disq.server.runtime.NodeRuntime``)."""

    config: NodeConfig
    core: NodeCore
    beanstalk: BeanstalkCore
    router: ReplyRouter
    aof: AofService
    cluster: ClusterPart | None
    replicator: Replicator | None

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def aof_error(self) -> str | None: ...

    def now_ms(self) -> int: ...  # the node clock (monotonic, clock.py)

    def wall_ms(self) -> int: ...  # the wall clock (Unix time)

    def after_commands(self, conn: Flushable | None, now_ms: int) -> None: ...

    def mark_dirty(self, conn: Flushable) -> None: ...

    def durable(self) -> asyncio.Future[None]: ...

    def on_peer_messages(self, sender: str, msgs: list[Message]) -> None: ...

    def stop(self) -> None: ...
