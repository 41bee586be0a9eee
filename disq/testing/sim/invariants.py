"""The checks. The invariants are the spec (``InvariantViolation`` carries the seed and,
replayed with tracing, the job's history and its messages):

1. Every acknowledged ADDJOB (an id came back) with RETRY > 0 is delivered at least once by
   the end. The nemesis keeps at most ``max_down`` nodes down at once (default R-1 for the
   smallest replication used) and every node comes back before the final drain. With
   ``fsync_lost`` a job is excused only if every node that logged it lost that record.
2. No delivery happens after every node that ever held a copy had it acked or deleted and no
   copy was on the wire ("zombie" delivery). Holders come from the AOF records (what a
   restart would bring back), the REPLJOB/YOURJOBS in flight, and the creator's WAIT_REPL
   copy. Hindsight: a node that gets its first copy later was "not yet acked" before.
3. No core raises (any exception is reported with the seed), and no core spins (its next
   deadline stays at ``now``).
4. Structure, checked after steps: every id in a node's queues is in its ``jobs`` with state
   QUEUED (and the same queue and ctime), and every QUEUED job is in its queue; the per-queue
   counts of jobs not queued (counts.py, kept as jobs move) equal a count from scratch.
5. Nothing is delivered that no producer submitted (or whose ADDJOB was refused); one ADDJOB
   is one job id; a RETRY 0 job (at-most-once) is delivered at most once.
6. Optional (``final_gc_ms``): once everything is healed, every acked job is garbage
   collected on every node.
7. Idempotency keys (``idem_prob``): one key, one job. Of the jobs carrying a key, at most
   one was answered to a producer or delivered to a consumer, within the key's window (1 h,
   beyond any run), whatever the faults: no exemption (keys are bound by a vote,
   disq/core/disque/keyvote.py). Every acknowledged keyed add is delivered (invariant 1
   covers each add).
8. The beanstalk door (``beanstalk_jobs``): every INSERTED put (``beanstalk_replicate`` R)
   was reserved somewhere by the end (on its node, or on a holder that took it over with a
   new local id: it is identified by its body) or is still in some node's beanstalk core
   (buried stays buried). At-least-once: a job may be reserved more than once.
9. Nothing is stranded: at the end, after the drain, every acknowledged ADDJOB with RETRY > 0
   that was delivered (invariant 1's excuses apply: its TTL may have ended, with
   ``fsync_lost`` every logged copy lost) had an ACKJOB or FASTACK (a
   consumer's, or the drain's, which acks every job it takes) reach some node after its last
   delivery. So a job whose consumer died holding it (delivered, never acked) came back by
   its RETRY and was delivered again, by a consumer or at the latest by the drain. A job
   whose acks all came before its last delivery (a redelivery racing its ack, which
   at-least-once allows) is excused only if no node holds it live at the end. And no node
   ends holding such a job WAIT_REPL, QUEUED or ACTIVE unless some node has it ACKED (its ack
   may still be being collected). Checked after invariants 1 and 2.
10. Schedules (``schedules``, disq/testing/sim/schedules.py): one tick, one job, none lost.
   None twice: for every tick key ``schedule:<name>:<tick>``, the jobs delivered for it and
   the jobs any node recorded as its decided job (IDEMKEY records of the key vote, SCHEDTICK
   records of the schedulers) are one job id, checked as each shows up, whatever the faults.
   None lost: by the end (the drain waits for them), a job was delivered for every tick of a
   schedule whose CATCHUP covers the run, after its (last) version up to the ticks due on
   every clock before the drain; and for every other tick (SKIP, CATCHUP 1-2, ticks before
   a pause) during which a majority of the nodes, ``repl`` of them taking copies, knew the
   definition and stayed up, unfrozen, not leaving and on one side of any partition from
   ``LEAD_MS`` before the fastest clock reached the tick until the slowest clock's misfire
   edge (tick + MISFIRE_MS), with no change of the schedule in that time.
11. Dead letters (``max_deliveries``, disq/core/disque/deadletter.py): no job is dead-lettered
   twice, none is lost. Twice: the dead letters delivered for one original (their
   ``disq-original-id`` header) are one job id, checked as each is delivered, whatever the
   faults; a dead letter's body is its original's. Lost: invariants 1 and 9 excuse a job
   (never delivered: its copies' counters over-count a requeue when a QUEUED is lost, as
   Disque's do; or delivered, and no ACK followed the last delivery) only if a dead letter
   of it was delivered (by a consumer, or the drain) by the end.
"""

from __future__ import annotations

