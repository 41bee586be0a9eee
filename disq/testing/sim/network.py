"""The fake network: per-message delay (so reordering), loss, duplication, partitions
(node-to-node links only), and the oracle failure detector's view of it."""

from __future__ import annotations

from functools import partial

from disq.core.messages import (
    FIELDS,
    MEMBER_STATE_NAMES,
    Ack,
    BeanstalkUpdate,
    DelJob,
    Enqueue,
    GotAck,
    GotJob,
    IdemKeys,
    JobData,
    Message,
    NeedJobs,
    Pause,
    Ping,
    PingReq,
    Queued,
    ReplJob,
    SetAck,
    WillQueue,
    Working,
    YourJobs,
)
from disq.testing.sim.base import FLYING, LANDED, SimBase
from disq.testing.sim.model import SimNode


class StaticView:
    """Everybody is always reachable: what the job core saw before SWIM existed. Only the
    LEAVING flags (CLUSTER LEAVING) are known, instantly."""

    def __init__(self, my_id: str, peers: list[str], sim: SimBase) -> None:
        self._my_id = my_id
        self._peers = peers
        self._sim = sim

    @property
    def my_id(self) -> str:
        return self._my_id

    @property
    def leaving(self) -> bool:
        return self._my_id in self._sim.leaving

    def cluster_size(self) -> int:
        return len(self._peers) + 1

    def reachable_peers(self) -> list[str]:
        return [p for p in self._peers if p not in self._sim.leaving]

    def all_peers(self) -> list[str]:
        return list(self._peers)


class OracleView(StaticView):
    """A perfect failure detector: reachable = up, not leaving, and on our side of any
    partition."""

    def reachable_peers(self) -> list[str]:
        return self._sim.oracle_reachable(self._my_id, self._peers)

    def all_peers(self) -> list[str]:
        return self._sim.oracle_up(self._peers)


