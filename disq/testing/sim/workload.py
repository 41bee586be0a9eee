"""The Disque clients: producers (sync/ASYNC ADDJOB, REPLICATE from a range, RETRY 0,
DELAY, hang-ups, idempotency keys retried on another node) and consumers (GETJOB, then ACK
maybe elsewhere, FASTACK, NACK, WORKING, admin ENQUEUE, or vanishing)."""

from __future__ import annotations

from functools import partial

from disq.core.disque.api import PENDING, AddOptions, DeferredResult, DisqueError
from disq.core.disque.job import ACKED, WAIT_REPL, DJob
from disq.core.schedule.scheduler import KEY_PREFIX
from disq.testing.sim.config import DEAD_LETTER_QUEUE
from disq.testing.sim.invariants import Invariants
from disq.testing.sim.model import AddRec, Delivery, InvariantViolation, Op, SimNode
from disq.testing.sim.schedules import Schedules
from disq.testing.sim.step import NodeStep
from disq.testing.sim.world import GONE, HOLDS, WAITING, Jobs, World


class Workload:
    """The Disque clients: their calls, what they saw (the world's records), and the
    delivery checks as jobs reach them."""

    def __init__(
        self, world: World, stepper: NodeStep, checks: Invariants, schedules: Schedules
    ) -> None:
        self.w = world
        self.stepper = stepper
        self.checks = checks
        self.schedules = schedules  # a schedule's tick job is theirs to check
        self._jobs = Jobs("j", world.cfg.jobs)

    def produce(self, p: int) -> None:
        turn = self.w.next_put(self._jobs, self.produce, p, frozen=True)
        if turn is None:
            return
        nd, body = turn
        cfg = self.w.cfg
        rng = self.w.rng
        queue = rng.choice(cfg.queues)
        if cfg.at_most_once_prob and rng.random() < cfg.at_most_once_prob:
            repl, retry = 1, 0
        else:
            repl = rng.randint(*self.w.repl_range)
            retry = rng.randint(1, self.w.max_retry_s)
        async_ = repl > 1 and rng.random() < cfg.async_prob
        delay = 1 if rng.random() < cfg.delay_prob else 0
        key = f"k{self.w.job_seq:04d}" if cfg.idem_prob and rng.random() < cfg.idem_prob else ""
        rec = AddRec(body, nd.idx, queue, repl, retry, async_, self.w.now, idem_key=key)
        self._add(nd, p, rec, delay)

    def _retry(self, arg: tuple[int, AddRec]) -> None:
        """The same add again, with the same idempotency key, on another node if any."""
        p, first = arg
        if self.w.now >= self.w.t_heal:
            return
        up = self.w.up_nodes(self.w.cfg.producer_nodes)
        others = [nd for nd in up if nd.idx != first.node] or up
        if not others:
            self.w.at(self.w.now + 100, self._retry, arg)
            return
        nd = self.w.rng.choice(others)
        attempt = first.attempt + 1
        base = first.body.split(b"r", 1)[0]
        rec = AddRec(
            base + f"r{attempt}".encode(),
            nd.idx,
            first.queue,
            first.repl,
            first.retry_s,
            first.async_,
            self.w.now,
            idem_key=first.idem_key,
            attempt=attempt,
        )
        self.w.stats["idem_retries"] += 1
        self._add(nd, p, rec, 0)

    def _next_add(self, p: int, rec: AddRec) -> None:
        """After an add ended for its client: retry its key, or the next job."""
        cfg = self.w.cfg
        if rec.idem_key and rec.attempt < cfg.idem_max_retries:
            if rec.status != "ok" or self.w.rng.random() < cfg.idem_lost_reply_prob:
                self.w.at(self.w.now + self.w.rng.randint(10, 200), self._retry, (p, rec))
                return
        self.w.at(self.w.now + self.w.rng.randint(10, 200), self.produce, p)

    def _add(self, nd: SimNode, p: int, rec: AddRec, delay: int) -> None:
        if self.w.wait_for_thaw(nd, partial(self._add, nd, p, rec, delay)):
            return
        cfg = self.w.cfg
        rng = self.w.rng
        body, queue, repl, retry, async_ = rec.body, rec.queue, rec.repl, rec.retry_s, rec.async_
        timeout = rng.randint(*cfg.add_timeout_ms)
        if rec.idem_key:
            rec.timeout_ms = timeout
            self.w.idem_adds.setdefault(rec.idem_key, []).append(rec)
        assert nd.view is not None
        rec.extrepl = self.w.core(nd).memory.warning > 0 or nd.view.leaving
        self.w.adds[body] = rec
        token = self.w.new_token()
        now = self.w.now + nd.skew
        core, nc = self.w.core(nd), self.w.node_core(nd)
        try:
            opts = AddOptions(
                timeout,
                repl,
                delay,
                retry,
                cfg.ttl_s,
                async_=async_,
                idem_key=rec.idem_key,
            )
            res = self.w.guard(nd, nc.add_job, now, token, queue, body, opts)
        except DisqueError as e:
            # Refused before anything was created: a delivery of it would be a phantom.
            self._add_done(rec, "failed", why=f"{e.code} {e.message}")
            self.stepper.flush(nd)
            self._next_add(p, rec)
            return
        if self.w.tr:
            mode = "ASYNC " if async_ else ""
            mode += f"IDEMPOTENCY-KEY {rec.idem_key} " if rec.idem_key else ""
            self.w.t(
                f"add  {nd.name} {body!r} {queue} REPLICATE {repl} RETRY {retry} "
                f"DELAY {delay} {mode}TIMEOUT {timeout} -> {res!r}"
            )
        if res is PENDING:
            nd.pending[token] = Op("add", p, rec)
            # The creator holds the job in memory (WAIT_REPL, not logged yet) and may still
            # send copies of it: for invariant 2 it is a holder until the add resolves.
            for j in core.jobs.values():
                if j.body == body and j.state == WAIT_REPL:
                    rec.waiting_id = j.id
                    self.w.copies.setdefault(j.id, []).append((self.w.step, nd.idx, WAITING))
                    break
            if rng.random() < cfg.client_cancel_prob:
                self.w.at(
                    self.w.now + rng.randint(1, timeout), self._cancel, (nd.idx, nd.gen, token)
                )
            self.stepper.flush(nd)
        else:
            assert isinstance(res, str), res
            self.stepper.flush(nd)  # the reply leaves after the step's AOF records (group commit)
            self._add_done(rec, "ok", job_id=res, nd=nd)
            self._next_add(p, rec)

    def set_policy(self, _: object) -> None:
        """``max_deliveries``: the first queue's delivery limit, set on one live node (the
        cluster spreads it)."""
        up = self.w.up_nodes()
        if not up:
            self.w.at(self.w.now + 100, self.set_policy, None)
            return
        nd = up[0]
        cfg = self.w.cfg
        now = self.w.now + nd.skew
        nc = self.w.node_core(nd)
        self.w.guard(
            nd,
            nc.qpolicy_set,
            now,
            cfg.queues[0],
            max_deliveries=cfg.max_deliveries,
            dead_letter=DEAD_LETTER_QUEUE,
        )
        if self.w.tr:
            self.w.t(
                f"qpolicy {nd.name} {cfg.queues[0]} MAXDELIVERIES {cfg.max_deliveries} "
                f"DEADLETTER {DEAD_LETTER_QUEUE}"
            )
        self.stepper.flush(nd)

    def _cancel(self, arg: tuple[int, int, int]) -> None:
        """The producer hangs up before its sync ADDJOB answered (client timeout)."""
        idx, gen, token = arg
        nd = self.w.nodes[idx]
        if not nd.up or nd.gen != gen:
            return
        if self.w.wait_for_thaw(nd, partial(self._cancel, arg)):
            return  # the hang-up is read when the node runs again
        op = nd.pending.pop(token, None)
        if op is None:
            return
        self.w.guard(nd, self.w.node_core(nd).cancel, token)
        if self.w.tr:
            self.w.t(f"hangup {nd.name} {op.kind} token {token}")
        if op.add is not None:
            self.w.stats["add_cancelled"] += 1
            self._add_done(op.add, "indeterminate", why="client hung up", nd=nd)
            self._next_add(op.client, op.add)
        else:
            self.w.stats["get_cancelled"] += 1
            self._next_get(op.client)
        self.stepper.flush(nd)

    def _add_done(
        self,
        rec: AddRec,
        status: str,
        job_id: str | None = None,
        why: str = "",
        nd: SimNode | None = None,
    ) -> None:
        if rec.waiting_id is not None and nd is not None:
            # The creator's unlogged WAIT_REPL copy: gone unless it became a logged one. Once
            # logged, its AOF records speak for it (a crashed node's AOF brings it back).
            j = nd.core.jobs.get(rec.waiting_id) if nd.core is not None else None
            mine = [
                st
                for _, i, st in self.w.copies[rec.waiting_id]
                if i == nd.idx and st in (HOLDS, GONE, WAITING)
            ]
            logged = bool(mine) and mine[-1] != WAITING
            if (j is None or j.state == ACKED) and not logged:
                self.w.copies[rec.waiting_id].append((self.w.step, nd.idx, GONE))
            rec.waiting_id = None
        rec.status = status
        rec.t_end = self.w.now
        rec.why = why
        if job_id is not None:
            rec.job_id = job_id
            self.w.body_of.setdefault(job_id, rec.body)
        self.w.stats[
            {"ok": "add_ok", "failed": "add_failed", "indeterminate": "add_indeterminate"}[status]
        ] += 1
        if self.w.tr:
            detail = job_id if job_id is not None else why
            self.w.t(f"add-{status} n{rec.node} {rec.body!r} {detail}")

    def on_reply(self, nd: SimNode, token: int, res: DeferredResult) -> None:
        op = nd.pending.pop(token, None)
        if op is None:
            raise InvariantViolation(
                self.w.seed,
                "client protocol",
                f"{nd.name}: reply for unknown token {token}: {res!r}",
            )
        if op.kind == "add":
            rec = op.add
            assert rec is not None
            if isinstance(res, str):
                self._add_done(rec, "ok", job_id=res, nd=nd)
            elif isinstance(res, DisqueError):
                self._add_done(rec, "indeterminate", why=f"{res.code} {res.message}", nd=nd)
            else:
                raise InvariantViolation(
                    self.w.seed, "client protocol", f"ADDJOB {rec.body!r} answered {res!r}"
                )
            self._next_add(op.client, rec)
        else:
            if isinstance(res, list):
                self.got_jobs(nd, res, op.client)
            elif res is not None:
                raise InvariantViolation(self.w.seed, "client protocol", f"GETJOB answered {res!r}")
            elif self.w.tr:
                self.w.t(f"get  {nd.name} c{op.client} timed out")
            self._next_get(op.client)

    def node_crashed(self, nd: SimNode) -> None:
        """The node died under its blocked clients: their connections are reset."""
        for op in list(nd.pending.values()):
            if op.kind == "add":
                assert op.add is not None
                self._add_done(op.add, "indeterminate", why=f"{nd.name} crashed", nd=nd)
                self._next_add(op.client, op.add)
            else:
                self._next_get(op.client)
        nd.pending.clear()

    def _next_get(self, c: int) -> None:
        if c >= 0:
            self.w.at(self.w.now + self.w.rng.randint(20, 300), self.consume, c)

    def consume(self, c: int) -> None:
        cfg = self.w.cfg
        if self.w.now >= self.w.t_drain:
            return
        rng = self.w.rng
        nd = self.w.client_node(cfg.consumer_nodes, self.consume, c, frozen=True)
        if nd is None:
            return
        queues = list(self.w.queues_all)
        rng.shuffle(queues)
        nohang = rng.random() < 0.4
        timeout = rng.randint(50, 1000)
        count = rng.choice((1, 1, 1, 2, 3))
        self.get(nd, c, queues, nohang, timeout, count)

    def get(
        self, nd: SimNode, c: int, queues: list[str], nohang: bool, timeout: int, count: int
    ) -> None:
        if self.w.wait_for_thaw(nd, partial(self.get, nd, c, queues, nohang, timeout, count)):
            return
        token = self.w.new_token()
        now = self.w.now + nd.skew
        nc = self.w.node_core(nd)
        try:
            res = self.w.guard(
                nd, nc.get_job, now, token, queues, nohang=nohang, timeout_ms=timeout, count=count
            )
        except DisqueError as e:
            if e.code != "LEAVING":
                raise InvariantViolation(
                    self.w.seed, "client protocol", f"{nd.name} GETJOB raised {e}"
                ) from e
            self.w.stats["get_leaving"] += 1
            if self.w.tr:
                self.w.t(f"get  {nd.name} c{c} -> -LEAVING")
            self._next_get(c)
            self.stepper.flush(nd)
            return
        if self.w.tr:
            how = "NOHANG" if nohang else f"TIMEOUT {timeout}"
            shown = [j.id for j in res] if isinstance(res, list) else res
            self.w.t(f"get  {nd.name} c{c} {how} COUNT {count} {queues} -> {shown}")
        if res is PENDING:
            nd.pending[token] = Op("get", c)
            if c >= 0 and self.w.rng.random() < self.w.cfg.get_cancel_prob:
                self.w.at(
                    self.w.now + self.w.rng.randint(1, timeout),
                    self._cancel,
                    (nd.idx, nd.gen, token),
                )
        else:
            if isinstance(res, list):
                self.got_jobs(nd, res, c)
            self._next_get(c)
        self.stepper.flush(nd)

    def got_jobs(self, nd: SimNode, jobs: list[DJob], c: int) -> None:
        for j in jobs:
            d = Delivery(self.w.step, self.w.now, nd.idx, j.id, j.body)
            self.w.deliveries.append(d)
            prev = self.w.delivered.setdefault(j.id, [])
            if prev:
                self.w.stats["redeliveries"] += 1
            prev.append(d)
            self.w.stats["deliveries"] += 1
            self.w.body_of.setdefault(j.id, j.body)
            if self.w.tr:
                self.w.t(f"DELIVERED {nd.name} c{c} {j.id} {j.body!r}")
            if j.idem_key.startswith(KEY_PREFIX):
                self.schedules.delivery(d, j)  # a schedule's tick (invariant 10)
            elif j.queue == DEAD_LETTER_QUEUE:
                self.checks.dead_letter_delivery(d, j)  # a policy's move (invariant 11)
            else:
                self.checks.check_delivery(d)
            if c < 0:
                # The drainer acks everything at once where it got it.
                self.w.at(self.w.now, self._drain_ack, (nd.idx, nd.gen, j.id))
                continue
            hi = max(50, j.retry_s * 1000 * 3 // 4) if j.retry_s else 500
            self.w.at(self.w.now + self.w.rng.randint(5, hi), self._process, (nd.idx, j.id, c, 0))

    def _process(self, arg: tuple[int, str, int, int]) -> None:
        """What the consumer does with a job it got from node ``idx``."""
        idx, job_id, c, round_ = arg
        cfg = self.w.cfg
        rng = self.w.rng
        up = self.w.up_nodes(frozen=True)  # a command to a frozen node waits for its thaw
        if not up:
            self.w.stats["dropped_by_consumer"] += 1
            self.w.drops[job_id] = self.w.drops.get(job_id, 0) + 1
            return
        same = self.w.nodes[idx]
        r = rng.random()
        if round_ == 0 and r < 0.06:
            self._client_cmd(same if same.up else rng.choice(up), "nack", job_id)
        elif round_ == 0 and r < 0.08:
            # Admin ENQUEUE, maybe on a node that only holds a copy.
            self._client_cmd(rng.choice(up), "enqueue", job_id)
        elif round_ == 0 and r < 0.15:
            target = same if same.up else rng.choice(up)
            self._client_cmd(target, "working", job_id)
            self.w.at(self.w.now + rng.randint(5, 800), self._process, (idx, job_id, c, 1))
        elif r < 0.27:
            self.w.stats["dropped_by_consumer"] += 1
            self.w.drops[job_id] = self.w.drops.get(job_id, 0) + 1
            if self.w.tr:
                self.w.t(f"drop c{c} {job_id} (consumer died before ACK)")
        else:
            if same.up and rng.random() >= cfg.ack_other_node_prob:
                target = same
            else:
                target = rng.choice(up)
            self._client_cmd(target, "fastack" if rng.random() < 0.12 else "ack", job_id)

    def _client_cmd(self, nd: SimNode, cmd: str, job_id: str) -> None:
        if self.w.wait_for_thaw(nd, partial(self._client_cmd, nd, cmd, job_id)):
            return
        if cmd in ("ack", "fastack"):
            # Invariant 9: this ACK reached a node after every delivery of the job so far.
            seen = len(self.w.delivered.get(job_id, ()))
            self.w.ack_cover[job_id] = max(self.w.ack_cover.get(job_id, 0), seen)
        now = self.w.now + nd.skew
        nc = self.w.node_core(nd)
        res: object
        try:
            if cmd == "ack":
                res = self.w.guard(nd, nc.ack_job, now, [job_id])
                self.w.stats["acks"] += 1
                if res == 0:
                    self.w.stats["dummy_acks"] += 1
                self.w.client_acks.setdefault(job_id, self.w.now)
            elif cmd == "fastack":
                res = self.w.guard(nd, nc.fast_ack, now, [job_id])
                self.w.stats["fastacks"] += 1
                self.w.client_acks.setdefault(job_id, self.w.now)
            elif cmd == "nack":
                res = self.w.guard(nd, nc.nack, now, [job_id])
                self.w.stats["nacks"] += 1
            elif cmd == "enqueue":
                res = self.w.guard(nd, nc.enqueue, now, [job_id])
                self.w.stats["enqueues"] += 1
                if res:
                    self.w.admin_enqueued.add(job_id)
            else:
                res = self.w.guard(nd, nc.working, now, job_id)
                self.w.stats["workings"] += 1
        except DisqueError as e:
            res = f"-{e.code}"  # NOJOB / TOOLATE: normal answers for WORKING
        if self.w.tr:
            self.w.t(f"{cmd:<4} {nd.name} {job_id} -> {res}")
        self.stepper.flush(nd)

    def _drain_ack(self, arg: tuple[int, int, str]) -> None:
        idx, gen, job_id = arg
        nd = self.w.nodes[idx]
        if nd.up and nd.gen == gen:
            self._client_cmd(nd, "ack", job_id)
