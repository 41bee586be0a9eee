"""A peer confirmed dead: the survivors requeue the jobs it had queued within a second or
two, not at their RETRY (disq/core/disque/dead_peers.py). Node cores on the in-memory mesh
with a fake clock; membership's verdicts reach them as Membership reports them (its
``events``), through the node core."""

from __future__ import annotations

import random
from typing import Any

from disq.core.disque.api import PENDING, AddOptions
from disq.core.disque.core import DisqueCore
from disq.core.disque.dead_peers import (
    DEAD_REQUEUE_DELAY_MS,
    DEAD_REQUEUE_JITTER_MS,
    DEAD_SWEEP_BATCH,
)
from disq.core.disque.job import ACTIVE, QUEUED
from disq.core.membership import Membership
from disq.core.messages import ALIVE, DEAD, SUSPECT, JobData, Member, ReplJob
from disq.testing.mesh import Mesh

RETRY_S = 120
# The latest a survivor may queue a dead peer's job: its delay, its jitter, and one step of
# the mesh's clock (the mesh ticks every 10 ms).
SOON_MS = DEAD_REQUEUE_DELAY_MS + DEAD_REQUEUE_JITTER_MS + 10


def _verdicts(node_id: str) -> Membership:
    """A real Membership (the compiled node core takes no other) that knows no peer, so it
    probes nobody: the test speaks for its failure detector by appending to ``events``
    ((node id, state), what Membership reports to the node core)."""
    me = Member(node_id, "127.0.0.1", 7710, 7711, 0, ALIVE)
    return Membership(me, random.Random(0), 0)


class Cluster(Mesh):
    def __init__(self, n: int, seed: int = 1) -> None:
        super().__init__(n, seed)
        self.verdicts = [_verdicts(nid) for nid in self.ids]
        for node, v in zip(self.nodes, self.verdicts, strict=True):
            assert node.cluster_cores is not None
            node.cluster_cores.membership = v

    def core(self, i: int) -> DisqueCore:
        return self.disque(i)

    def kill(self, i: int, state: int = DEAD) -> None:
        """Node ``i`` stops answering, and every other node's membership reports ``state``
        for it (DEAD: the failure detector gave up on it, SUSPECT: one missed probe)."""
        nid = self.ids[i]
        self.cut.add(nid)
        for k, v in enumerate(self.verdicts):
            if k != i:
                v.events.append((nid, state))
                if state == DEAD:
                    self.views[self.ids[k]].down.add(nid)
        self.pump()

    def add(self, i: int, body: bytes = b"job", **kw: Any) -> str:
        args: dict[str, Any] = {"timeout_ms": 1000, "repl": 3, "retry_s": RETRY_S}
        args.update(kw)
        token = self.nodes[i].new_token()
        r = self.core(i).add_job(self.now, token, "q", body, AddOptions(**args))
        if r is PENDING:
            self.pump()
            [r] = [x for t, x in self.replies[self.ids[i]] if t == token]
        assert isinstance(r, str)
        return r

    def queued_on(self, job_id: str) -> list[int]:
        out = []
        for i in range(len(self.nodes)):
            if self.ids[i] in self.cut:
                continue
            j = self.core(i).jobs.get(job_id)
            if j is not None and j.state == QUEUED:
                out.append(i)
        return out


def test_a_dead_nodes_queued_job_is_queued_by_one_survivor_within_the_delay() -> None:
    c = Cluster(3)
    job_id = c.add(0)
    assert c.queued_on(job_id) == [0]
    c.kill(0)
    c.advance(SOON_MS)
    [queued] = c.queued_on(job_id)
    other = 3 - queued
    assert c.core(other).jobs[job_id].state == ACTIVE
    assert c.core(queued).stats["jobs_requeue_advanced"] == 1
    # The other copy stood down on the QUEUED: still one queued copy long after.
    c.advance(20_000)
    assert c.queued_on(job_id) == [queued]
    got = c.core(queued).get_job(c.now, 99, ["q"], nohang=True)
    assert isinstance(got, list) and got[0].id == job_id


def test_many_jobs_every_one_queued_once_and_the_sweep_is_bounded_per_tick() -> None:
    c = Cluster(3)
    n = DEAD_SWEEP_BATCH + 500
    ids = [c.add(0, f"j{k}".encode()) for k in range(n)]
    c.kill(0)
    # One tick looks at one batch of the job ids, not all of them.
    survivors = [c.core(1), c.core(2)]
    for core in survivors:
        core.tick(c.now)
        assert core.stats["jobs_requeue_advanced"] == DEAD_SWEEP_BATCH
    c.advance(SOON_MS)
    assert all(core.stats["jobs_requeue_advanced"] == n for core in survivors)
    assert all(len(c.queued_on(job_id)) == 1 for job_id in ids)


