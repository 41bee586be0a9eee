"""The cluster half of a node: membership, the job core and the gRPC links on the node's loop.

Everything the two pure cores produce goes through ``pump``: AOF records join the node's
group commit, and the peer messages and deferred client replies of the iteration are held
until that write is done (``release``, called by ``Node._flush``). So a GOTJOB never confirms
a copy that is not in the AOF yet, and a client never sees a job id whose job a crash could
lose (design.md section 1: "flush once").

One timer for both cores: the earlier of their ``next_deadline_ms``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from disq.core.cluster import ClusterCore
from disq.core.cluster_api import DisqueError
from disq.core.engine import EV_DELETE
from disq.core.job import BURIED, ClusterState
from disq.core.membership import FORGOTTEN, Membership
from disq.core.messages import (
    ALIVE,
    DEAD,
    LEFT,
    MEMBERSHIP_TYPES,
    SUSPECT,
    DelJob,
    IdemKeys,
    JobData,
    Member,
)
from disq.persistence import aof_file
from disq.persistence.cluster_records import (
    REC_DELJOB,
    REC_LOADJOB,
    encode_deljob,
    encode_loadjob,
    to_core_records,
)
from disq.persistence.event_log import EventLog
from disq.server.api_service import QueueApi
from disq.server.peer_link import PeerLinks
from disq.server.resp_node import NodeServices
from disq.server.resp_tcp import RespHub, RespProtocol

if TYPE_CHECKING:
    from disq.core.session import Session
    from disq.server.node import Node

CLUSTER_FILE = "cluster.json"
VIEW_SAVE_DELAY_S = 1.0
DISQUE_BUS_OFFSET = 10000
MEET_RETRY_S = 0.5
MEET_ATTEMPTS = 20  # Disque's bus port = client port + 10000


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
    config_store: Any = None  # disq.config_file.ConfigStore in config-file mode


class ClusterRuntime:
    def __init__(self, node: Node, settings: ClusterSettings, my_id: str) -> None:
        self.node = node
        self.settings = settings
        self.loop = node.loop
        self.log = structlog.get_logger("disq.cluster").bind(node=my_id[:8])
        seed = int.from_bytes(os.urandom(8), "little")
        self.rng = random.Random(seed)
        now = node.now_ms()
        me = Member(
            node_id=my_id,
            host=settings.host if settings.host not in ("0.0.0.0", "::") else "127.0.0.1",
            grpc_port=settings.grpc_port,
            client_port=settings.resp_port,
            incarnation=0,
            state=ALIVE,
        )
        timing = _timing(settings.node_timeout_ms)
        snapshot = self._load_view()
        if snapshot is not None:
            try:
                self.membership = Membership.restore(snapshot, me, self.rng, now, **timing)
            except (ValueError, KeyError, TypeError) as exc:
                self.log.warning("cluster_view_unusable", error=str(exc))
                self.membership = Membership(me, self.rng, now, **timing)
        else:
            self.membership = Membership(me, self.rng, now, **timing)
        self.core = ClusterCore(self.membership, self.rng, now)
        self.core.max_memory_bytes = node.config.limits.max_memory_bytes
        self.links = PeerLinks(
            my_id, self.on_peer_messages, host=settings.host, port=settings.grpc_port
        )
        self._held_out: list[tuple[str, Any]] = []
        self._dirty_resp: list[RespProtocol] = []
        self._release_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = -1
        self._view_save: asyncio.TimerHandle | None = None
        self.message_errors = 0
        self.beanstalk_replicate = settings.beanstalk_replicate
        if settings.config_store is not None:
            settings.config_store.on_change = self.on_config_change
        self._bputs: dict[int, tuple[Session, int]] = {}  # token -> (session, engine id)
        self._meets: dict[tuple[str, int], int] = {}
        self._meet_timer: asyncio.TimerHandle | None = None
        self.services = NodeServices(self)
        self.hub = RespHub(self.services)
        self.resp_factory: Callable[[], asyncio.Protocol] = self.hub.protocol_factory
        state_dir = settings.state_dir or node.config.data_dir
        max_bytes = settings.events_max_bytes
        self.event_log = EventLog(
            state_dir / "events" if state_dir is not None else None,
            max_bytes=max_bytes,
            # A small bound gets small segments, so retention works in small steps.
            segment_bytes=min(4 << 20, max(1024, max_bytes // 4)) if max_bytes else 4 << 20,
        )
        node.engine.events.enabled = True  # drained into the log by pump and the node
        self.api = QueueApi(self)
        self.hub.other = self.api.route
        self.links.add_services.append(self.api.register)
        for m in self.membership.members():
            if m.node_id != my_id and m.state != LEFT:
                self.links.set_address(m.node_id, m.host, m.grpc_port)

    def on_config_change(self, name: str, value: str) -> None:
        """CONFIG SET applied to the running node (called before the store keeps the value;
        raising refuses the change)."""
        from disq.config_file import ConfigSetError

        node = self.node
        if name == "maxmemory":
            limit = int(value)
            self.core.max_memory_bytes = limit
            node.engine.limits.max_memory_bytes = limit
        elif name == "appendonly":
            store = self.settings.config_store
            try:
                if value == "yes":
                    node.enable_aof(store.settings.dir if store is not None else Path("."))
                else:
                    node.disable_aof()
                self.core.persist = node.aof is not None
            except Exception as exc:
                self.log.error("config_appendonly_failed", error=str(exc))
                raise ConfigSetError("ERR Unable to turn on AOF. Check server logs.") from exc
        elif name == "appendfsync":
            was = node.config.fsync
            node.config.fsync = value
            if value == "everysec" and was != "everysec" and node.aof is not None:
                self.loop.call_later(node.config.fsync_interval_ms / 1000, node.fsync_tick)
        elif name == "cluster-node-timeout":
            self.membership.node_timeout_ms = max(1, int(value))
        elif name == "beanstalk-replicate":
            self.beanstalk_replicate = max(1, int(value))

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.core.persist = self.node.aof is not None
        port = await self.links.start()
        self.settings.grpc_port = port
        await self.api.set_serving(True)
        for host, gport in self.settings.joins:
            self.meet_grpc(host, gport)
        self.pump(self.node.now_ms())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._meet_timer is not None:
            self._meet_timer.cancel()
        self._save_view()
        if hasattr(self.api, "health"):
            await self.api.set_serving(False)
        self.hub.close_all()
        await self.links.close()

    def after_resp_commands(self, proto: RespProtocol | None) -> None:
        if proto is not None and (proto.out or proto.closing):
            self._dirty_resp.append(proto)
        self.pump(self.node.now_ms())

    # ------------------------------------------------------------------ persistence
    def restore(self, recs: list[tuple[int, bytes]]) -> int:
        core_recs = to_core_records(recs)
        once = self.core.aof_enqueue_once
        self.core.restore(self.node.now_ms(), core_recs)
        store = self.settings.config_store
        if once and store is not None and store.config_file is not None:
            # Disque resets aof-enqueue-jobs-once after the load it was meant for, in the
            # file too, so the next ordinary restart requeues by retry again.
            try:
                store.set("aof-enqueue-jobs-once", "no")
                store.rewrite()
            except Exception as exc:
                self.log.warning("aof_enqueue_once_not_reset", error=str(exc))
        return len(self.core.jobs)

    def snapshot_bytes(self) -> bytes:
        out = bytearray()
        for kind, payload in self.core.snapshot_records(self.node.now_ms()):
            if kind == "LOADJOB":
                assert isinstance(payload, JobData)
                aof_file.frame_into(out, REC_LOADJOB, encode_loadjob(payload))
        return bytes(out)

    def live_bytes(self) -> int:
        """Kept up to date by the core (asked after every AOF write: must be O(1))."""
        return self.core.used_bytes

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
        path = self._view_path()
        if path is None:
            return
        try:
            aof_file.replace_durably(path, json.dumps(self.membership.snapshot()).encode())
        except OSError as exc:
            self.log.warning("cluster_view_not_saved", error=str(exc))

    def save_view_now(self) -> None:
        path = self._view_path()
        if path is not None:
            aof_file.replace_durably(path, json.dumps(self.membership.snapshot()).encode())

    def _schedule_view_save(self) -> None:
        if self._view_save is None and self._view_path() is not None:
            self._view_save = self.loop.call_later(VIEW_SAVE_DELAY_S, self._save_view)

    # ------------------------------------------------------------------ input
    def on_peer_messages(self, sender: str, msgs: list[Any]) -> None:
        now = self.node.now_ms()
        membership, core = self.membership, self.core
        for msg in msgs:
            try:
                if isinstance(msg, MEMBERSHIP_TYPES):
                    membership.on_message(now, sender, msg)
                else:
                    core.on_message(now, sender, msg)
            except Exception:  # a bad message must not take the node down
                self.message_errors += 1
                self.log.exception("peer_message_failed", sender=sender[:8], kind=type(msg))
        self.pump(now)
        if self.node.aof is None and self._release_scheduled:
            # Nothing to write first: answer this frame now rather than an iteration later
            # (each loop iteration under load costs a millisecond or more of latency).
            self.release()

    def meet_grpc(self, host: str, port: int) -> None:
        """Contact a bus address whose node id is unknown. A meet can be lost (the peer is
        still starting, a partition), so it is resent every 0.5 s until a member at that
        address is known, for at most MEET_ATTEMPTS tries."""
        self._meets[(host, port)] = MEET_ATTEMPTS
        self._send_meet(host, port)
        if self._meet_timer is None:
            self._meet_timer = self.loop.call_later(MEET_RETRY_S, self._retry_meets)

    def _send_meet(self, host: str, port: int) -> None:
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

    def meet_client_port(self, host: str, port: int) -> None:
        """CLUSTER MEET ip client-port: the bus is at a fixed offset from the client port,
        Disque's +10000 in config-file mode, or this node's own offset otherwise."""
        offsets = {self.settings.grpc_port - self.settings.resp_port, DISQUE_BUS_OFFSET}
        for off in sorted(offsets):
            if 0 < port + off < 65536:
                self.meet_grpc(host, port + off)

    # ------------------------------------------------------------------ output
    def pump(self, now_ms: int) -> None:
        """Collect the cores' output after any input; hold it until the AOF write."""
        membership, core = self.membership, self.core
        if (core.takeovers or core.beanstalk_dropped or core.relinks) and self._bridge(now_ms):
            self.node.after_commands(None, now_ms)
        if core.max_memory_bytes or core.memory_warning:
            # The second test: CONFIG SET maxmemory 0 must clear a warning level at once.
            core.update_memory(now_ms, self.node.engine.live_bytes)
        if membership.events:
            self._apply_events(membership.events)
            membership.events.clear()
        self._move_records()
        if len(core.events):
            self.event_log.append(core.events.take())
        engine_events = self.node.engine.events
        if len(engine_events):  # beanstalk jobs' events from the engine's timer
            self.event_log.append(engine_events.take())
        if membership.outbox:
            self._held_out.extend(membership.outbox)
            membership.outbox.clear()
        if core.outbox:
            self._held_out.extend(core.outbox)
            core.outbox.clear()
        if self._held_out or core.replies or self._dirty_resp or self.node.engine.aof_out:
            if self.node.aof is not None:
                self.node.schedule_flush()
            elif not self._release_scheduled:
                self._release_scheduled = True
                self.loop.call_soon(self.release)
        self._arm_timer(now_ms)

    def _move_records(self) -> None:
        core = self.core
        if not core.aof_out:
            return
        if self.node.aof is not None:
            out = self.node.engine.aof_out
            for kind, payload in core.aof_out:
                if kind == "LOADJOB":
                    assert isinstance(payload, JobData)
                    out.append(aof_file.frame(REC_LOADJOB, encode_loadjob(payload)))
                else:
                    assert isinstance(payload, str)
                    out.append(aof_file.frame(REC_DELJOB, encode_deljob(payload)))
        core.aof_out.clear()

    # ------------------------------------------------------------------ beanstalk bridge
    def beanstalk_put(self, s: Session, job_id: int, now_ms: int) -> int:
        """BeanstalkDoor's Replicator: copy a put to ``beanstalk_replicate`` nodes."""
        if self.beanstalk_replicate <= 1:
            return 0
        engine = self.node.engine
        job = engine.jobs[job_id]
        token = self.hub.new_token()
        try:
            did, pending = self.core.add_beanstalk(
                now_ms,
                token,
                job.tube.name,
                job.body,
                priority=job.pri,
                ttr_s=job.ttr_ms // 1000,
                delay_s=job.delay_ms // 1000,
                repl=self.beanstalk_replicate,
                timeout_ms=self.settings.beanstalk_repl_timeout_ms,
                bid=job_id,
            )
        except DisqueError:
            engine.drop(job_id)
            return -1
        job.cluster = ClusterState(did, self.beanstalk_replicate, 0)
        if pending:
            self._bputs[token] = (s, job_id)
        # No pump here: Node.after_commands pumps once for the whole batch of commands.
        return 1 if pending else 0

    def on_engine_events(self, now_ms: int) -> None:
        """Replicated beanstalk jobs changed in the engine: the holders must learn it."""
        engine, core = self.node.engine, self.core
        events, engine.cluster_events = engine.cluster_events, []
        for ev, job in events:
            cs = job.cluster
            if cs is None:
                continue
            if ev == EV_DELETE:
                core.beanstalk_deleted(now_ms, cs.disque_id)
            else:
                core.beanstalk_update(
                    now_ms, cs.disque_id, 3 if job.state == BURIED else 0, job.pri
                )
        self.pump(now_ms)

    def _bridge(self, now_ms: int) -> bool:
        """Apply the core's beanstalk outboxes to the engine; True if the engine changed."""
        core, engine = self.core, self.node.engine
        changed = False
        if core.beanstalk_dropped:
            dropped, core.beanstalk_dropped = core.beanstalk_dropped, []
            for bid in dropped:
                changed |= engine.drop(bid)
        if core.takeovers:
            takeovers, core.takeovers = core.takeovers, []
            for j in takeovers:
                job = engine.adopt(
                    j.queue, j.body, j.priority, j.retry_s * 1000, j.bstate == 3, now_ms
                )
                job.cluster = ClusterState(j.id, j.repl, 0)
                core.adopted(now_ms, j, job.id)
                self.log.info("beanstalk_takeover", job=j.id, id=job.id, tube=j.queue)
            changed = True
        if core.relinks:
            relinks, core.relinks = core.relinks, []
            for j in relinks:
                live = engine.jobs.get(j.bid)
                if live is None:
                    core.beanstalk_deleted(now_ms, j.id)  # deleted before the crash
                else:
                    live.cluster = ClusterState(j.id, j.repl, 0)
        return changed

    def _route_beanstalk_replies(self) -> None:
        replies = self.core.replies
        if not self._bputs or not replies:
            return
        keep = []
        engine = self.node.engine
        woke = False
        for token, result in replies:
            entry = self._bputs.pop(token, None)
            if entry is None:
                keep.append((token, result))
                continue
            session, job_id = entry
            woke = True
            if isinstance(result, str):
                engine.wakeups.append((session, job_id))
            else:
                engine.wakeups.append((session, "INTERNAL_ERROR"))
        self.core.replies = keep
        if woke:
            self.node.after_commands(None, self.node.now_ms())

    def release(self) -> None:
        """The iteration's records are written: let its messages and replies go.

        Deferred replies resume the blocked connections' queued commands, which may create
        records of their own: those connections then wait for the next write."""
        self._release_scheduled = False
        out, self._held_out = self._held_out, []
        send = self.links.send
        # One DELJOB and one IdemKeys per peer per iteration, with every entry: the ack GC of
        # a busy queue ends thousands of jobs a second, a bulk of keyed adds (the Spark sink)
        # announces as many keys, and each message costs a protobuf encode and decode. Sent
        # last: a delete or a key that arrives a little later is safe.
        merged: dict[tuple[type, str], DelJob | IdemKeys] = {}
        for dest, msg in out:
            kind = type(msg)
            if kind is not DelJob and kind is not IdemKeys:
                send(dest, msg)
                continue
            acc = merged.get((kind, dest))
            if acc is None:
                merged[(kind, dest)] = _copy_columns(msg)
            else:
                _extend_columns(acc, msg)
        for (_, dest), msg in merged.items():
            send(dest, msg)
        self.links.flush()
        self._route_beanstalk_replies()
        dirty, self._dirty_resp = self._dirty_resp, []
        for proto in self.hub.route_replies():
            if proto not in dirty:
                dirty.append(proto)
        if self.core.aof_out and self.node.aof is not None:
            self._dirty_resp.extend(dirty)
            self.pump(self.node.now_ms())
            return
        for proto in dirty:
            proto.flush()
        if self.core.outbox or self.core.aof_out:
            self.pump(self.node.now_ms())

    def _apply_events(self, events: list[tuple[str, int]]) -> None:
        for node_id, state in events:
            if state == FORGOTTEN or state == LEFT:
                self.links.forget(node_id)
            elif state in (ALIVE, SUSPECT, DEAD):
                m = self.membership.member(node_id)
                if m is not None:
                    self.links.set_address(node_id, m.host, m.grpc_port)
            self.log.info("member_state", peer=node_id[:8], state=state)
        self._schedule_view_save()

    # ------------------------------------------------------------------ time
    def _arm_timer(self, now_ms: int) -> None:
        nd = min(self.core.next_deadline_ms(), self.membership.next_deadline_ms())
        if self._timer is not None and self._timer_at_ms <= nd:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = nd
        self._timer = self.loop.call_later(max(0.0, (nd - now_ms) / 1000), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = -1
        now = self.node.now_ms()
        try:
            if self.membership.next_deadline_ms() <= now:
                self.membership.tick(now)
            if self.core.next_deadline_ms() <= now:
                self.core.tick(now)
        except Exception:
            self.log.exception("cluster_tick_failed")
        self.pump(now)


def _copy_columns(msg: DelJob | IdemKeys) -> DelJob | IdemKeys:
    """A message of list fields whose lists this module may extend."""
    if isinstance(msg, DelJob):
        return DelJob(list(msg.job_ids))
    return IdemKeys(list(msg.queues), list(msg.keys), list(msg.job_ids))


def _extend_columns(acc: DelJob | IdemKeys, msg: DelJob | IdemKeys) -> None:
    if isinstance(acc, DelJob) and isinstance(msg, DelJob):
        acc.job_ids.extend(msg.job_ids)
    elif isinstance(acc, IdemKeys) and isinstance(msg, IdemKeys):
        acc.queues.extend(msg.queues)
        acc.keys.extend(msg.keys)
        acc.job_ids.extend(msg.job_ids)


def _timing(node_timeout_ms: int) -> dict[str, int]:
    """SWIM timing from Disque's node timeout: probe often enough that a dead node is
    suspected well within the timeout, never faster than the loop can afford."""
    probe = max(100, min(1000, node_timeout_ms // 10))
    return {
        "probe_interval_ms": probe,
        "ping_timeout_ms": max(50, probe * 2 // 5),
        "node_timeout_ms": node_timeout_ms,
    }


def attach_cluster(node: Node, options: dict[str, Any]) -> ClusterRuntime:
    """Give ``node`` its cluster half (called by disq-node before the AOF is replayed, so the
    replay can route cluster records to the core)."""
    import secrets

    from disq.persistence.node_identity import load_or_create_node_id

    state_dir = options.get("state_dir")
    if state_dir:
        my_id = load_or_create_node_id(Path(state_dir))
    else:
        my_id = secrets.token_hex(20)
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
    )
    if settings.config_store is None:
        # Flag mode: CONFIG GET shows what the flags chose; REWRITE has no file to write.
        from disq.config_file import ConfigFileError, parse_config

        lines = [f"cluster-node-timeout {settings.node_timeout_ms}"]
        if settings.resp_port:
            lines.append(f"port {settings.resp_port}")
        if settings.grpc_port:
            lines.append(f"grpc-port {settings.grpc_port}")
        if node.config.data_dir is not None:
            lines += ["appendonly yes", f"appendfsync {node.config.fsync}"]
        try:
            settings.config_store = parse_config("\n".join(lines) + "\n")
        except ConfigFileError:
            settings.config_store = None
    runtime = ClusterRuntime(node, settings, my_id)
    runtime.core.aof_enqueue_once = bool(options.get("aof_enqueue_once"))
    node.cluster = runtime
    return runtime