from disq.core.disque.counts import from_scratch
from disq.core.disque.deadletter import HEADER_ORIGINAL
from disq.core.disque.job import (
    ACKED,
    ACTIVE,
    BEANSTALK_ORIGIN,
    DELIVERED,
    QUEUED,
    STATE_NAMES,
    WAIT_REPL,
    DJob,
)
from disq.core.messages import JobData
from disq.persistence.cluster_records import to_core_records
from disq.testing.sim.config import T0_MS, config_diff, replay_command
from disq.testing.sim.model import Delivery, InvariantViolation, SimNode
from disq.testing.sim.schedules import Schedules
from disq.testing.sim.world import FLYING, GONE, HOLDS, LANDED, WAITING, World


class Invariants:
    """The checks: as the run goes (the AOF stream, the structure, the deliveries) and at
    its end."""

    def __init__(self, world: World, schedules: Schedules) -> None:
        self.w = world
        self.schedules = schedules  # invariant 10's checks

    def track_aof(self, nd: SimNode, rec: tuple[str, object]) -> None:
        kind, payload = rec
        if kind == "IDEMKEY" or kind == "KEYVOTE":
            return  # idempotency keys, not a job's copy
        if kind == "LOADJOB":
            assert isinstance(payload, JobData)
            job_id, state = payload.id, HOLDS
        else:
            assert isinstance(payload, str)
            job_id, state = payload, GONE
        self.w.copies.setdefault(job_id, []).append((self.w.step, nd.idx, state))
        if self.w.tr:
            self.w.t(f"aof  {nd.name} {kind} {job_id}")

    def check_gc(self, _: object) -> None:
        """Liveness (optional): with every node up and connected for ``final_gc_ms``, acked
        jobs are garbage collected everywhere (Disque 05-acks: evicted when all owners are
        reachable). GC retries back off up to 3 minutes, so give it well over that."""
        self.w.done = True
        for nd in self.w.nodes:
            for j in self.w.core(nd).jobs.values():
                if j.state == ACKED and not j.flags & BEANSTALK_ORIGIN:
                    raise self.w.violation(
                        "6 (acks are garbage collected)",
                        f"{nd.name} still holds {j.id} ACKED {self.w.cfg.final_gc_ms} ms after "
                        f"the drain (delivered={self.w.names(sorted(j.delivered))}, "
                        f"confirmed={self.w.names(sorted(j.confirmed))})",
                        j.id,
                    )

    def check_structure(self, nd: SimNode) -> None:
        """Invariant 4: a node's queues and its jobs table agree."""
        core = nd.core
        if core is None:
            return
        jobs = core.jobs
        where = f"{nd.name} t={self.w.now - T0_MS}"
        in_queues = 0
        for name, q in core.queues.items():
            for queued_job in q.skiplist:  # the DJobs themselves (queue.py)
                job_id = queued_job.id
                j = jobs.get(job_id)
                if j is not queued_job or j.state != QUEUED or j.queue != name:
                    what = "missing" if j is None else f"{STATE_NAMES[j.state]} in {j.queue!r}"
                    raise self.w.violation(
                        "4 (queues match jobs)",
                        f"{where}: queue {name!r} holds {job_id} but the job is {what}",
                        job_id,
                    )
            in_queues += len(q.skiplist)
        queued = 0
        for job_id, j in jobs.items():
            if j.state == QUEUED:
                queued += 1
                jq = core.queues.get(j.queue)
                if jq is None or j not in jq.skiplist:
                    raise self.w.violation(
                        "4 (queues match jobs)",
                        f"{where}: {job_id} is QUEUED but not in queue {j.queue!r}",
                        job_id,
                    )
            elif j.id != job_id:
                raise self.w.violation(
                    "4 (queues match jobs)", f"{where}: jobs[{job_id}] is {j.id}"
                )
        if queued != in_queues:
            raise self.w.violation(
                "4 (queues match jobs)", f"{where}: {queued} QUEUED jobs, {in_queues} queued ids"
            )
        kept, counts = core.counts.by_queue, from_scratch(core.jobs.values())
        if kept != counts:
            wrong = {
                k: (kept.get(k), counts.get(k))
                for k in sorted({*kept, *counts})
                if kept.get(k) != counts.get(k)
            }
            raise self.w.violation(
                "4 (queues match jobs)",
                f"{where}: per-queue counts [not queued, delayed] (kept, from scratch): "
                f"{wrong} (counts.py)",
            )

    def check_all_structures(self) -> None:
        for nd in self.w.nodes:
            self.check_structure(nd)

    def check_delivery(self, d: Delivery) -> None:
        """Invariant 5, checked as deliveries happen."""
        rec = self.w.adds.get(d.body)
        if rec is None or rec.status == "failed":
            why = "never submitted" if rec is None else f"its ADDJOB was refused ({rec.why})"
            raise self.w.violation(
                "5 (no phantom jobs)", f"{d.job_id} {d.body!r} delivered but {why}", d.job_id
            )
        first = self.w.delivered[d.job_id][0]
        if rec.job_id is not None and rec.job_id != d.job_id:
            raise self.w.violation(
                "5 (one ADDJOB, one job)",
                f"{d.body!r} was added as {rec.job_id} but delivered as {d.job_id}",
                d.job_id,
            )
        if rec.retry_s == 0 and first is not d:
            if d.job_id in self.w.admin_enqueued:
                return  # an operator asked for this delivery (ENQUEUE <id>)
            if "amo-enqueue-once" in self.w.cfg.exempt and any(
                first.t <= t <= d.t for t in self.w.enqueue_once_restarts
            ):
                return
            raise self.w.violation(
                "5 (at-most-once)",
                f"RETRY 0 job {d.job_id} delivered again by n{d.node} at t={d.t - T0_MS} "
                f"(first by n{first.node} at t={first.t - T0_MS})",
                d.job_id,
            )

    def dead_letter_delivery(self, d: Delivery, j: DJob) -> None:
        """Invariant 11, as a dead letter is delivered: one dead letter per original."""
        w = self.w
        original = dict(j.headers or ()).get(HEADER_ORIGINAL, b"").decode("latin-1")
        # Its original's body, when a delivery or an add showed it (a copy over-counting a
        # lost QUEUED may dead-letter a job never delivered; a schedule's tick is no add).
        # A keyed retry's body is the first's with ``r<n>`` added: compare the first's.
        known = w.body_of.get(original, d.body)
        if not original or known.split(b"r", 1)[0] != d.body.split(b"r", 1)[0]:
            why = "no header names its original" if not original else f"{original} differs"
            raise w.violation("11 (dead letters)", f"dead letter {d.job_id}: {why}", d.job_id)
        w.dead_letter_ids.add(d.job_id)
        ids = w.dead_letters.setdefault(original, set())
        ids.add(d.job_id)
        w.stats["dead_letters_delivered"] = w.stats.get("dead_letters_delivered", 0) + 1
        if len(ids) > 1:
            raise w.violation(
                "11 (dead letters)",
                f"{original} was dead-lettered twice: {sorted(ids)} (the last delivered by "
                f"n{d.node} at t={d.t - T0_MS})",
                original,
            )

    def check_final(self) -> None:
        cfg = self.w.cfg
        self._check_idem()
        self.schedules.check()
        self._check_beanstalk()
        # Invariant 1: acknowledged ADDJOBs are delivered.
        for rec in self.w.adds.values():
            if rec.status != "ok" or rec.retry_s == 0:
                continue  # indeterminate/refused, or at-most-once (may be lost by design)
            assert rec.job_id is not None
            if rec.job_id in self.w.delivered or rec.job_id in self.w.dead_letters:
                continue  # delivered, or its dead letter was (invariant 11)
            if rec.t_start + cfg.ttl_s * 1000 <= self.w.now + 2 * cfg.clock_skew_ms + 1000:
                continue  # it may have expired (every node drops its own copy at its TTL)
            if cfg.fsync_lost and self._lost_everywhere(rec.job_id):
                continue  # every logged copy was lost unsynced: everysec does not promise it
            holders = self._holders_at_end(rec.job_id)
            raise self.w.violation(
                "1 (acknowledged ADDJOB delivered)",
                f"{rec.job_id} {rec.body!r} (REPLICATE {rec.repl} RETRY {rec.retry_s}"
                f"{' ASYNC' if rec.async_ else ''}, added on n{rec.node} "
                f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}) was never delivered; "
                f"at the end: {holders}",
                rec.job_id,
            )
        # Invariant 2: no delivery after every holder learned the ack (or deleted the job).
        for job_id, ds in self.w.delivered.items():
            if cfg.fsync_lost and job_id in self.w.lost_del:
                continue  # a lost DELJOB legitimately brings a copy back
            dead = self._dead_step(job_id)
            if dead is None:
                continue
            late = [d for d in ds if d.step > dead[0]]
            if late:
                d = late[0]
                acked = self.w.client_acks.get(job_id)
                why = (
                    f"a client acked it at t={acked - T0_MS}"
                    if acked is not None
                    else "no client acked it (deleted)"
                )
                raise self.w.violation(
                    "2 (no delivery after the ack is everywhere)",
                    f"{job_id} delivered by n{d.node} at t={d.t - T0_MS} (step {d.step}) after "
                    f"every holder ({', '.join(f'n{i}' for i in dead[1])}) had it acked or "
                    f"deleted at step {dead[0]}; {why}",
                    job_id,
                )
        self._check_stranded()

    def _check_stranded(self) -> None:
        """Invariant 9: nothing is stranded (delivered, never acked, never back), and no node
        ends holding a live copy of a job nobody has acked."""
        cfg = self.w.cfg
        seen: set[str] = set()
        for rec in self.w.adds.values():
            if rec.status != "ok" or rec.retry_s == 0 or rec.job_id is None:
                continue
            job_id = rec.job_id
            if job_id in seen:
                continue  # a keyed retry answered with the same job
            seen.add(job_id)
            if rec.t_start + cfg.ttl_s * 1000 <= self.w.now + 2 * cfg.clock_skew_ms + 1000:
                continue  # it may have expired (invariant 1's excuse)
            if cfg.fsync_lost and self._lost_everywhere(job_id):
                continue
            copies = self._copies_at_end(job_id)
            live = [nd for nd, j in copies if j.state in (WAIT_REPL, QUEUED, ACTIVE)]
            acked = any(j.state == ACKED for _, j in copies)
            ds = self.w.delivered.get(job_id, [])
            covered = self.w.ack_cover.get(job_id, 0)
            what = ""
            if job_id in self.w.dead_letters and not live:
                continue  # dead-lettered: its dead letter was delivered (invariant 11)
            if ds and covered < len(ds) and (job_id not in self.w.ack_cover or live):
                last = ds[-1]
                drops = self.w.drops.get(job_id, 0)
                acks = (
                    f"the last ACK reached a node after delivery {covered}"
                    if job_id in self.w.ack_cover
                    else "no ACK ever reached a node"
                )
                died = f", {drops} time(s) to a consumer that died before ACK" if drops else ""
                what = (
                    f"was delivered {len(ds)} time(s){died}, last by n{last.node} at "
                    f"t={last.t - T0_MS}; {acks}, and it was never delivered again"
                )
            elif live and not acked:
                what = (
                    f"is still live on {', '.join(nd.name for nd in live)} at the end and no "
                    "node has it acked"
                )
            if what:
                raise self.w.violation(
                    "9 (nothing stranded)",
                    f"{job_id} {rec.body!r} (REPLICATE {rec.repl} RETRY {rec.retry_s}"
                    f"{' ASYNC' if rec.async_ else ''}, added on n{rec.node} "
                    f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}) {what}; at the end: "
                    f"{self._describe_copies(copies)}",
                    job_id,
                )

    def _copies_at_end(self, job_id: str) -> list[tuple[SimNode, DJob]]:
        out = []
        for nd in self.w.nodes:
            j = nd.core.jobs.get(job_id) if nd.core is not None else None
            if j is not None:
                out.append((nd, j))
        return out

    def _describe_copies(self, copies: list[tuple[SimNode, DJob]]) -> str:
        """``n0=ACTIVE (delivered here, no requeue timer), n2=ACKED``."""
        parts = []
        for nd, j in copies:
            notes = []
            if j.flags & DELIVERED:
                notes.append("delivered here")
            if j.state == ACTIVE and not j.qtime_ms:
                notes.append("no requeue timer")
            parts.append(
                f"{nd.name}={STATE_NAMES[j.state]}" + (f" ({', '.join(notes)})" if notes else "")
            )
        return ", ".join(parts) or "no node holds it"

    def _check_idem(self) -> None:
        """Invariant 7: one idempotency key, one job: of the jobs carrying a key, at most one
        was answered to a producer or delivered to a consumer."""
        if not self.w.idem_adds:
            return
        jobs: dict[str, dict[str, str]] = {}  # key -> job id -> how it showed
        for key, recs in self.w.idem_adds.items():
            for rec in recs:
                if rec.status == "ok" and rec.job_id is not None:
                    jobs.setdefault(key, {}).setdefault(
                        rec.job_id, f"answered to {rec.body!r} on n{rec.node}"
                    )
        for job_id, ds in self.w.delivered.items():
            if job_id in self.w.dead_letter_ids:
                continue  # a policy's keyed move, not the producer's job (invariant 11)
            made = self.w.adds.get(ds[0].body)
            if made is not None and made.idem_key:
                jobs.setdefault(made.idem_key, {}).setdefault(
                    job_id, f"delivered ({ds[0].body!r}) by n{ds[0].node}"
                )
        dups = {key: ids for key, ids in jobs.items() if len(ids) > 1}
        self.w.stats["idem_dup_keys"] = len(dups)
        for key in sorted(dups):
            ids = dups[key]
            raise self.w.violation(
                "7 (one idempotency key, one job)",
                f"key {key} has {len(ids)} jobs: "
                + "; ".join(f"{i} {how}" for i, how in sorted(ids.items())),
                sorted(ids)[-1],
            )

    def _check_beanstalk(self) -> None:
        """Invariant 8: every INSERTED beanstalk job was reserved somewhere by the end, or
        is still in some node's beanstalk core (buried stays buried)."""
        if not self.w.bputs:
            return
        present: dict[bytes, str] = {}
        for nd in self.w.nodes:
            if nd.nc is not None:
                for job in nd.nc.beanstalk.jobs.values():
                    present.setdefault(job.body, f"{nd.name}:{job.id}")
        for rec in self.w.bputs.values():
            if rec.status != "ok" or rec.body in self.w.bdelivered or rec.body in present:
                continue
            if self.w.cfg.fsync_lost and rec.disque_id and self._lost_everywhere(rec.disque_id):
                continue
            holders = self._holders_at_end(rec.disque_id) if rec.disque_id else "not replicated"
            raise self.w.violation(
                "8 (inserted beanstalk job not lost)",
                f"{rec.body!r} (INSERTED by n{rec.node}, beanstalk_replicate {rec.repl}, "
                f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}, cluster id "
                f"{rec.disque_id or '-'}) was never reserved and no node has it; at the end: "
                f"{holders}",
                rec.disque_id or None,
            )

    def _lost_everywhere(self, job_id: str) -> bool:
        """fsync_lost: every node that logged the job lost a LOADJOB of it in a crash."""
        lost = self.w.lost_load.get(job_id)
        if not lost:
            return False
        loaders = {node for _, node, st in self.w.copies.get(job_id, ()) if st == HOLDS}
        return loaders <= lost

    def _dead_step(self, job_id: str) -> tuple[int, list[int]] | None:
        """The first step after which every node that ever held a copy (hindsight: including
        those that get one later) had its latest AOF record for the job be a DELJOB, and no
        copy was on the wire."""
        events = self.w.copies.get(job_id)
        if not events:
            return None
        holders = sorted({node for _, node, st in events if st in (HOLDS, WAITING)})
        if not holders:
            return None
        latest: dict[int, int] = {}
        flying = 0
        for k, (step, node, st) in enumerate(events):
            if st == FLYING:
                flying += 1
            elif st == LANDED:
                flying -= 1
            else:
                latest[node] = st
            # Judge whole steps only: within one step the order of our records is arbitrary.
            last_of_step = k + 1 == len(events) or events[k + 1][0] != step
            if last_of_step and not flying and all(latest.get(h) == GONE for h in holders):
                return step, holders
        return None

    def _holders_at_end(self, job_id: str) -> str:
        parts = []
        for nd in self.w.nodes:
            j = nd.core.jobs.get(job_id) if nd.core is not None else None
            in_aof = any(
                (p.id if isinstance(p, JobData) else p) == job_id
                for _, p in to_core_records(nd.aof)
            )
            if j is not None or in_aof:
                st = STATE_NAMES[j.state] if j is not None else "-"
                parts.append(f"{nd.name}={st}{'(in AOF)' if in_aof else ''}")
        return ", ".join(parts) or "no node knows it"

    def enrich(self, e: InvariantViolation) -> InvariantViolation:
        """Attach the readable part: config, the job's history, the last events."""
        lines = [
            f"config: {config_diff(self.w.cfg)}",
            f"replay: {replay_command(self.w.seed, self.w.cfg)}",
        ]
        if e.report:
            lines.append(e.report)
        if not self.w.tr:
            lines.append("(run with trace=True for the job's history)")
        else:
            keys: list[str] = []
            if e.job_id is not None:
                keys.append(e.job_id)
                body = self.w.body_of.get(e.job_id)
                if body is not None:
                    keys.append(repr(body))
            if keys:
                hist = [ln for ln in self.w.trace if "NEMESIS" in ln or any(k in ln for k in keys)]
                if len(hist) > 400:
                    hist = [*hist[:100], f"... {len(hist) - 400} lines ...", *hist[-300:]]
                lines.append(f"--- history of {' / '.join(keys)} (and nemesis) ---")
                lines.extend(hist)
            lines.append("--- last 40 events ---")
            lines.extend(self.w.trace[-40:])
        return InvariantViolation(e.seed, e.invariant, e.detail, "\n".join(lines), e.job_id)
