"""The IO a node needs to be in a cluster: the peer links, the RESP port, the gRPC API, the
cluster view file, the event log, joins and CONFIG SET.

No job logic here: the node core (``disq.core.node_core``) holds the Disque core and
membership, and the runtime's one flush moves their output. This module builds them, owns
what they talk through, and applies the bookkeeping half of a Ready (membership changes:
link addresses and the view file).

The bus (the peer links and the gRPC API: grpc and protobuf, a large share of a start) is
built first only when peers must hear from this node before its clients are answered: a
view file with peers, ``--join``, or TLS on it. Even then only the links are (grpc, the
peer wire's protobuf): the client API (its protobuf modules, health, reflection) loads once
the client ports serve (:meth:`start_api`, through late_services.py, the gRPC server having
started). Otherwise (a first start, a lone node) the RESP and beanstalk ports serve first
and the whole bus loads after them (:meth:`load_bus`, its modules imported in a thread: the
runtime's serve); until then ``links`` and ``api`` are None, what would go to a peer is
dropped (there is none: a MEET is resent by its timer), and the link counters read as zero.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from disq.core.disque.core import DisqueCore
from disq.core.membership import FORGOTTEN, Membership
from disq.core.messages import ALIVE, DEAD, LEFT, SUSPECT, Member
from disq.logging import get_logger
from disq.persistence.event_log import EventLog
from disq.persistence.fs import replace_durably
from disq.server.advertise import advertised_host
from disq.server.node_services import NodeServices
from disq.server.resp_tcp import RespHub

if TYPE_CHECKING:
    import asyncio

    from disq.server.api_service import QueueApi
    from disq.server.host import NodeHost
    from disq.server.late_services import LateServices
    from disq.server.peer_link import PeerLinks
    from disq.tls import TlsConfig

CLUSTER_FILE = "cluster.json"
VIEW_SAVE_DELAY_S = 1.0
DISQUE_BUS_OFFSET = 10000  # Disque's bus port = client port + 10000
MEET_RETRY_S = 0.5
MEET_ATTEMPTS = 20
CONTACT_TIMEOUT_S = 2.0  # readiness waits this long at most for the saved peers' first dial


@dataclass
class ClusterSettings:
    host: str = "127.0.0.1"
    resp_port: int = 7711
    grpc_port: int = 7710
    node_timeout_ms: int = 15000
    joins: list[tuple[str, int]] = field(default_factory=list)  # gRPC addresses
    requirepass: str | None = None
    beanstalk_replicate: int = 1  # copies of each beanstalk put (1: not replicated)
    events_max_bytes: int | None = None  # the event log's bound (None: its defaults)
    beanstalk_repl_timeout_ms: int = 5000
    state_dir: Path | None = None  # node id and cluster view (Disque's ``dir``)
    config_store: Any = None  # disq.config.ConfigStore in config-file mode
    tls: TlsConfig | None = None  # TLS on the gRPC port (None: plaintext)
    job_lane_port: int = 0  # disq.server.job_lane: 0 ephemeral, -1 off
    # What peers and clients are told (None: the bind host, or a guess; disq.server.advertise)
    advertise_host: str | None = None


class ClusterServices:
    def __init__(self, runtime: NodeHost, settings: ClusterSettings, my_id: str) -> None:
        self.runtime = runtime
        self.settings = settings
        self.loop = runtime.loop
        self.log: Any = get_logger("disq.cluster").bind(node=my_id[:8])
        rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        now = runtime.now_ms()
        # Our own record carries the advertised address: gossip spreads it, HELLO, CLUSTER
        # NODES and the SDK's view read it, and peers dial it (links and job lanes alike).
        self.advertised_host, guessed = advertised_host(settings.host, settings.advertise_host)
        if guessed is not None:
            self.log.warning(
                "advertise_host_guessed",
                bind=settings.host,
                advertised=self.advertised_host,
                why=guessed,
                hint="set --advertise-host (config: advertise-host) to the address peers "
                "and clients reach this node at",
            )
        else:
            self.log.info("advertise_host", bind=settings.host, advertised=self.advertised_host)
        me = Member(
            node_id=my_id,
            host=self.advertised_host,
            grpc_port=settings.grpc_port,
            client_port=settings.resp_port,
            incarnation=0,
            state=ALIVE,
        )
        timing = _timing(settings.node_timeout_ms)
        snapshot = self._load_view()
        membership: Membership | None = None
        if snapshot is not None:
            try:
                membership = Membership.restore(snapshot, me, rng, now, **timing)
            except (ValueError, KeyError, TypeError) as exc:
                self.log.warning("cluster_view_unusable", error=str(exc))
        if membership is None:
            membership = Membership(me, rng, now, **timing)
        self.membership = membership
        self.disque = DisqueCore(membership, rng, now)
        self.disque.memory.max_bytes = runtime.config.limits.max_memory_bytes
        self.disque.persist = runtime.aof.writer is not None  # the AOF turns it on when open
        core = runtime.core
        self.disque.wall_offset_ms = core.beanstalk.wall_offset_ms  # the node's (clock.py)
        core.attach_cluster(self.disque, membership)
        core.beanstalk_replicate = max(1, settings.beanstalk_replicate)
        runtime.replicator = core
        core.beanstalk_repl_timeout_ms = settings.beanstalk_repl_timeout_ms
        self.links: PeerLinks | None = None  # load_links
        self.api: QueueApi | None = None  # load_api
        # The client API's stand-in on a bus started before it (peers hear first): start_api.
        self._late_api: LateServices | None = None
        self._view_save: asyncio.TimerHandle | None = None
        # The peers and their addresses as the view file has them (what a restart reads).
        self._saved_addresses = self._peer_addresses() if snapshot is not None else {}
        self._meets: dict[tuple[str, int], int] = {}
        self._joined = True  # set by start(): False while --join has found no peer yet
        self._serving_task: asyncio.Task[None] | None = None
        self._meet_timer: asyncio.TimerHandle | None = None
        self.leaving_for_drain = False  # leaving set by the SIGTERM drain: not saved (drain.py)
        if settings.config_store is not None:
            settings.config_store.on_change = self.on_config_change
        self.services = NodeServices(runtime, self)
        self.hub = RespHub(self.services, new_token=core.new_token)
        state_dir = settings.state_dir or runtime.config.data_dir
        max_bytes = settings.events_max_bytes
        self.event_log = EventLog(
            state_dir / "events" if state_dir is not None else None,
            max_bytes=max_bytes,
            # A small bound gets small segments, so retention works in small steps.
            segment_bytes=min(4 << 20, max(1024, max_bytes // 4)) if max_bytes else 4 << 20,
            deferred=True,  # the runtime writes it from a timer (EVENTS_WRITE_DELAY_S)
        )
        runtime.beanstalk.events.enabled = True  # drained into the log by every flush
        if self.hears_peers_first:
            self.load_links(late_api=True)

    # ------------------------------------------------------------------ the bus
    @property
    def hears_peers_first(self) -> bool:
        """Whether peers must hear from this node before its clients are answered (the bus
        is built before the client ports serve): it has peers to tell of its restart (a
        view with peers), peers to join, or TLS on the bus (its configuration is grpc's)."""
        return bool(self.settings.joins) or self._knows_a_peer() or self.settings.tls is not None

    def load_bus(self) -> None:
        """Build the peer links and the gRPC API (imports grpc and protobuf: call
        :func:`import_bus` in a thread first to keep the loop serving meanwhile)."""
        self.load_links(late_api=False)
        self.load_api()

    def load_links(self, *, late_api: bool) -> None:
        """Build the peer links (grpc and the peer wire's protobuf). ``late_api``: the
        client API will be added once the bus serves (start_api), not before it starts."""
        if self.links is not None:
            return
        from disq.server.peer_link import PeerLinks

        settings = self.settings
        links = PeerLinks(
            self.membership.my_id,
            self.runtime.on_peer_messages,
            host=settings.host,
            port=settings.grpc_port,
            tls=settings.tls,
            lane_port=settings.job_lane_port if settings.job_lane_port >= 0 else None,
            on_link_change=self._on_link_change,
        )
        if late_api:
            from disq.server.late_services import LateServices

            self._late_api = LateServices()
            links.add_services.append(self._late_api.attach)
        me = self.membership.my_id
        for m in self.membership.members():
            if m.node_id != me and m.state != LEFT:
                links.set_address(m.node_id, m.host, m.grpc_port)
        self.links = links

    def load_api(self) -> None:
        """Build the client API (the Queue service, health, reflection) and register it:
        with the bus's server before it starts, or on its late-services handler after."""
        if self.api is not None:
            return
        from disq.server.api_policies import PoliciesQueueApi

        assert self.links is not None  # load_links first
        api = PoliciesQueueApi(self.services)
        late = self._late_api
        if late is not None:
            api.register(late)
            late.install()
        else:
            self.links.add_services.append(api.register)
        self.api = api

    # ------------------------------------------------------------------ CONFIG SET
    def on_config_change(self, name: str, value: str) -> None:
        """CONFIG SET applied to the running node (called before the store keeps the value;
        raising refuses the change)."""
        from disq.config import ConfigSetError

        runtime = self.runtime
        if name == "maxmemory":
            limit = int(value)
            self.disque.memory.max_bytes = limit
            runtime.beanstalk.limits.max_memory_bytes = limit
        elif name == "appendonly":
            store = self.settings.config_store
            try:
                if value == "yes":
                    runtime.aof.enable(store.settings.dir if store is not None else Path("."))
                else:
                    runtime.aof.disable()
            except Exception as exc:
                self.log.error("config_appendonly_failed", error=str(exc))
                raise ConfigSetError("ERR Unable to turn on AOF. Check server logs.") from exc
        elif name == "appendfsync":
            was = runtime.config.fsync
            runtime.config.fsync = value
            if value == "everysec" and was != "everysec" and runtime.aof.writer is not None:
                runtime.aof.start_fsync_timer()
        elif name == "cluster-node-timeout":
            self.membership.node_timeout_ms = max(1, int(value))
        elif name == "beanstalk-replicate":
            runtime.core.beanstalk_replicate = max(1, int(value))

    def enqueue_once_done(self) -> None:
        """Disque resets aof-enqueue-jobs-once after the load it was meant for, in the file
        too, so the next ordinary restart requeues by retry again."""
        store = self.settings.config_store
        if store is None or store.config_file is None:
            return
        try:
            store.set("aof-enqueue-jobs-once", "no")
            store.rewrite()
        except Exception as exc:
            self.log.warning("aof_enqueue_once_not_reset", error=str(exc))

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Build the bus if it is not yet (load_bus), bind it and serve it. A bus built
        with its API to come (load_links(late_api=True)) serves the links; start_api adds
        the API."""
        if self.links is None:
            self.load_bus()
        links = self.links
        assert links is not None
        port = await links.start()
        self.settings.grpc_port = port
        for host, gport in self.settings.joins:
            self.meet_grpc(host, gport)
        # Readiness (the gRPC health service, what a Kubernetes probe asks): the AOF is
        # loaded by now; with --join, serving waits until the node knows a peer, or until
        # its join attempts ran out (a lone first pod, a scaled-down set) so it never hangs.
        self._joined = not self._meets or self._knows_a_peer()
        self.runtime.after_commands(None, self.runtime.now_ms())
        if self.api is not None:
            await self._serve_api(self.api)

    async def start_api(self) -> None:
        """The client API on a bus that started without it (its modules imported first:
        :func:`import_api`, in a thread), then its health as start() would have set it."""
        self.load_api()
        assert self.api is not None
        self.log.info("client_api_loaded")
        await self._serve_api(self.api)

    async def _serve_api(self, api: QueueApi) -> None:
        await api.set_serving(False)
        if self._joined:
            # A node restarted on its view is ready once it has contacted the peers in it:
            # each link came up (and its first message, a Ping, went out: on_link_up) or was
            # refused. The client ports serve meanwhile; only the probe waits, and never
            # longer than CONTACT_TIMEOUT_S (a silent peer).
            self._serving_task = self.loop.create_task(self._serve_when_contacted())

    async def _serve_when_contacted(self) -> None:
        assert self.links is not None and self.api is not None  # started
        contacted = await self.links.wait_contacted(CONTACT_TIMEOUT_S)
        if not contacted:
            self.log.info("peers_not_all_contacted", timeout_s=CONTACT_TIMEOUT_S)
        await self.api.set_serving(True)

    def _knows_a_peer(self) -> bool:
        me = self.membership.my_id
        return any(m.node_id != me and m.state != LEFT for m in self.membership.members())

    def _mark_joined(self) -> None:
        if not self._joined and self.links is not None:
            self._joined = True
            self.log.info("joined_serving")
            if self.api is not None:  # else start_api serves it, _joined being set
                self._serving_task = self.loop.create_task(self.api.set_serving(True))

    async def close(self) -> None:
        if self._meet_timer is not None:
            self._meet_timer.cancel()
        if self._view_save is not None:
            self._view_save.cancel()
        self._save_view()
        if self.api is not None and hasattr(self.api, "health"):
            await self.api.set_serving(False)
        self.hub.close_all()
        if self.links is not None:
            await self.links.close()

    def _on_link_change(self, node_id: str, up: bool) -> None:
        """An outbound link came up: the cores greet the peer at once (node_core.on_link_up).
        A link going down teaches nothing: failure detection is membership's probing."""
        if up:
            runtime = self.runtime
            now = runtime.now_ms()
            runtime.core.on_link_up(now, node_id)
            runtime.after_commands(None, now)

    # ------------------------------------------------------------------ membership output
    def apply_member_changes(self, changes: list[tuple[str, int]]) -> None:
        if not self._joined and self._knows_a_peer():
            self._mark_joined()
        links = self.links  # None until the bus loads: load_bus reads the members then
        for node_id, state in changes:
            if links is None:
                pass
            elif state == FORGOTTEN or state == LEFT:
                links.forget(node_id)
            elif state in (ALIVE, SUSPECT, DEAD):
                m = self.membership.member(node_id)
                if m is not None:
                    links.set_address(node_id, m.host, m.grpc_port)
            self.log.info("member_state", peer=node_id[:8], state=state)
        if self._view_path() is None:
            return
        if self._peer_addresses() != self._saved_addresses:
            # Who the peers are, or where: saved at once, as Redis saves nodes.conf. A node
            # killed a moment after a MEET or a peer's move must restart knowing them (at a
            # new address of its own nobody could find it otherwise). State changes, which
            # come and go with every suspicion, are batched.
            if self._view_save is not None:
                self._view_save.cancel()
            self._save_view()
        elif self._view_save is None:
            self._view_save = self.loop.call_later(VIEW_SAVE_DELAY_S, self._save_view)

    def _peer_addresses(self) -> dict[str, tuple[str, int]]:
        me = self.membership.my_id
        return {
            m.node_id: (m.host, m.grpc_port)
            for m in self.membership.members()
            if m.node_id != me and m.state != LEFT
        }

    # ------------------------------------------------------------------ the view file
    def _view_path(self) -> Path | None:
        d = self.settings.state_dir
        return d / CLUSTER_FILE if d is not None else None

    def _load_view(self) -> dict[str, Any] | None:
        path = self._view_path()
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.log.warning("cluster_view_unreadable", path=str(path), error=str(exc))
            return None
        return data if isinstance(data, dict) else None

    def _save_view(self) -> None:
        self._view_save = None
        try:
            self.save_view_now()
        except OSError as exc:
            self.log.warning("cluster_view_not_saved", error=str(exc))

    def save_view_now(self) -> None:
        path = self._view_path()
        if path is not None:
            snapshot = self.membership.snapshot()
            if self.leaving_for_drain:
                # A restart on this data dir rejoins, not leaving (CLUSTER LEAVING yes is kept).
                snapshot["me"]["leaving"] = False
            replace_durably(path, json.dumps(snapshot).encode())
            self._saved_addresses = self._peer_addresses()

    def adopt_node_id(self, node_id: str) -> None:
        """CLUSTER RESET HARD gave membership a new id: the links, the lane and the data
        dir take it too. node.json first: a crash between the two files leaves a view of
        the old id, which a start refuses (an empty view: what the reset left anyway)."""
        from disq.persistence.node_identity import save_node_id

        state_dir = self.settings.state_dir
        if state_dir is not None:
            try:
                save_node_id(state_dir, node_id)
            except OSError as exc:
                self.log.error("node_id_not_saved", error=str(exc))
        if self.links is not None:
            self.links.rename(node_id)
        self.log = get_logger("disq.cluster").bind(node=node_id[:8])
        self.log.info("node_id_changed", reason="CLUSTER RESET HARD")
        self._save_view()

    # ------------------------------------------------------------------ joins
    def meet_grpc(self, host: str, port: int) -> None:
        """Contact a bus address whose node id is unknown. A meet can be lost (the peer is
        still starting, a partition), so it is resent every 0.5 s until a member at that
        address is known, for at most MEET_ATTEMPTS tries."""
        self._meets[(host, port)] = MEET_ATTEMPTS
        self._send_meet(host, port)
        if self._meet_timer is None:
            self._meet_timer = self.loop.call_later(MEET_RETRY_S, self._retry_meets)

    def _send_meet(self, host: str, port: int) -> None:
        if self.links is not None:  # else the retry timer sends it once the bus is up
            self.links.send_to_address(host, port, [self.membership.meet_message()])

    def _retry_meets(self) -> None:
        self._meet_timer = None
        known = {(m.host, m.grpc_port) for m in self.membership.members()}
        for addr in list(self._meets):
            left = self._meets[addr] - 1
            if addr in known or left <= 0:
                del self._meets[addr]
                continue
            self._meets[addr] = left
            self._send_meet(*addr)
        if self._meets:
            self._meet_timer = self.loop.call_later(MEET_RETRY_S, self._retry_meets)
        else:
            self._mark_joined()  # met, or gave up: serve either way

    def meet_client_port(self, host: str, port: int) -> None:
        """CLUSTER MEET ip client-port: the bus is at a fixed offset from the client port,
        Disque's +10000 in config-file mode, or this node's own offset otherwise."""
        offsets = {self.settings.grpc_port - self.settings.resp_port, DISQUE_BUS_OFFSET}
        for off in sorted(offsets):
            if 0 < port + off < 65536:
                self.meet_grpc(host, port + off)


def import_bus() -> None:
    """Import what :meth:`ClusterServices.load_bus` builds (grpc, protobuf, the API's
    services): safe in a thread, which keeps the loop serving the client ports meanwhile."""
    import importlib

    import_api()
    importlib.import_module("disq.server.peer_link")


def import_api() -> None:
    """Import what :meth:`ClusterServices.load_api` builds (the API's protobuf modules, its
    servicer, health and reflection): safe in a thread, as import_bus."""
    import importlib

    importlib.import_module("disq.server.api_results")
    importlib.import_module("grpc_health.v1.health")
    importlib.import_module("grpc_reflection.v1alpha.reflection")


def _timing(node_timeout_ms: int) -> dict[str, int]:
    """SWIM timing from Disque's node timeout: probe often enough that a dead node is
    suspected well within the timeout, never faster than the loop can afford."""
    probe = max(100, min(1000, node_timeout_ms // 10))
    return {
        "probe_interval_ms": probe,
        "ping_timeout_ms": max(50, probe * 2 // 5),
        "node_timeout_ms": node_timeout_ms,
    }


def attach_cluster(runtime: NodeHost, options: dict[str, Any]) -> ClusterServices:
    """Give ``runtime`` its cluster half (called by disq-node before the AOF is replayed, so
    the replay can route cluster records to the Disque core)."""
    from disq.persistence.node_identity import load_or_create_node_id

    state_dir = options.get("state_dir")
    my_id = load_or_create_node_id(Path(state_dir)) if state_dir else os.urandom(20).hex()
    settings = ClusterSettings(
        host=options["host"],
        resp_port=options["resp_port"],
        grpc_port=options["grpc_port"],
        node_timeout_ms=options["node_timeout_ms"],
        joins=list(options["joins"]),
        requirepass=options.get("requirepass"),
        beanstalk_replicate=int(options.get("beanstalk_replicate") or 1),
        events_max_bytes=options.get("events_max_bytes"),
        state_dir=Path(state_dir) if state_dir else None,
        config_store=options.get("config_store"),
        tls=options.get("tls"),
        job_lane_port=int(options.get("job_lane_port") or 0),
        advertise_host=options.get("advertise_host") or None,
    )
    if settings.config_store is None:
        # Flag mode: CONFIG GET shows what the flags chose; REWRITE has no file to write.
        from disq.config import ConfigFileError, parse_config

        lines = [f"cluster-node-timeout {settings.node_timeout_ms}"]
        if settings.resp_port:
            lines.append(f"port {settings.resp_port}")
        # Always given in flag mode: left unset, a RESP port above 55535 would fail the file
        # check "port + 10000 must be a port" and leave the node without a config store.
        lines.append(f"grpc-port {settings.grpc_port or 0}")
        if settings.advertise_host:
            lines.append(f"advertise-host {settings.advertise_host}")
        if runtime.config.data_dir is not None:
            lines += ["appendonly yes", f"appendfsync {runtime.config.fsync}"]
        try:
            settings.config_store = parse_config("\n".join(lines) + "\n")
        except ConfigFileError:
            settings.config_store = None
    cluster = ClusterServices(runtime, settings, my_id)
    cluster.disque.aof_enqueue_once = bool(options.get("aof_enqueue_once"))
    runtime.cluster = cluster
    return cluster
