"""The fake network: per-message delay (so reordering), loss, duplication, partitions
(node-to-node links only), and the views that stand in for SWIM (static, the oracle
failure detector)."""

from __future__ import annotations

from functools import partial

from disq.core import messages as m
from disq.core.messages import MEMBER_STATE_NAMES, Message
from disq.testing.sim.model import SimNode
from disq.testing.sim.step import NodeStep
from disq.testing.sim.world import FLYING, LANDED, World


class StaticView:
    """Everybody is always reachable: what the job core saw before SWIM existed. Only the
    LEAVING flags (CLUSTER LEAVING) are known, instantly."""

    def __init__(self, my_id: str, peers: list[str], world: World) -> None:
        self._my_id = my_id
        self._peers = peers
        self._w = world

    @property
    def my_id(self) -> str:
        return self._my_id

    @property
    def leaving(self) -> bool:
        return self._my_id in self._w.leaving

    def cluster_size(self) -> int:
        return len(self._peers) + 1

    def reachable_peers(self) -> list[str]:
        return [p for p in self._peers if p not in self._w.leaving]

    def all_peers(self) -> list[str]:
        return list(self._peers)


class OracleView(StaticView):
    """A perfect failure detector: reachable = up, not leaving, and on our side of any
    partition."""

    def reachable_peers(self) -> list[str]:
        w = self._w
        side = w.side[w.by_id[self._my_id].idx]
        return [
            p
            for p in self._peers
            if w.by_id[p].up
            and not w.by_id[p].frozen  # a stopped process answers nobody
            and w.side[w.by_id[p].idx] == side
            and p not in w.leaving
        ]

    def all_peers(self) -> list[str]:
        return [p for p in self._peers if self._w.by_id[p].up]


