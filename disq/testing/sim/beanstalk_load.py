"""The beanstalk door's clients, through the node core's bridge (``beanstalk_replicate`` > 1):
producers put unique bodies (INSERTED at once, later as a wake-up, or refused); consumers
reserve on any node, then delete, bury, release, or vanish (their session closes, the job
is released); sometimes they kick buried jobs. At the end every node is drained."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from disq.core.beanstalk import errors
from disq.core.beanstalk.model import BURIED, Job, Session
from disq.core.disque.job import ACKED, BEANSTALK_ORIGIN, BEANSTALK_OWNED
from disq.testing.sim.model import BeanRec, Delivery, InvariantViolation, SimNode
from disq.testing.sim.step import NodeStep
from disq.testing.sim.world import Jobs, World

_T = TypeVar("_T")
BEAN_STATES = {0: "ready", 1: "reserved", 2: "delayed", 3: "buried"}


def _reserve_now(b: Any, s: Session, now_ms: int) -> Job | None:
    try:
        job: Job | None = b.reserve(s, 0, now_ms)
    except (errors.TimedOut, errors.DeadlineSoon):
        return None
    return job


def _quiet(fn: Callable[..., _T], *args: Any) -> _T | str:
    """A beanstalk command whose normal error answers (NOT_FOUND...) go back as codes."""
    try:
        return fn(*args)
    except errors.BeanstalkError as e:
        return e.code


class BeanstalkLoad:
    """The beanstalk clients and what they saw (the world's records)."""

    def __init__(self, world: World, stepper: NodeStep) -> None:
        self.w = world
        self.stepper = stepper
        self._jobs = Jobs("b", world.cfg.beanstalk_jobs)

    def produce(self, p: int) -> None:
        w = self.w
        turn = w.next_put(self._jobs, self.produce, p, frozen=False)
        if turn is None:
            return
        nd, body = turn
        nc = nd.nc
        assert nc is not None
        cfg, rng = w.cfg, w.rng
        pri = rng.randint(0, 2000)
        ttr = rng.randint(*cfg.beanstalk_ttr_ms)
        rec = BeanRec(body, nd.idx, nd.brepl, w.now, client=p)
        w.bputs[body] = rec
        now = w.now + nd.skew
        b = nc.beanstalk
        s = b.open_session()
        bid = w.guard(nd, b.put, s, pri, 0, ttr, body, now)
        rc = w.guard(nd, nc.beanstalk_put, s, bid, now)
        job = b.jobs.get(bid)
        if job is not None and job.replica is not None:
            rec.disque_id = job.replica.disque_id
        if w.tr:
            w.t(f"bput {nd.name} {body!r} pri {pri} ttr {ttr} R{nd.brepl} -> {bid} rc {rc}")
        if rc == 1:
            nd.bprod[s] = rec
            if rng.random() < cfg.client_cancel_prob:
                token = w.token  # the put's token: NodeCore.new_token is ours
                w.at(w.now + rng.randint(1, 3000), self._bcancel, (nd.idx, nd.gen, s, token))
            self.stepper.flush(nd)
            return
        self.stepper.flush(nd)  # INSERTED leaves after the step's records
        if rc == 0:
            self._put_done(rec, "ok")
        else:
            self._put_done(rec, "failed", why="refused")
        w.at(w.now + rng.randint(10, 200), self.produce, p)

    def _bcancel(self, arg: tuple[int, int, Session, int]) -> None:
        idx, gen, s, token = arg
        nd = self.w.nodes[idx]
        if not nd.up or nd.gen != gen or s not in nd.bprod:
            return
        assert nd.nc is not None
        rec = nd.bprod.pop(s)
        self.w.guard(nd, nd.nc.cancel, token)
        self._put_done(rec, "indeterminate", why="client hung up")
        self.w.at(self.w.now + self.w.rng.randint(10, 200), self.produce, rec.client)
        self.stepper.flush(nd)

    def _put_done(self, rec: BeanRec, status: str, why: str = "") -> None:
        rec.status = status
        rec.t_end = self.w.now
        rec.why = why
        self.w.stats[f"bput_{status}"] += 1
        if self.w.tr:
            self.w.t(f"bput-{status} n{rec.node} {rec.body!r} {rec.disque_id} {why}")

    def node_crashed(self, nd: SimNode) -> None:
        """The node died under its producers waiting for INSERTED."""
        for rec in nd.bprod.values():
            self._put_done(rec, "indeterminate", why=f"{nd.name} crashed")
        nd.bprod.clear()

    def on_wake(self, nd: SimNode, session: Session, res: Any) -> None:
        """A beanstalk wake-up from the node's Ready: a replicated put's INSERTED (its id)
        or INTERNAL_ERROR. Consumers never block, so nothing else may come."""
        rec = nd.bprod.pop(session, None)
        if rec is None:
            raise InvariantViolation(
                self.w.seed, "client protocol", f"{nd.name}: wake-up for no waiter: {res!r}"
            )
        if isinstance(res, int):
            self._put_done(rec, "ok")
        elif res == "INTERNAL_ERROR":
            self._put_done(rec, "indeterminate", why="INTERNAL_ERROR")
        else:
            raise InvariantViolation(
                self.w.seed, "client protocol", f"put {rec.body!r} woken with {res!r}"
            )
        self.w.at(self.w.now + self.w.rng.randint(10, 200), self.produce, rec.client)

    # ------------------------------------------------------------------ consumers
    def consume(self, c: int) -> None:
        if self.w.now >= self.w.t_drain:
            return
        rng = self.w.rng
        nd = self.w.client_node(self.w.cfg.consumer_nodes, self.consume, c, frozen=False)
        if nd is None:
            return
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.w.now + nd.skew
        s = b.open_session()
        job = self.w.guard(nd, _reserve_now, b, s, now)
        if job is not None:
            self._bdelivered(nd, job, c)
            hi = max(50, job.ttr_ms * 3 // 4)
            self.w.at(self.w.now + rng.randint(5, hi), self._bprocess, (nd.idx, nd.gen, s, job.id))
        else:
            if rng.random() < 0.3:
                n = self.w.guard(nd, b.kick, s, 3, now)
                self.w.stats["bkicks"] += n
                if self.w.tr and n:
                    self.w.t(f"bkick {nd.name} c{c} -> {n}")
            self.w.guard(nd, b.close_session, s, now)
        self.stepper.flush(nd)
        self.w.at(self.w.now + rng.randint(20, 300), self.consume, c)

    def _bdelivered(self, nd: SimNode, job: Job, c: int) -> None:
        d = Delivery(self.w.step, self.w.now, nd.idx, str(job.id), job.body)
        rec = self.w.bputs.get(job.body)
        if rec is None or rec.status == "failed":
            why = "never put" if rec is None else "its put was refused"
            raise self.w.violation(
                "5 (no phantom jobs)", f"beanstalk {job.body!r} reserved but {why}"
            )
        prev = self.w.bdelivered.setdefault(job.body, [])
        self.w.stats["bredeliveries" if prev else "bdeliveries"] += 1
        prev.append(d)
        self.w.bdeliveries.append(d)
        if self.w.tr:
            self.w.t(f"RESERVED {nd.name} c{c} {job.id} {job.body!r}")

    def _bprocess(self, arg: tuple[int, int, Session, int]) -> None:
        idx, gen, s, bid = arg
        nd = self.w.nodes[idx]
        if not nd.up or nd.gen != gen:
            return  # the connection died with the node: the job comes back at its restart
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.w.now + nd.skew
        r = self.w.rng.random()
        res: object
        if r < 0.65:
            cmd, res = "delete", self.w.guard(nd, _quiet, b.delete, s, bid, now)
        elif r < 0.75:
            cmd, res = "bury", self.w.guard(nd, _quiet, b.bury, s, bid, 100, now)
        elif r < 0.87:
            cmd = "release"
            res = self.w.guard(nd, _quiet, b.release, s, bid, self.w.rng.randint(0, 2000), 0, now)
        else:
            cmd, res = "vanish", None
        self.w.stats[f"b{cmd}s"] += 1
        if self.w.tr:
            self.w.t(f"b{cmd} {nd.name} {bid} -> {res}")
        self.w.guard(nd, b.close_session, s, now)
        self.stepper.flush(nd)

    def drain(self, nd: SimNode) -> None:
        """End of run: reserve and delete everything ready on this node (buried stays)."""
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.w.now + nd.skew
        s = b.open_session()
        for _ in range(500):
            job = self.w.guard(nd, _reserve_now, b, s, now)
            if job is None:
                break
            self._bdelivered(nd, job, -1)
            self.w.guard(nd, b.delete, s, job.id, now)
        self.w.guard(nd, b.close_session, s, now)
        self.stepper.flush(nd)

    def live(self) -> bool:
        """Beanstalk work left: a put waiting for INSERTED, a job not buried, or a cluster
        copy that no node owns (a takeover is still to come)."""
        owned: set[str] = set()
        copies: set[str] = set()
        for nd in self.w.nodes:
            if nd.nc is None or nd.core is None:
                return True
            if nd.bprod or any(j.state != BURIED for j in nd.nc.beanstalk.jobs.values()):
                return True
            for j in nd.core.jobs.values():
                if j.flags & BEANSTALK_ORIGIN and j.state != ACKED:
                    (owned if j.flags & BEANSTALK_OWNED else copies).add(j.id)
        return bool(copies - owned)
