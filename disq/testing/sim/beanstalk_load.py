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
from disq.testing.sim.workload import ClientsMixin

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


class BeanstalkMixin(ClientsMixin):
    # ------------------------------------------------------------------ producers
    def _bproduce(self, p: int) -> None:
        cfg = self.cfg
        if self._bjobs_left <= 0 or self.now >= self.t_heal:
            return
        rng = self.rng
        nd = self._client_node(cfg.producer_nodes, self._bproduce, p, frozen=False)
        if nd is None:
            return
        nc = nd.nc
        assert nc is not None
        self._bjobs_left -= 1
        self._job_seq += 1
        body = f"b{self._job_seq:04d}".encode()
        pri = rng.randint(0, 2000)
        ttr = rng.randint(*cfg.beanstalk_ttr_ms)
        rec = BeanRec(body, nd.idx, nd.brepl, self.now, client=p)
        self.bputs[body] = rec
        now = self.now + nd.skew
        b = nc.beanstalk
        s = b.open_session()
        bid = self._guard(nd, b.put, s, pri, 0, ttr, body, now)
        rc = self._guard(nd, nc.beanstalk_put, s, bid, now)
        job = b.jobs.get(bid)
        if job is not None and job.replica is not None:
            rec.disque_id = job.replica.disque_id
        if self._tr:
            self._t(f"bput {nd.name} {body!r} pri {pri} ttr {ttr} R{nd.brepl} -> {bid} rc {rc}")
        if rc == 1:
            nd.bprod[s] = rec
            if rng.random() < cfg.client_cancel_prob:
                token = self._token  # the put's token: NodeCore.new_token is ours
                self._at(self.now + rng.randint(1, 3000), self._bcancel, (nd.idx, nd.gen, s, token))
            self._flush(nd)
            return
        self._flush(nd)  # INSERTED leaves after the step's records
        if rc == 0:
            self._bput_done(rec, "ok")
        else:
            self._bput_done(rec, "failed", why="refused")
        self._at(self.now + rng.randint(10, 200), self._bproduce, p)

    def _bcancel(self, arg: tuple[int, int, Session, int]) -> None:
        idx, gen, s, token = arg
        nd = self.nodes[idx]
        if not nd.up or nd.gen != gen or s not in nd.bprod:
            return
        assert nd.nc is not None
        rec = nd.bprod.pop(s)
        self._guard(nd, nd.nc.cancel, token)
        self._bput_done(rec, "indeterminate", why="client hung up")
        self._at(self.now + self.rng.randint(10, 200), self._bproduce, rec.client)
        self._flush(nd)

    def _bput_done(self, rec: BeanRec, status: str, why: str = "") -> None:
        rec.status = status
        rec.t_end = self.now
        rec.why = why
        self.stats[f"bput_{status}"] += 1
        if self._tr:
            self._t(f"bput-{status} n{rec.node} {rec.body!r} {rec.disque_id} {why}")

    def _on_wake(self, nd: SimNode, session: Session, res: Any) -> None:
        """A beanstalk wake-up from the node's Ready: a replicated put's INSERTED (its id)
        or INTERNAL_ERROR. Consumers never block, so nothing else may come."""
        rec = nd.bprod.pop(session, None)
        if rec is None:
            raise InvariantViolation(
                self.seed, "client protocol", f"{nd.name}: wake-up for no waiter: {res!r}"
            )
        if isinstance(res, int):
            self._bput_done(rec, "ok")
        elif res == "INTERNAL_ERROR":
            self._bput_done(rec, "indeterminate", why="INTERNAL_ERROR")
        else:
            raise InvariantViolation(
                self.seed, "client protocol", f"put {rec.body!r} woken with {res!r}"
            )
        self._at(self.now + self.rng.randint(10, 200), self._bproduce, rec.client)

    # ------------------------------------------------------------------ consumers
    def _bconsume(self, c: int) -> None:
        if self.now >= self.t_drain:
            return
        rng = self.rng
        nd = self._client_node(self.cfg.consumer_nodes, self._bconsume, c, frozen=False)
        if nd is None:
            return
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.now + nd.skew
        s = b.open_session()
        job = self._guard(nd, _reserve_now, b, s, now)
        if job is not None:
            self._bdelivered(nd, job, c)
            hi = max(50, job.ttr_ms * 3 // 4)
            self._at(self.now + rng.randint(5, hi), self._bprocess, (nd.idx, nd.gen, s, job.id))
        else:
            if rng.random() < 0.3:
                n = self._guard(nd, b.kick, s, 3, now)
                self.stats["bkicks"] += n
                if self._tr and n:
                    self._t(f"bkick {nd.name} c{c} -> {n}")
            self._guard(nd, b.close_session, s, now)
        self._flush(nd)
        self._at(self.now + rng.randint(20, 300), self._bconsume, c)

    def _bdelivered(self, nd: SimNode, job: Job, c: int) -> None:
        d = Delivery(self.step, self.now, nd.idx, str(job.id), job.body)
        rec = self.bputs.get(job.body)
        if rec is None or rec.status == "failed":
            why = "never put" if rec is None else "its put was refused"
            raise self._violation(
                "5 (no phantom jobs)", f"beanstalk {job.body!r} reserved but {why}"
            )
        prev = self.bdelivered.setdefault(job.body, [])
        self.stats["bredeliveries" if prev else "bdeliveries"] += 1
        prev.append(d)
        self.bdeliveries.append(d)
        if self._tr:
            self._t(f"RESERVED {nd.name} c{c} {job.id} {job.body!r}")

    def _bprocess(self, arg: tuple[int, int, Session, int]) -> None:
        idx, gen, s, bid = arg
        nd = self.nodes[idx]
        if not nd.up or nd.gen != gen:
            return  # the connection died with the node: the job comes back at its restart
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.now + nd.skew
        r = self.rng.random()
        res: object
        if r < 0.65:
            cmd, res = "delete", self._guard(nd, _quiet, b.delete, s, bid, now)
        elif r < 0.75:
            cmd, res = "bury", self._guard(nd, _quiet, b.bury, s, bid, 100, now)
        elif r < 0.87:
            cmd = "release"
            res = self._guard(nd, _quiet, b.release, s, bid, self.rng.randint(0, 2000), 0, now)
        else:
            cmd, res = "vanish", None
        self.stats[f"b{cmd}s"] += 1
        if self._tr:
            self._t(f"b{cmd} {nd.name} {bid} -> {res}")
        self._guard(nd, b.close_session, s, now)
        self._flush(nd)

    def _bdrain(self, nd: SimNode) -> None:
        """End of run: reserve and delete everything ready on this node (buried stays)."""
        nc = nd.nc
        assert nc is not None
        b = nc.beanstalk
        now = self.now + nd.skew
        s = b.open_session()
        for _ in range(500):
            job = self._guard(nd, _reserve_now, b, s, now)
            if job is None:
                break
            self._bdelivered(nd, job, -1)
            self._guard(nd, b.delete, s, job.id, now)
        self._guard(nd, b.close_session, s, now)
        self._flush(nd)

    def _bean_live(self) -> bool:
        """Beanstalk work left: a put waiting for INSERTED, a job not buried, or a cluster
        copy that no node owns (a takeover is still to come)."""
        owned: set[str] = set()
        copies: set[str] = set()
        for nd in self.nodes:
            if nd.nc is None or nd.core is None:
                return True
            if nd.bprod or any(j.state != BURIED for j in nd.nc.beanstalk.jobs.values()):
                return True
            for j in nd.core.jobs.values():
                if j.flags & BEANSTALK_ORIGIN and j.state != ACKED:
                    (owned if j.flags & BEANSTALK_OWNED else copies).add(j.id)
        return bool(copies - owned)
