"""One node on one asyncio loop: the node core, its doors, the AOF, the peers, one timer.

beanstalkd's loop, with etcd raft's contract. Inputs (a read's commands, a peer's frame, the
timer) go into the node core; then :meth:`NodeRuntime._flush`, once per loop iteration, takes
the core's one :class:`~disq.core.node_core.Ready` and applies it with
:func:`~disq.core.node_core.apply_ready`: the records in one write (group commit), and only
then the peer messages, the deferred replies (through the one :class:`ReplyRouter`) and the
beanstalk wake-ups; then the connections' gathered replies; then ``advance``. Time-driven
work has one timer, armed for the core's earliest deadline, never a timer per job.

A Ready whose write failed is kept and retried; nothing of it leaves before it is written.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import sys
import time
import traceback
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.events import EventBuffer
from disq.core.node_core import NodeCore, Ready, apply_ready
from disq.logging import get_logger
from disq.logging import load as load_logging
from disq.protocol.beanstalk import OP_COUNT
from disq.server.aof_service import AofService
from disq.server.beanstalk_tcp import BeanstalkProtocol
from disq.server.clock import NodeClock
from disq.server.commit_gate import CommitGate, split_free
from disq.server.listen_error import ListenError, reason_of
from disq.server.node_config import NodeConfig
from disq.server.router import ReplyRouter

if TYPE_CHECKING:
    import ssl
    from pathlib import Path

    from disq.config import DisqueSettings
    from disq.core.beanstalk.model import Session
    from disq.core.disque.api import DeferredResult
    from disq.core.messages import Message
    from disq.doors.beanstalk_door import Replicator
    from disq.server.admin_http import AdminServer
    from disq.server.event_metrics import NodeMetrics
    from disq.server.flow import Flushable
    from disq.server.host import ClusterPart

PROTOCOL_VERSION = "1.12"  # the beanstalkd protocol this door speaks, reported by `stats`
DEFAULT_BACKLOG = 511  # Redis's and Disque's tcp-backlog default
# Lifecycle events are written this long after the first of them (one write for many
# flushes, none on the path of a reply); readers write them first (EventLog.read).
EVENTS_WRITE_DELAY_S = 0.005
# A node restarted on its cluster view serves its client ports once it has dialled the peers
# in it (each link up, its greeting Ping queued, or refused), so that a peer that had it as
# failed hears of the restart before any client is answered: a client that restarts a node,
# waits for PING and kills it again must not leave the others believing it never came back.
# On one host or a LAN the dials take milliseconds, and a peer that is down refuses at once;
# only a silent peer (its packets dropped) costs this bound, which is wide enough for a dial
# on a loaded machine (100 ms was not, on 2 busy cores: the node served first).
CONTACT_BEFORE_SERVING_S = 1.0
# Lifecycle events kept for the metrics while the admin port starts (its modules load in a
# thread after the client ports serve); past this, counters started late miss the rest.
METRICS_BACKLOG_MAX = 10_000
# structlog, then the admin port's modules, load this long after the ports serve.
DEFERRED_IMPORT_DELAY_S = 0.2


async def start_server(
    loop: asyncio.AbstractEventLoop,
    factory: Any,
    sock: socket.socket,
    backlog: int,
    ssl_context: ssl.SSLContext | None = None,
) -> asyncio.AbstractServer:
    """Serve ``factory`` on a bound socket; the server's ``listen(backlog)`` is ``tcp-backlog``
    (disq-node bound and listened early so that clients queue meanwhile; listening again
    sets the queue length the configuration asks for)."""
    if sock.family == socket.AF_UNIX:
        return await loop.create_unix_server(factory, sock=sock, backlog=backlog)
    return await loop.create_server(factory, sock=sock, backlog=backlog, ssl=ssl_context)


def bind_unix(path: Path, perm: int) -> socket.socket:
    """Redis's anetUnixServer: remove a stale socket file (never another kind of file), bind,
    then chmod to ``unixsocketperm`` when it is set (0: the umask decides)."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        if perm:
            os.chmod(path, perm)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class NodeRuntime:
    def __init__(
        self, config: NodeConfig, loop: asyncio.AbstractEventLoop, clock: NodeClock | None = None
    ) -> None:
        self.config = config
        self.loop = loop
        # Deadlines on the monotonic node clock, absolute times on the wall clock (clock.py).
        self.clock = clock if clock is not None else NodeClock()
        self._wall_offset_ms = 0  # what the cores were last told (sync_wall)
        self.beanstalk = BeanstalkCore(config.limits, persist=False)
        self.core = NodeCore(self.beanstalk)
        self.router = ReplyRouter()
        self.aof = AofService(self)
        self.gate = CommitGate(self)  # appendfsync always: output waits for its fsync
        self.aof.on_durable = self.gate.release
        self._durable_waiters: list[asyncio.Future[None]] = []
        self.cluster: ClusterPart | None = None  # set by cluster_services.attach_cluster
        self.op_counts = [0] * OP_COUNT  # beanstalk commands, for `stats`
        self.sessions: dict[Session, BeanstalkProtocol] = {}  # where wake-ups go
        # Set with the cluster half: the node core replicates beanstalk puts. None on a
        # standalone node, so its put path makes no call for it.
        self.replicator: Replicator | None = None
        self.instance_id = os.urandom(8).hex()
        self.metrics: NodeMetrics | None = None  # set with the admin port (metrics.py)
        self.admin: AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None  # structlog and the admin port, later
        self._metrics_backlog: list[EventBuffer] | None = None  # events until metrics exist
        self.started = time.monotonic()
        self.fatal = False  # stopped because the AOF can no longer be trusted
        self.servers: list[asyncio.AbstractServer] = []
        self.loading = False  # INFO loading: the AOF is being replayed
        self.unix_path: Path | None = None  # the unixsocket this node created (unlinked at stop)
        self._settings_applied = False
        self._dirty: list[Flushable] = []  # connections with replies waiting for the flush
        self._flush_scheduled = False
        self._held: Ready | None = None  # a Ready whose records could not be written yet
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = -1
        self._events_timer: asyncio.TimerHandle | None = None  # the event log's write
        self._stopping: asyncio.Future[None] | None = None
        self._draining: asyncio.Task[None] | None = None  # the SIGTERM drain (drain.py)
        self._uname = os.uname()
        self._hostname = socket.gethostname()
        self.log: Any = get_logger("disq.node")

    # ------------------------------------------------------------------ clock
    def now_ms(self) -> int:
        """The node clock (monotonic): what every core input and deadline is in."""
        return self.clock.now_ms()

    def wall_ms(self) -> int:
        """The wall clock, for what is shown as a date (TIME)."""
        return self.clock.wall_ms()

    def sync_wall(self) -> None:
        """Tell the cores how far the wall clock is from the node clock, for the absolute
        times they write (ctime, the AOF's expiries). Read once per flush and per timer: two
        clock reads, and a step is followed within a loop iteration."""
        off = self.clock.wall_offset_ms()
        if off != self._wall_offset_ms:
            if abs(off - self._wall_offset_ms) > 1:  # not NTP's slew: a step
                self.log.warning("wall_clock_stepped", by_ms=off - self._wall_offset_ms)
            self._wall_offset_ms = off
            self.core.set_wall_offset(off, self.now_ms())

    # ------------------------------------------------------------------ inputs
    def after_commands(self, conn: Flushable | None, now_ms: int) -> None:
        """A door ran commands (or a connection closed, or a gRPC call returned): its
        replies leave with the next flush; the core's output is taken there too."""
        if conn is not None:
            self._dirty.append(conn)
        self.schedule_flush()
        hint = self.beanstalk.timer_hint_ms
        if hint >= 0:
            self.beanstalk.timer_hint_ms = -1
            self.check_timer(hint, now_ms)

    def on_peer_messages(self, sender: str, msgs: list[Message]) -> None:
        self.core.on_peer_messages(self.now_ms(), sender, msgs)
        if self.aof.writer is None and self._held is None:
            # Nothing to write first: answer this frame now rather than an iteration later
            # (each loop iteration under load costs a millisecond or more of latency).
            self._flush()
        else:
            self.schedule_flush()

    def mark_dirty(self, conn: Flushable) -> None:
        """A routed reply gave ``conn`` output: write it with this flush."""
        self._dirty.append(conn)

    # ------------------------------------------------------------------ the flush
    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def flush_now(self) -> None:
        """Apply what is pending at once (before closing or switching the AOF)."""
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.sync_wall()
        core = self.core
        # Always a Ready, even an empty one: taking it also settles the bridge between the
        # cores and the memory level (CONFIG SET maxmemory 0 must clear a warning at once).
        rd = self._held if self._held is not None else core.ready(self.now_ms())
        if self.gate.held or (rd.aof_records and self.aof.group_commit):
            self._flush_held(rd)
            return
        events = None
        if rd:
            try:
                applied = apply_ready(
                    rd, self.aof.persist, self._send, self.router.route, self._wake
                )
            except Exception:
                # A waiter or a door raised: a bug, but the node must go on serving (the
                # rest of this Ready is lost; its clients time out or retry).
                self.log.exception("ready_apply_failed", ready=repr(rd))
                applied = True
            if not applied:
                self._held = rd  # the AOF service schedules the retry
                return
            self._held = None
            self._after_apply(rd)
            events = rd.events
        core.advance()
        dirty = self._dirty
        self._dirty = []
        if self.aof.writer is not None and self.logged_since_flush():
            # Routed replies ran the commands queued behind them, and those logged records:
            # their connections wait for the next write.
            self._dirty = dirty
            self.schedule_flush()
        else:
            seen: set[int] = set()
            for conn in dirty:
                if id(conn) not in seen:
                    seen.add(id(conn))
                    conn.flush()
            if core.has_ready():
                self.schedule_flush()
        if self._durable_waiters:
            waiters, self._durable_waiters = self._durable_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._after_flush(events)

    def _flush_held(self, rd: Ready) -> None:
        """The group commit under ``always`` (commit_gate.py): the records written now, all
        the rest held until an fsync covers them; the loop goes on meanwhile."""
        core = self.core
        if rd.aof_records and not self.aof.persist(rd.aof_records):
            self._held = rd
            return
        self._held = None
        if rd.messages:
            for peer, msgs in split_free(rd.messages).items():
                self._send(peer, msgs)
            # On the wire now, not after this node's fsync (sync_to below may run it on the
            # loop): a sync add's replicas fsync their copies while this node fsyncs its own.
            self.links_flush()
        self._after_apply(rd)
        core.advance()
        dirty, self._dirty = self._dirty, []
        waiters, self._durable_waiters = self._durable_waiters, []
        writer = self.aof.writer
        mark = writer.bytes_written if writer is not None else 0
        output = rd if (rd.messages or rd.replies or rd.wakeups) else None
        if output is not None or dirty or waiters:
            self.gate.hold(mark, output, dirty, waiters)
        if rd.aof_records or self.gate.held:
            self.aof.sync_to(mark)
        if core.has_ready():
            self.schedule_flush()
        self._after_flush(rd.events)

    def _after_flush(self, events: list[EventBuffer] | None) -> None:
        if events:
            self._log_events(events)
        nd = self.core.next_deadline_ms()
        if nd >= 0:
            self.check_timer(nd, self.now_ms())

    def logged_since_flush(self) -> bool:
        """Commands run since the last Ready was taken logged records."""
        disque = self.core.disque
        return bool(self.beanstalk.aof_out or (disque is not None and disque.aof_out))

    def durable(self) -> asyncio.Future[None]:
        """Done once everything the cores did so far is written, and fsynced under
        ``always``: a gRPC call answered at once (an ASYNC add) waits for it."""
        fut: asyncio.Future[None] = self.loop.create_future()
        self._durable_waiters.append(fut)
        self.schedule_flush()
        return fut

    # The gate's view of the runtime (commit_gate.GateHost).
    def send(self, peer: str, msgs: list[Message]) -> None:
        self._send(peer, msgs)

    def route(self, token: int, result: DeferredResult) -> None:
        self.router.route(token, result)

    def wake(self, session: Session, result: Any) -> None:
        self._wake(session, result)

    def links_flush(self) -> None:
        cluster = self.cluster
        if cluster is not None and cluster.links is not None:
            cluster.links.flush()

    def _send(self, peer: str, msgs: list[Message]) -> None:
        cluster = self.cluster
        if cluster is not None and cluster.links is not None:  # None: no peer yet
            cluster.links.send_many(peer, msgs)

    def _wake(self, session: Session, result: Any) -> None:
        proto = self.sessions.get(session)
        if proto is None or proto.door is None:
            return
        proto.door.resume(result, self.now_ms(), proto.out)
        self._dirty.append(proto)

    def _after_apply(self, rd: Ready) -> None:
        cluster = self.cluster
        if cluster is not None:
            if cluster.links is not None:
                cluster.links.flush()
            if rd.member_changes:
                cluster.apply_member_changes(rd.member_changes)
        errors = self.core.errors
        if errors:
            for what, exc in errors:
                # The exception was contained by the core (one bad input, the node goes
                # on); its class and traceback are what tell a bug from bad input.
                self.log.error(
                    "core_input_failed",
                    what=what,
                    error=repr(exc),
                    error_class=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    exc_info=exc,
                )
            errors.clear()

    def _log_events(self, events: list[EventBuffer]) -> None:
        """The lifecycle events of an applied Ready, into the event log and the metrics:
        after the replies were written, so neither is on the path of a reply."""
        cluster = self.cluster
        if cluster is None:
            return
        metrics = self.metrics
        log = cluster.event_log
        backlog = self._metrics_backlog
        off = self._wall_offset_ms
        for batch in events:
            if off:
                # The cores time events on the node clock; the log (and `disq events
                # --since`, and the gRPC stream) keep wall-clock times.
                batch.times = array("q", [t + off for t in batch.times])
            log.append(batch)
            if metrics is not None:
                metrics.on_events(batch)
            elif backlog is not None and len(backlog) < METRICS_BACKLOG_MAX:
                backlog.append(batch)
        if log.has_unwritten and self._events_timer is None:
            self._events_timer = self.loop.call_later(EVENTS_WRITE_DELAY_S, self._write_events)

    def _write_events(self) -> None:
        self._events_timer = None
        cluster = self.cluster
        if cluster is not None:
            cluster.event_log.flush()

    # ------------------------------------------------------------------ the one timer
    def check_timer(self, deadline_ms: int, now_ms: int) -> None:
        """Arm the one timer earlier if ``deadline_ms`` comes before it. ``deadline_ms`` is
        the first node-clock millisecond at which the core has work (its
        ``next_deadline_ms``, already past the deadline itself: disq/core/timers.py)."""
        if self._timer_at_ms < 0 or deadline_ms < self._timer_at_ms:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at_ms = deadline_ms
            delay_s = max(0.0, (deadline_ms - now_ms) / 1000)
            self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        at = self._timer_at_ms
        self._timer = None
        self._timer_at_ms = -1
        now_ms = self.now_ms()
        if now_ms < at:
            # Early: asyncio runs a timer up to its clock resolution early, uvloop by as much
            # as its cached loop time is stale. Nothing is due yet; wait the rest (at least a
            # millisecond, the clock's step, so this never spins).
            self.check_timer(at, now_ms)
            return
        self.core.tick(now_ms)
        self.beanstalk.timer_hint_ms = -1  # the flush re-arms for the next deadline
        self.after_commands(None, now_ms)

    # ------------------------------------------------------------------ AOF facade
    def open_aof(self) -> None:
        """Replay the AOF into the cores, then log to it (before serving)."""
        disque = self.core.disque
        once = disque is not None and disque.aof_enqueue_once
        self.apply_settings()
        self.sync_wall()  # the file's times are wall-clock: replay converts them with it
        self.loading = True
        try:
            self.aof.open()
        finally:
            self.loading = False
        if once and self.cluster is not None:
            self.cluster.enqueue_once_done()

    @property
    def aof_error(self) -> str | None:
        return self.aof.error

    def fail(self) -> None:
        """The AOF can no longer be trusted: acknowledge nothing more, stop."""
        self._dirty.clear()
        self.fatal = True
        self.stop()

    # ------------------------------------------------------------------ stats
    def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        writer = self.aof.writer
        return [
            ("pid", os.getpid()),
            ("version", f'"{PROTOCOL_VERSION}"'),
            ("rusage-utime", f"{ru.ru_utime:.6f}"),
            ("rusage-stime", f"{ru.ru_stime:.6f}"),
            ("uptime", int(time.monotonic() - self.started)),
            ("binlog-oldest-index", 1 if writer else 0),
            ("binlog-current-index", 1 if writer else 0),
            ("binlog-records-migrated", writer.rewrites_done if writer else 0),
            ("binlog-records-written", writer.records_written if writer else 0),
            ("binlog-max-size", self.config.binlog_max_size),
            ("draining", "true" if self.beanstalk.draining else "false"),
            ("id", self.instance_id),
            ("hostname", self._hostname),
            ("os", self._uname.version),
            ("platform", self._uname.machine),
        ]

    # ------------------------------------------------------------------ config keys
    @property
    def settings(self) -> DisqueSettings | None:
        """The configuration in force (a config file, or the one built from the flags)."""
        cluster = self.cluster
        store = cluster.settings.config_store if cluster is not None else None
        return store.settings if store is not None else None

    def apply_settings(self) -> None:
        """Apply the keys the runtime owns (the RESP port's and logging's) once, and follow
        their CONFIG SET from then on (the cluster half applies the cluster's keys)."""
        cluster = self.cluster
        settings = self.settings
        if self._settings_applied or cluster is None or settings is None:
            return
        self._settings_applied = True
        hub = cluster.hub
        hub.max_clients = settings.maxclients
        hub.keepalive_s = settings.tcp_keepalive_s
        hub.set_idle_timeout(settings.timeout_s)
        self.config.rewrite_min_bytes = settings.auto_aof_rewrite_min_size_bytes
        cluster.settings.config_store.appliers.append(self._on_config_set)

    def _on_config_set(self, name: str, value: str) -> None:
        cluster = self.cluster
        if cluster is None:
            return
        hub = cluster.hub
        if name == "maxclients":
            hub.max_clients = int(value)  # clients over the new limit stay, as in Redis
        elif name == "timeout":
            hub.set_idle_timeout(int(value))
        elif name == "tcp-keepalive":
            hub.keepalive_s = int(value)  # for connections accepted from now on (Redis)
        elif name == "loglevel":
            from disq.logging import set_level

            set_level(value)
        elif name == "auto-aof-rewrite-min-size":
            self.config.rewrite_min_bytes = int(value)

    # ------------------------------------------------------------------ lifecycle
    async def serve(
        self,
        sockets: list[socket.socket],
        resp_sockets: list[socket.socket] | None = None,
        *,
        tls_sockets: list[socket.socket] | None = None,
        resp_tls_sockets: list[socket.socket] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Serve until stopped. ``tls_sockets`` (beanstalk) and ``resp_tls_sockets``: the TLS
        ports (disq.server.tls_ports), the same protocols wrapped in ``ssl_context``."""
        loop = self.loop
        tls_sockets, resp_tls_sockets = tls_sockets or [], resp_tls_sockets or []
        cluster = self.cluster
        # The admin port is bound first (a busy port the config insists on fails the start
        # before anything serves) and served last, from a task: see _after_serving.
        admin_sock = self._bind_admin() if self.config.metrics_port else None
        if cluster is not None:
            self.apply_settings()
            settings = self.settings
            backlog = settings.tcp_backlog if settings is not None else DEFAULT_BACKLOG
            factory = cluster.hub.protocol_factory
            if settings is not None and settings.unixsocket_path is not None:
                try:
                    unix_sock = bind_unix(settings.unixsocket_path, settings.unixsocketperm)
                except OSError as exc:
                    # Redis: "Opening Unix socket: ..." and exit. Nothing is served yet.
                    sys.stderr.write(
                        f"disq-node: cannot listen on unixsocket {settings.unixsocket_path}: "
                        f"{exc.strerror or exc}\n"
                    )
                    self.log.error("unixsocket_failed", path=str(settings.unixsocket_path))
                    self.fatal = True
                    self.aof.close()
                    return
                self.unix_path = settings.unixsocket_path
                self.servers.append(await start_server(loop, factory, unix_sock, backlog))
            if cluster.links is not None:  # peers hear first (cluster_services.load_bus)
                await cluster.start()
                assert cluster.links is not None
                await cluster.links.wait_contacted(CONTACT_BEFORE_SERVING_S)
            for sock in resp_sockets or []:
                self.servers.append(await start_server(loop, factory, sock, backlog))
            for sock in resp_tls_sockets:
                self.servers.append(await start_server(loop, factory, sock, backlog, ssl_context))
        for sock in sockets:
            if sock.family == socket.AF_UNIX:
                server = await loop.create_unix_server(lambda: BeanstalkProtocol(self), sock=sock)
            else:
                server = await loop.create_server(
                    lambda: BeanstalkProtocol(self), sock=sock, backlog=1024
                )
            self.servers.append(server)
        for sock in tls_sockets:
            self.servers.append(
                await loop.create_server(
                    lambda: BeanstalkProtocol(self), sock=sock, backlog=1024, ssl=ssl_context
                )
            )
        self._stopping = loop.create_future()
        loop.add_signal_handler(signal.SIGTERM, self.terminate)
        loop.add_signal_handler(signal.SIGINT, self.stop)  # Ctrl-C: now, no drain
        loop.add_signal_handler(signal.SIGUSR1, self.drain)
        self.after_commands(None, self.now_ms())  # arm the timer for what replay scheduled
        self.log.info(
            "listening",
            addresses=[str(s.getsockname()) for s in [*sockets, *(resp_sockets or [])]],
            tls_addresses=[str(s.getsockname()) for s in [*tls_sockets, *resp_tls_sockets]],
            data_dir=str(self.config.data_dir) if self.config.data_dir else None,
            jobs=len(self.beanstalk.jobs),
        )
        if admin_sock is not None:
            self._metrics_backlog = []
        self._admin_task = loop.create_task(self._after_serving(admin_sock))
        if cluster is not None and cluster.links is None:
            await self._start_bus(cluster)
        elif cluster is not None and cluster.api is None:
            await self._start_api(cluster)
        await self._stopping
        await self.shutdown()

    async def _start_bus(self, cluster: ClusterPart) -> None:
        """A node with no peer to hear from it first: its client ports serve, then the bus
        loads (grpc and the API's modules imported in a thread, the loop serving meanwhile)
        and starts. The import waits DEFERRED_IMPORT_DELAY_S, as structlog's does: grpc's
        and protobuf's C initialisation holds the interpreter for milliseconds at a time, and
        a client's first commands (a harness's, 0.1 s after spawning the node) come first. A
        bus port that cannot be bound still fails the start (ListenError, as when it is
        bound first), after the node has stopped serving and closed its AOF."""
        from disq.server.cluster_services import import_bus

        await asyncio.sleep(DEFERRED_IMPORT_DELAY_S)
        if self._stopping is not None and self._stopping.done():
            return  # stopped meanwhile: nothing to start
        await self._off_loop(import_bus)
        try:
            await cluster.start()
        except ListenError:
            self.stop()
            await self.shutdown()
            raise

    async def _start_api(self, cluster: ClusterPart) -> None:
        """A node whose peers heard from it first: its bus serves the links, and the client
        API (the Queue service, health, reflection) loads now that the client ports serve,
        its modules imported in a thread. At once, not DEFERRED_IMPORT_DELAY_S later: gRPC
        clients are answered UNAVAILABLE (never run, late_services.py) until it is in."""
        from disq.server.cluster_services import import_api

        await self._off_loop(import_api)
        if self._stopping is not None and self._stopping.done():
            return  # stopped meanwhile
        await cluster.start_api()

    def _bind_admin(self) -> socket.socket | None:
        cfg = self.config
        family = socket.AF_INET6 if ":" in cfg.metrics_host else socket.AF_INET
        try:
            return socket.create_server(
                (cfg.metrics_host, cfg.metrics_port), family=family, backlog=128
            )
        except OSError as exc:
            if cfg.metrics_port_required:
                raise ListenError(
                    "admin (HTTP)", cfg.metrics_host, cfg.metrics_port, reason_of(exc)
                ) from exc
            # A port derived from the client port (Disque's config has no such key): a
            # clash with something else must not keep the node from serving jobs.
            self.log.warning("metrics_port_unavailable", port=cfg.metrics_port, error=str(exc))
            return None

    async def _after_serving(self, admin_sock: socket.socket | None) -> None:
        """What waits until the job ports serve: structlog, which then writes the lines kept
        until then (disq/logging.py), and the admin HTTP port (metrics, health, dashboard).

        Their modules take 15-20 ms (structlog) and a few hundred milliseconds (aiohttp,
        which builds two TLS contexts at import, prometheus-client, jinja2) to import: on
        the loop that would hold every client and every timer of a node's first moments.
        They load in a thread instead, with a short GIL switch interval meanwhile so the
        loop's thread gets the interpreter back within a millisecond; the admin port's
        connections wait in its backlog. They start DEFERRED_IMPORT_DELAY_S after the ports
        serve: a node's first answers (a harness that sends its first command 0.1 s after
        starting the server; the gRPC port's, which go through grpc's own threads and wait
        for the interpreter too) are not shared with them."""
        await asyncio.sleep(DEFERRED_IMPORT_DELAY_S)
        try:
            await self._off_loop(load_logging)
        except Exception:  # structlog failed to import or configure: stderr says why
            traceback.print_exc()
        if admin_sock is not None:
            await self._start_admin(admin_sock)

    async def _off_loop(self, fn: Callable[[], None]) -> None:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.001)
        try:
            await self.loop.run_in_executor(None, fn)
        finally:
            sys.setswitchinterval(interval)

    async def _start_admin(self, sock: socket.socket) -> None:
        try:
            await self._off_loop(_import_admin)
        except Exception:
            self.log.exception("admin_import_failed")
            sock.close()
            return
        from disq.server.admin_http import start_admin

        try:
            self.admin = await start_admin(self, sock)
        except Exception:
            self.log.exception("admin_start_failed")
            sock.close()
            return
        backlog, self._metrics_backlog = self._metrics_backlog, None
        if backlog and self.metrics is not None:
            for batch in backlog:
                self.metrics.on_events(batch)

    def drain(self) -> None:
        self.beanstalk.draining = True
        self.log.info("drain_mode")

    def terminate(self) -> None:
        """SIGTERM: leave, hand the jobs off, then stop (drain.py). A second SIGTERM, a node
        without a cluster, or ``drain_timeout_s`` 0: stop at once."""
        if self._draining is not None or self.cluster is None or self.config.drain_timeout_s <= 0:
            self.stop()
            return
        from disq.server.drain import start_drain

        self._draining = start_drain(self)

    def stop(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    async def shutdown(self) -> None:
        if self._draining is not None:
            self._draining.cancel()  # stopped mid-drain: a second SIGTERM, SIGINT, SHUTDOWN
        for server in self.servers:
            server.close()
        if not self.fatal:
            self._flush()
        if self._admin_task is not None and not self._admin_task.done():
            self._admin_task.cancel()
            try:
                await self._admin_task
            except (asyncio.CancelledError, Exception):  # cancelled mid-start
                pass
        if self.admin is not None:
            await self.admin.close()
        if self.cluster is not None:
            await self.cluster.close()
            self.cluster.event_log.close()
        self.aof.close()
        if self.unix_path is not None:
            try:
                os.unlink(self.unix_path)  # as Redis at shutdown
            except OSError:
                pass
        self.log.info("stopped")


def _import_admin() -> None:
    import importlib

    importlib.import_module("disq.server.admin_http")