class Network:
    """The links between nodes: what is sent, when it arrives, what is lost on the way."""

    def __init__(self, world: World, step: NodeStep) -> None:
        self.w = world
        self.stepper = step

    def send(self, src: SimNode, dest: str, msg: Message) -> None:
        w = self.w
        dst = w.by_id.get(dest)
        if dst is None:
            return
        rng = w.rng
        w.stats["msgs_sent"] += 1
        if w.side[src.idx] != w.side[dst.idx]:
            w.stats["msgs_cut"] += 1
            if w.tr:
                w.t(f"cut  {src.name}>{dst.name} {self._fmt(msg)}")
            return
        if rng.random() < w.cfg.loss:
            w.stats["msgs_lost"] += 1
            if w.tr:
                w.t(f"loss {src.name}>{dst.name} {self._fmt(msg)}")
            return
        lo, hi = w.cfg.delay_ms
        copies = 2 if rng.random() < w.cfg.dup else 1
        if copies == 2:
            w.stats["msgs_dup"] += 1
        carried = _carried_ids(msg)
        for _ in range(copies):
            for job_id in carried:
                w.copies.setdefault(job_id, []).append((w.step, dst.idx, FLYING))
            d = rng.randint(lo, hi)
            if w.tr:
                w.t(f"send {src.name}>{dst.name} +{d} {self._fmt(msg)}")
            w.at(w.now + d, self._deliver, (dst.idx, src.idx, msg, dst.gen))

    def _deliver(self, arg: tuple[int, int, Message, int]) -> None:
        w = self.w
        idx, sidx, msg, gen = arg
        nd = w.nodes[idx]
        src = w.nodes[sidx]
        if not nd.up or nd.gen != gen:
            # The link broke when the receiver died: what was on it is gone.
            if w.tr:
                w.t(f"void {src.name}>{nd.name} {self._fmt(msg)} (receiver restarted)")
        elif w.side[idx] != w.side[sidx]:
            w.stats["msgs_cut"] += 1
            if w.tr:
                w.t(f"cut  {src.name}>{nd.name} {self._fmt(msg)} (in flight)")
        elif nd.frozen:
            # Arrived, but the process is stopped: it waits in the socket buffer (so a copy
            # it carries is still on its way) and is read, in order, at the thaw.
            w.stats["msgs_held"] += 1
            if w.tr:
                w.t(f"held {src.name}>{nd.name} {self._fmt(msg)} (receiver frozen)")
            w.wait_for_thaw(nd, partial(self._receive, nd, src, msg))
            return
        else:
            self._receive(nd, src, msg)
            return
        for job_id in _carried_ids(msg):
            w.copies[job_id].append((w.step, idx, LANDED))

    def _receive(self, nd: SimNode, src: SimNode, msg: Message) -> None:
        """The receiver reads the message: one step."""
        w = self.w
        w.stats["msgs_delivered"] += 1
        if w.tr:
            w.t(f"recv {src.name}>{nd.name} {self._fmt(msg)}")
        assert nd.nc is not None
        w.guard(nd, nd.nc.on_peer_messages, w.now + nd.skew, src.id, [msg])
        self.stepper.flush(nd)
        # After the receiver's LOADJOB (if any): the copy is never unaccounted for.
        for job_id in _carried_ids(msg):
            w.copies[job_id].append((w.step, nd.idx, LANDED))

    def _fmt(self, msg: Message) -> str:
        name = self.w.name
        if isinstance(msg, m.ReplJob):
            d = msg.job
            nd = self.w.names(d.nodes_delivered)
            return f"REPLJOB {d.id} {d.body!r} {d.queue} r{d.repl} nd=[{nd}]"
        if isinstance(msg, m.YourJobs):
            return "YOURJOBS " + " ".join(f"{d.id} {d.body!r}" for d in msg.jobs)
        line = _LINES.get(type(msg))
        if line is not None:
            return line.format_map({f: getattr(msg, f) for f in m.FIELDS[type(msg)]})
        if isinstance(msg, m.IdemKeys):
            acks = f" ack {' '.join(msg.ack_keys)}" if msg.ack_keys else ""
            return "IDEMKEYS " + " ".join(msg.keys) + acks
        if isinstance(msg, m.DelJob):
            return "DELJOB " + " ".join(msg.job_ids)
        if isinstance(msg, (m.Ping, m.Ack)):
            gossip = " ".join(
                f"{name(g.node_id)}:{MEMBER_STATE_NAMES.get(g.state, g.state)}:{g.incarnation}"
                for g in msg.gossip
            )
            kind = "PING" if isinstance(msg, m.Ping) else "ACK"
            extra = f" for {name(msg.target)}" if isinstance(msg, m.Ack) and msg.target else ""
            return f"{kind} #{msg.probe_id}{extra} [{gossip}]"
        if isinstance(msg, m.PingReq):
            return f"PINGREQ #{msg.probe_id} {name(msg.target)}"
        return repr(msg)  # pragma: no cover - a new message type


# A trace line per message class whose fields show as they are (``:d``: a flag as 0 or 1).
_LINES: dict[type, str] = {
    m.GotJob: "GOTJOB {job_id}",
    m.Enqueue: "ENQUEUE {job_id}",
    m.Queued: "QUEUED {job_id} nacks+{incr_nacks:d} dl+{incr_deliveries:d}",
    m.WillQueue: "WILLQUEUE {job_id}",
    m.SetAck: "SETACK {job_id} may_have={may_have}",
    m.GotAck: "GOTACK {job_id} known={known:d}",
    m.BeanstalkUpdate: "BSUPDATE {job_id} state={bstate} pri={priority}",
    m.NeedJobs: "NEEDJOBS {queue} {count}",
    m.Working: "WORKING {job_id}",
    m.Pause: "PAUSE {queue} {flags}",
}


def _carried_ids(msg: Message) -> list[str]:
    """Jobs a message carries a copy of (the receiver may register them)."""
    if isinstance(msg, m.ReplJob):
        return [msg.job.id]
    if isinstance(msg, m.YourJobs):
        return [d.id for d in msg.jobs]
    return []