class NetworkMixin(SimBase):
    def oracle_reachable(self, me: str, peers: list[str]) -> list[str]:
        side = self.side[self.by_id[me].idx]
        return [
            p
            for p in peers
            if self.by_id[p].up
            and not self.by_id[p].frozen  # a stopped process answers nobody
            and self.side[self.by_id[p].idx] == side
            and p not in self.leaving
        ]

    def oracle_up(self, peers: list[str]) -> list[str]:
        return [p for p in peers if self.by_id[p].up]

    def _send(self, src: SimNode, dest: str, msg: Message) -> None:
        dst = self.by_id.get(dest)
        if dst is None:
            return
        rng = self.rng
        self.stats["msgs_sent"] += 1
        if self.side[src.idx] != self.side[dst.idx]:
            self.stats["msgs_cut"] += 1
            if self._tr:
                self._t(f"cut  {src.name}>{dst.name} {self._fmt(msg)}")
            return
        if rng.random() < self.cfg.loss:
            self.stats["msgs_lost"] += 1
            if self._tr:
                self._t(f"loss {src.name}>{dst.name} {self._fmt(msg)}")
            return
        lo, hi = self.cfg.delay_ms
        copies = 2 if rng.random() < self.cfg.dup else 1
        if copies == 2:
            self.stats["msgs_dup"] += 1
        carried = _carried_ids(msg)
        for _ in range(copies):
            for job_id in carried:
                self._copies.setdefault(job_id, []).append((self.step, dst.idx, FLYING))
            d = rng.randint(lo, hi)
            if self._tr:
                self._t(f"send {src.name}>{dst.name} +{d} {self._fmt(msg)}")
            self._at(self.now + d, self._deliver, (dst.idx, src.idx, msg, dst.gen))

    def _deliver(self, arg: tuple[int, int, Message, int]) -> None:
        idx, sidx, msg, gen = arg
        nd = self.nodes[idx]
        src = self.nodes[sidx]
        if not nd.up or nd.gen != gen:
            # The link broke when the receiver died: what was on it is gone.
            if self._tr:
                self._t(f"void {src.name}>{nd.name} {self._fmt(msg)} (receiver restarted)")
        elif self.side[idx] != self.side[sidx]:
            self.stats["msgs_cut"] += 1
            if self._tr:
                self._t(f"cut  {src.name}>{nd.name} {self._fmt(msg)} (in flight)")
        elif nd.frozen:
            # Arrived, but the process is stopped: it waits in the socket buffer (so a copy
            # it carries is still on its way) and is read, in order, at the thaw.
            self.stats["msgs_held"] += 1
            if self._tr:
                self._t(f"held {src.name}>{nd.name} {self._fmt(msg)} (receiver frozen)")
            self._wait_for_thaw(nd, partial(self._receive, nd, src, msg))
            return
        else:
            self._receive(nd, src, msg)
            return
        for job_id in _carried_ids(msg):
            self._copies[job_id].append((self.step, idx, LANDED))

    def _receive(self, nd: SimNode, src: SimNode, msg: Message) -> None:
        """The receiver reads the message: one step."""
        self.stats["msgs_delivered"] += 1
        if self._tr:
            self._t(f"recv {src.name}>{nd.name} {self._fmt(msg)}")
        assert nd.nc is not None
        self._guard(nd, nd.nc.on_peer_messages, self.now + nd.skew, src.id, [msg])
        self._flush(nd)
        # After the receiver's LOADJOB (if any): the copy is never unaccounted for.
        for job_id in _carried_ids(msg):
            self._copies[job_id].append((self.step, nd.idx, LANDED))

    def _fmt(self, msg: Message) -> str:
        if isinstance(msg, ReplJob):
            d = msg.job
            nd = self._names(d.nodes_delivered)
            return f"REPLJOB {d.id} {d.body!r} {d.queue} r{d.repl} nd=[{nd}]"
        if isinstance(msg, YourJobs):
            return "YOURJOBS " + " ".join(f"{d.id} {d.body!r}" for d in msg.jobs)
        line = _LINES.get(type(msg))
        if line is not None:
            return line.format_map({f: getattr(msg, f) for f in FIELDS[type(msg)]})
        if isinstance(msg, IdemKeys):
            acks = f" ack {' '.join(msg.ack_keys)}" if msg.ack_keys else ""
            return "IDEMKEYS " + " ".join(msg.keys) + acks
        if isinstance(msg, DelJob):
            return "DELJOB " + " ".join(msg.job_ids)
        if isinstance(msg, (Ping, Ack)):
            gossip = " ".join(
                f"{self._name(m.node_id)}:{MEMBER_STATE_NAMES.get(m.state, m.state)}"
                f":{m.incarnation}"
                for m in msg.gossip
            )
            kind = "PING" if isinstance(msg, Ping) else "ACK"
            extra = f" for {self._name(msg.target)}" if isinstance(msg, Ack) and msg.target else ""
            return f"{kind} #{msg.probe_id}{extra} [{gossip}]"
        if isinstance(msg, PingReq):
            return f"PINGREQ #{msg.probe_id} {self._name(msg.target)}"
        return repr(msg)  # pragma: no cover - a new message type


# A trace line per message class whose fields show as they are (``:d``: a flag as 0 or 1).
_LINES: dict[type, str] = {
    GotJob: "GOTJOB {job_id}",
    Enqueue: "ENQUEUE {job_id}",
    Queued: "QUEUED {job_id} nacks+{incr_nacks:d} dl+{incr_deliveries:d}",
    WillQueue: "WILLQUEUE {job_id}",
    SetAck: "SETACK {job_id} may_have={may_have}",
    GotAck: "GOTACK {job_id} known={known:d}",
    BeanstalkUpdate: "BSUPDATE {job_id} state={bstate} pri={priority}",
    NeedJobs: "NEEDJOBS {queue} {count}",
    Working: "WORKING {job_id}",
    Pause: "PAUSE {queue} {flags}",
}


def _carried(msg: Message) -> list[JobData]:
    if isinstance(msg, ReplJob):
        return [msg.job]
    if isinstance(msg, YourJobs):
        return list(msg.jobs)
    return []


def _carried_ids(msg: Message) -> list[str]:
    """Jobs a message carries a copy of (the receiver may register them)."""
    if isinstance(msg, ReplJob):
        return [msg.job.id]
    if isinstance(msg, YourJobs):
        return [d.id for d in msg.jobs]
    return []