def test_a_job_with_retry_zero_is_never_requeued() -> None:
    c = Cluster(3)
    dead = c.ids[0]
    # An at-most-once job's copy (a peer holding it, e.g. moved by federation).
    data = JobData("D-0101-x-0", "q", b"once", 2, 1, 0, 0, 3600, nodes_delivered=[dead])
    c.nodes[1].on_peer_messages(c.now, dead, [ReplJob.of(data)])
    c.pump()
    assert c.core(1).jobs[data.id].state == ACTIVE
    c.kill(0)
    c.advance(3 * SOON_MS)
    assert c.core(1).jobs[data.id].state == ACTIVE
    assert c.core(1).stats["jobs_requeue_advanced"] == 0


def test_jobs_of_live_nodes_are_untouched_in_a_queue_or_in_a_workers_hands() -> None:
    c = Cluster(4)
    # Queued at node 1, copies on 2 and the node that dies (3): node 1 has it queued.
    queued = c.add(1, b"queued")
    # Delivered by node 1 to a worker still on it, copies at 0 and 3: node 0 must not
    # requeue it because node 3 died (it would run twice, far before its RETRY).
    working = c.add(1, b"working")
    got = c.core(1).get_job(c.now, 50, ["q"], nohang=True, count=2)
    assert isinstance(got, list) and {j.id for j in got} == {queued, working}
    c.core(1).nack(c.now, [queued])  # back in node 1's queue
    c.pump()
    # All holders alive: created on 2, held by 2 and 1 only (REPLICATE 2 on 4 nodes: pick
    # one whose copies avoid node 3).
    alive = next(
        jid
        for jid in (c.add(2, b"alive", repl=2) for _ in range(20))
        if c.ids[3] not in c.core(2).jobs[jid].delivered
    )
    before = {i: {jid: j.qtime_ms for jid, j in c.core(i).jobs.items()} for i in range(3)}
    c.kill(3)
    c.advance(3 * SOON_MS)
    for i in range(3):
        assert c.core(i).stats["jobs_requeue_advanced"] == 0
        for jid, q in before[i].items():
            if jid in (working, alive) and i != 1:
                assert c.core(i).jobs[jid].qtime_ms == q
    assert c.queued_on(queued) == [1]
    assert c.queued_on(working) == []
    assert c.core(1).jobs[working].state == ACTIVE


def test_a_suspected_node_changes_nothing_and_one_back_alive_stops_the_sweep() -> None:
    c = Cluster(3)
    job_id = c.add(0)
    qtimes = [c.core(i).jobs[job_id].qtime_ms for i in (1, 2)]
    c.kill(0, SUSPECT)
    c.advance(3 * SOON_MS)
    assert [c.core(i).jobs[job_id].qtime_ms for i in (1, 2)] == qtimes
    assert c.queued_on(job_id) == []  # node 0 (cut off) still has it queued
    # Declared dead, then heard from again before the sweep ran: nothing moves either.
    for i in (1, 2):
        c.verdicts[i].events += [(c.ids[0], DEAD), (c.ids[0], ALIVE)]
    c.advance(3 * SOON_MS)
    assert [c.core(i).jobs[job_id].qtime_ms for i in (1, 2)] == qtimes
    assert all(c.core(i).stats["jobs_requeue_advanced"] == 0 for i in (1, 2))


def test_a_delayed_job_is_not_queued_before_its_delay_ends() -> None:
    c = Cluster(3)
    job_id = c.add(0, delay_s=10)
    start = c.now
    c.advance(1000)
    c.kill(0)
    c.advance(10_000 - (c.now - start) - 10)
    assert c.queued_on(job_id) == []
    c.advance(SOON_MS)
    assert len(c.queued_on(job_id)) == 1


def test_a_job_given_away_by_federation_is_requeued_soon_when_its_importer_dies() -> None:
    c = Cluster(3)
    job_id = c.add(0, repl=2)
    holders = {i for i in range(3) if job_id in c.core(i).jobs}
    [far] = {0, 1, 2} - holders
    # A consumer blocked on the node without a copy: NEEDJOBS, node 0 gives the job away
    # (YOURJOBS) and the consumer there gets it.
    assert c.core(far).get_job(c.now, 77, ["q"], timeout_ms=0) is PENDING
    c.advance(100)
    [(token, got)] = c.replies[c.ids[far]]
    assert token == 77 and isinstance(got, list) and got[0].id == job_id
    assert c.core(0).jobs[job_id].state == ACTIVE
    c.kill(far)  # with the job in its consumer's hands
    c.advance(SOON_MS)
    assert c.queued_on(job_id) == [0]
    assert c.core(0).stats["jobs_requeue_advanced"] == 1
