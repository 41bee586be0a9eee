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
   QUEUED (and the same queue and ctime), and every QUEUED job is in its queue.
5. Nothing is delivered that no producer submitted (or whose ADDJOB was refused); one ADDJOB
   is one job id; a RETRY 0 job (at-most-once) is delivered at most once.
6. Optional (``final_gc_ms``): once everything is healed, every acked job is garbage
   collected on every node.
7. Idempotency keys (``idem_prob``): the replies of one key that returned an id returned the
   same id, within the key's window (1 h, beyond any run). Exempt, as ARCHITECTURE.md
   documents: the node answering the later reply did not know the key yet (no copy taken, no
   IdemKeys received since its last start: "a retry racing the first add (before it is done)
   on another node adds a second job", lost or late IdemKeys, keys learned by IdemKeys are
   not persisted). Every acknowledged keyed add is delivered (invariant 1 covers each add).
8. The beanstalk door (``beanstalk_jobs``): every INSERTED put (``beanstalk_replicate`` R)
   was reserved somewhere by the end (on its node, or on a holder that took it over with a
   new local id: it is identified by its body) or is still in some node's beanstalk core
   (buried stays buried). At-least-once: a job may be reserved more than once.
"""

from __future__ import annotations

from disq.core.disque.job import ACKED, BEANSTALK_ORIGIN, QUEUED, STATE_NAMES
from disq.core.messages import JobData
from disq.persistence.cluster_records import to_core_records
from disq.testing.sim.base import FLYING, GONE, HOLDS, LANDED, WAITING, SimBase
from disq.testing.sim.config import T0_MS, config_diff, replay_command
from disq.testing.sim.model import AddRec, Delivery, InvariantViolation, SimNode


class InvariantsMixin(SimBase):
    def _track_aof(self, nd: SimNode, rec: tuple[str, object]) -> None:
        kind, payload = rec
        if kind == "LOADJOB":
            assert isinstance(payload, JobData)
            job_id, state = payload.id, HOLDS
        else:
            assert isinstance(payload, str)
            job_id, state = payload, GONE
        self._copies.setdefault(job_id, []).append((self.step, nd.idx, state))
        if self._tr:
            self._t(f"aof  {nd.name} {kind} {job_id}")

    def _check_gc(self, _: object) -> None:
        """Liveness (optional): with every node up and connected for ``final_gc_ms``, acked
        jobs are garbage collected everywhere (Disque 05-acks: evicted when all owners are
        reachable). GC retries back off up to 3 minutes, so give it well over that."""
        self._done = True
        for nd in self.nodes:
            for j in self._core(nd).jobs.values():
                if j.state == ACKED and not j.flags & BEANSTALK_ORIGIN:
                    raise self._violation(
                        "6 (acks are garbage collected)",
                        f"{nd.name} still holds {j.id} ACKED {self.cfg.final_gc_ms} ms after "
                        f"the drain (delivered={self._names(sorted(j.delivered))}, "
                        f"confirmed={self._names(sorted(j.confirmed))})",
                        j.id,
                    )

    def _check_structure(self, nd: SimNode) -> None:
        """Invariant 4: a node's queues and its jobs table agree."""
        core = nd.core
        if core is None:
            return
        jobs = core.jobs
        where = f"{nd.name} t={self.now - T0_MS}"
        in_queues = 0
        for name, q in core.queues.items():
            for ctime, job_id in q.skiplist:
                j = jobs.get(job_id)
                if j is None or j.state != QUEUED or j.queue != name or j.ctime != ctime:
                    what = "missing" if j is None else f"{STATE_NAMES[j.state]} in {j.queue!r}"
                    raise self._violation(
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
                if jq is None or (j.ctime, j.id) not in jq.skiplist:
                    raise self._violation(
                        "4 (queues match jobs)",
                        f"{where}: {job_id} is QUEUED but not in queue {j.queue!r}",
                        job_id,
                    )
            elif j.id != job_id:
                raise self._violation("4 (queues match jobs)", f"{where}: jobs[{job_id}] is {j.id}")
        if queued != in_queues:
            raise self._violation(
                "4 (queues match jobs)", f"{where}: {queued} QUEUED jobs, {in_queues} queued ids"
            )

    def _check_all_structures(self) -> None:
        for nd in self.nodes:
            self._check_structure(nd)

    def _check_delivery(self, d: Delivery) -> None:
        """Invariant 5, checked as deliveries happen."""
        rec = self.adds.get(d.body)
        if rec is None or rec.status == "failed":
            why = "never submitted" if rec is None else f"its ADDJOB was refused ({rec.why})"
            raise self._violation(
                "5 (no phantom jobs)", f"{d.job_id} {d.body!r} delivered but {why}", d.job_id
            )
        first = self.delivered[d.job_id][0]
        if rec.job_id is not None and rec.job_id != d.job_id:
            raise self._violation(
                "5 (one ADDJOB, one job)",
                f"{d.body!r} was added as {rec.job_id} but delivered as {d.job_id}",
                d.job_id,
            )
        if rec.retry_s == 0 and first is not d:
            if d.job_id in self._admin_enqueued:
                return  # an operator asked for this delivery (ENQUEUE <id>)
            if "amo-enqueue-once" in self.cfg.exempt and any(
                first.t <= t <= d.t for t in self._enqueue_once_restarts
            ):
                return
            raise self._violation(
                "5 (at-most-once)",
                f"RETRY 0 job {d.job_id} delivered again by n{d.node} at t={d.t - T0_MS} "
                f"(first by n{first.node} at t={first.t - T0_MS})",
                d.job_id,
            )

    def _check_final(self) -> None:
        cfg = self.cfg
        self._check_idem()
        self._check_beanstalk()
        # Invariant 1: acknowledged ADDJOBs are delivered.
        for rec in self.adds.values():
            if rec.status != "ok" or rec.retry_s == 0:
                continue  # indeterminate/refused, or at-most-once (may be lost by design)
            assert rec.job_id is not None
            if rec.job_id in self.delivered:
                continue
            if rec.t_start + cfg.ttl_s * 1000 <= self.now + 2 * cfg.clock_skew_ms + 1000:
                continue  # it may have expired (every node drops its own copy at its TTL)
            if cfg.fsync_lost and self._lost_everywhere(rec.job_id):
                continue  # every logged copy was lost unsynced: everysec does not promise it
            if "idem-deljob-race" in cfg.exempt and self._deljob_race_hit(rec):
                continue
            holders = self._holders_at_end(rec.job_id)
            raise self._violation(
                "1 (acknowledged ADDJOB delivered)",
                f"{rec.job_id} {rec.body!r} (REPLICATE {rec.repl} RETRY {rec.retry_s}"
                f"{' ASYNC' if rec.async_ else ''}, added on n{rec.node} "
                f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}) was never delivered; "
                f"at the end: {holders}",
                rec.job_id,
            )
        # Invariant 2: no delivery after every holder learned the ack (or deleted the job).
        for job_id, ds in self.delivered.items():
            if cfg.fsync_lost and job_id in self._lost_del:
                continue  # a lost DELJOB legitimately brings a copy back
            dead = self._dead_step(job_id)
            if dead is None:
                continue
            late = [d for d in ds if d.step > dead[0]]
            if late:
                d = late[0]
                acked = self._client_acks.get(job_id)
                why = (
                    f"a client acked it at t={acked - T0_MS}"
                    if acked is not None
                    else "no client acked it (deleted)"
                )
                raise self._violation(
                    "2 (no delivery after the ack is everywhere)",
                    f"{job_id} delivered by n{d.node} at t={d.t - T0_MS} (step {d.step}) after "
                    f"every holder ({', '.join(f'n{i}' for i in dead[1])}) had it acked or "
                    f"deleted at step {dead[0]}; {why}",
                    job_id,
                )

    def _deljob_race_hit(self, rec: AddRec) -> bool:
        """The known gap "idem-deljob-race": a keyed add failed (hang-up, NOREPL), its
        creator deleted the job and sent DELJOB to the holders, and a retry of the key
        reached a holder before that DELJOB did: the holder answered the dead job's id. (A
        holder that got the DELJOB first forgets the key and adds the job again.) So: a
        keyed add answered by a node other than the job's creator, and the creator never
        acknowledged that id."""
        if not rec.idem_key or rec.job_id is None:
            return False
        creator = next((nd for nd in self.nodes if rec.job_id[2:10] == nd.id[:8]), None)
        if creator is None or creator.idx == rec.node:
            return False
        return not any(
            r.status == "ok" and r.job_id == rec.job_id and r.node == creator.idx
            for r in self.idem_adds.get(rec.idem_key, ())
        )

    def _check_idem(self) -> None:
        """Invariant 7: an add on a node that knew the key never makes a new job: its reply
        is an id that existed (was answered, or travelled in a copy) before it started."""
        for key, recs in self.idem_adds.items():
            seen = dict(self.idem_ids.get(key, {}))
            for rec in recs:
                if rec.status == "ok" and rec.job_id is not None:
                    seen[rec.job_id] = min(seen.get(rec.job_id, rec.t_end), rec.t_end)
            for rec in recs:
                if rec.status != "ok" or not rec.knew_key or rec.job_id is None:
                    continue
                older = [i for i, t in seen.items() if t < rec.t_start]
                if older and seen[rec.job_id] >= rec.t_start:
                    raise self._violation(
                        "7 (one idempotency key, one id)",
                        f"key {key}: {rec.body!r} on n{rec.node} (which knew the key) at "
                        f"t={rec.t_start - T0_MS} got a new job {rec.job_id}; the key's "
                        f"job(s) before: {', '.join(sorted(older))}",
                        rec.job_id,
                    )

    def _check_beanstalk(self) -> None:
        """Invariant 8: every INSERTED beanstalk job was reserved somewhere by the end, or
        is still in some node's beanstalk core (buried stays buried)."""
        if not self.bputs:
            return
        present: dict[bytes, str] = {}
        for nd in self.nodes:
            if nd.nc is not None:
                for job in nd.nc.beanstalk.jobs.values():
                    present.setdefault(job.body, f"{nd.name}:{job.id}")
        for rec in self.bputs.values():
            if rec.status != "ok" or rec.body in self.bdelivered or rec.body in present:
                continue
            if self.cfg.fsync_lost and rec.disque_id and self._lost_everywhere(rec.disque_id):
                continue
            holders = self._holders_at_end(rec.disque_id) if rec.disque_id else "not replicated"
            raise self._violation(
                "8 (inserted beanstalk job not lost)",
                f"{rec.body!r} (INSERTED by n{rec.node}, beanstalk_replicate {rec.repl}, "
                f"t={rec.t_start - T0_MS}..{rec.t_end - T0_MS}, cluster id "
                f"{rec.disque_id or '-'}) was never reserved and no node has it; at the end: "
                f"{holders}",
                rec.disque_id or None,
            )

    def _lost_everywhere(self, job_id: str) -> bool:
        """fsync_lost: every node that logged the job lost a LOADJOB of it in a crash."""
        lost = self._lost_load.get(job_id)
        if not lost:
            return False
        loaders = {node for _, node, st in self._copies.get(job_id, ()) if st == HOLDS}
        return loaders <= lost

    def _dead_step(self, job_id: str) -> tuple[int, list[int]] | None:
        """The first step after which every node that ever held a copy (hindsight: including
        those that get one later) had its latest AOF record for the job be a DELJOB, and no
        copy was on the wire."""
        events = self._copies.get(job_id)
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
        for nd in self.nodes:
            j = nd.core.jobs.get(job_id) if nd.core is not None else None
            in_aof = any(
                (p.id if isinstance(p, JobData) else p) == job_id
                for _, p in to_core_records(nd.aof)
            )
            if j is not None or in_aof:
                st = STATE_NAMES[j.state] if j is not None else "-"
                parts.append(f"{nd.name}={st}{'(in AOF)' if in_aof else ''}")
        return ", ".join(parts) or "no node knows it"

    def _enrich(self, e: InvariantViolation) -> InvariantViolation:
        """Attach the readable part: config, the job's history, the last events."""
        lines = [
            f"config: {config_diff(self.cfg)}",
            f"replay: {replay_command(self.seed, self.cfg)}",
        ]
        if e.report:
            lines.append(e.report)
        if not self._tr:
            lines.append("(run with trace=True for the job's history)")
        else:
            keys: list[str] = []
            if e.job_id is not None:
                keys.append(e.job_id)
                body = self._body_of.get(e.job_id)
                if body is not None:
                    keys.append(repr(body))
            if keys:
                hist = [ln for ln in self.trace if "NEMESIS" in ln or any(k in ln for k in keys)]
                if len(hist) > 400:
                    hist = [*hist[:100], f"... {len(hist) - 400} lines ...", *hist[-300:]]
                lines.append(f"--- history of {' / '.join(keys)} (and nemesis) ---")
                lines.extend(hist)
            lines.append("--- last 40 events ---")
            lines.extend(self.trace[-40:])
        return InvariantViolation(e.seed, e.invariant, e.detail, "\n".join(lines), e.job_id)
