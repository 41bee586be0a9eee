"""The Disque core with a fake clock, wired by the in-memory mesh (no IO, no membership)."""

from __future__ import annotations

import random

import pytest

from disq.core.beanstalk.model import BURIED
from disq.core.disque.api import PENDING, AddOptions, DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACKED, ACTIVE, QUEUED, AwakeEntry
from disq.core.messages import DelJob, GotJob, IdemKeys, SetAck, WillQueue
from disq.core.timers import REBUILD_SLACK
from disq.persistence.cluster_records import REC_IDEMKEY, REC_KEYVOTE
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh


class Cluster(Mesh):
    """Disque cores addressed by node id (``cores``) or index (``core(i)``)."""

    def __init__(
        self,
        n: int,
        seed: int = 1,
        *,
        vote_keys: bool = True,
        core_class: type[DisqueCore] = DisqueCore,
    ) -> None:
        super().__init__(n, seed, core_class=core_class)
        self.cores = {nid: self.disque(k) for k, nid in enumerate(self.ids)}
        for core in self.cores.values():
            # False: keys bound by announcements alone (idempotency.py), without the vote
            # of keyvote.py that settles them on a cluster; tests of that layer.
            core.vote_keys = vote_keys

    def core(self, i: int) -> DisqueCore:
        return self.disque(i)


def test_sync_replication_then_queued_on_creator_only() -> None:
    c = Cluster(3)
    r = c.core(0).add_job(c.now, 1, "q", b"hello", AddOptions(timeout_ms=1000, repl=3))
    assert r is PENDING
    c.pump()
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and isinstance(job_id, str)
    states = [c.core(i).jobs[job_id].state for i in range(3)]
    assert states == [QUEUED, ACTIVE, ACTIVE]
    assert c.core(0).qlen("q") == 1
    # Not consumed, no partition: after several retries still exactly one queued copy.
    c.advance(5000)
    queued = [i for i in range(3) if c.core(i).qlen("q") == 1]
    assert len(queued) == 1


def test_norepl_when_not_enough_nodes() -> None:
    c = Cluster(2)
    with pytest.raises(DisqueError) as e:
        c.core(0).add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=100, repl=3))
    assert e.value.code == "NOREPL"


def test_sync_timeout_gives_norepl_and_cleans_up() -> None:
    c = Cluster(3)
    c.cut = {c.ids[1], c.ids[2]}
    assert c.core(0).add_job(c.now, 7, "q", b"x", AddOptions(timeout_ms=300, repl=3)) is PENDING
    c.advance(400)
    [(token, err)] = c.replies[c.ids[0]]
    assert token == 7 and isinstance(err, DisqueError) and err.code == "NOREPL"
    assert c.core(0).jobs == {}


def test_consumed_not_acked_is_requeued_and_acked_is_not() -> None:
    c = Cluster(3)
    c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=1))
    c.pump()
    got = c.core(0).get_job(c.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and len(got) == 1
    job_id = got[0].id
    c.advance(2000)
    assert sum(c.core(i).qlen("q") for i in range(3)) >= 1
    got2 = None
    for i in range(3):
        g = c.core(i).get_job(c.now, 3, ["q"], nohang=True)
        if isinstance(g, list):
            got2 = (i, g)
            break
    assert got2 is not None and got2[1][0].id == job_id
    assert c.core(got2[0]).acks.ack_job(c.now, [job_id]) == 1
    c.advance(10_000)
    assert all(job_id not in c.core(i).jobs for i in range(3))  # GC reached everyone
    assert all(c.core(i).qlen("q") == 0 for i in range(3))


def test_queueing_node_lost_job_requeued_elsewhere() -> None:
    c = Cluster(3)
    c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=1))
    c.pump()
    c.cut = {c.ids[0]}
    c.advance(3000)
    assert c.core(1).qlen("q") + c.core(2).qlen("q") >= 1


def test_dummy_ack_on_non_holder_reaches_holders() -> None:
    c = Cluster(4)
    c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=2, retry_s=1))
    c.pump()
    [(_, job_id)] = c.replies[c.ids[0]]
    holders = [i for i in range(4) if job_id in c.core(i).jobs]
    non = next(i for i in range(4) if i not in holders)
    assert c.core(non).acks.ack_job(c.now, [job_id]) == 0
    c.pump()
    for i in holders:
        assert job_id not in c.core(i).jobs or c.core(i).jobs[job_id].state == ACKED
    c.advance(10_000)
    assert all(job_id not in c.core(i).jobs for i in range(4))


def test_federation_blocked_consumer_gets_remote_job_within_a_second() -> None:
    c = Cluster(3)
    assert c.core(0).get_job(c.now, 9, ["q"], timeout_ms=0) is PENDING
    c.pump()
    c.advance(700)  # the first NEEDJOBS broadcast happened and found nothing
    c.core(1).add_job(c.now, 1, "q", b"far", AddOptions(timeout_ms=1000, repl=1))
    start = c.now
    c.advance(1000)
    served = [(t, r) for t, r in c.replies[c.ids[0]] if t == 9]
    assert served, "blocked consumer was not served"
    assert served[0][1][0].body == b"far"  # type: ignore[index]
    assert c.now - start <= 1000


def test_jobs_an_earlier_consumer_imported_reach_its_next_node_at_once() -> None:
    """A consumer's client moved from node 1 to node 2 while node 1 still held jobs it had
    imported for it. Disque's importer ignores NEEDJOBS for its import window, and node 2's
    broadcasts back off: the consumer waited 12.2 s here. Node 1 has no consumer waiting
    (its queue is not empty), so it gives them."""
    c = Cluster(3)
    for i in range(10):
        c.core(0).add_job(c.now, 1, "q", f"j{i}".encode(), AddOptions(timeout_ms=0, repl=1))
    for token in (101, 102):  # the consumer on node 1: jobs come from node 0
        c.core(1).get_job(c.now, token, ["q"], timeout_ms=0)
        c.pump()
        c.advance(200)
    c.core(0).get_job(c.now, 500, ["q"], nohang=True, count=10)  # node 0's own consumer
    assert c.core(0).qlen("q") == 0 and c.core(1).qlen("q") > 0
    assert c.core(1).queues["q"].import_rate(c.now) > 0  # node 1 is an importer
    assert c.core(2).get_job(c.now, 10, ["q"], timeout_ms=0) is PENDING
    c.pump()  # NEEDJOBS, YOURJOBS: no timer needed
    served = [r for t, r in c.replies[c.ids[2]] if t == 10]
    assert served and served[0][0].body.startswith(b"j")  # type: ignore[index]


def test_a_new_wait_asks_every_node_at_once_whatever_the_last_waits_backoff() -> None:
    """A consumer waited long on node 2 (its broadcasts backed off toward 30 s); node 1,
    which had a consumer of its own when node 2 asked, then got jobs nobody there takes. A
    consumer that starts waiting on node 2 again (a polling one, or a client moved there)
    gets them at once, not at the old wait's next broadcast."""
    c = Cluster(3)
    assert c.core(1).get_job(c.now, 1, ["q"], timeout_ms=40_000) is PENDING
    assert c.core(2).get_job(c.now, 2, ["q"], timeout_ms=40_000) is PENDING
    c.pump()
    c.advance(41_000)  # both waits time out; node 2's broadcasts backed off meanwhile
    assert (1, None) in c.replies[c.ids[1]] and (2, None) in c.replies[c.ids[2]]
    assert c.core(2).queues["q"].needjobs_bcast_attempt >= 4
    c.core(1).add_job(c.now, 3, "q", b"waiting", AddOptions(timeout_ms=0, repl=1))
    assert c.core(1).qlen("q") == 1  # node 2's interest was not kept (node 1 had a consumer)
    assert c.core(2).get_job(c.now, 4, ["q"], timeout_ms=0) is PENDING
    c.pump()  # NEEDJOBS, YOURJOBS: no timer needed
    served = [r for t, r in c.replies[c.ids[2]] if t == 4]
    assert served and served[0][0].body == b"waiting"  # type: ignore[index]


def test_a_willqueue_for_a_job_acked_here_is_answered_with_a_setack() -> None:
    """A copy the acker's GC never reached (two holders exported the job at different times,
    and the one that knew of the copy took the acker's DELJOB) is requeued by its RETRY: the
    nodes where the job is gone answer its WILLQUEUE with a SETACK, and it collects itself.
    The simulator's sweep found such a copy (seed 2685) once importers export too."""
    c = Cluster(3)
    job_id = c.core(0).add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=0, repl=1))
    assert isinstance(job_id, str)
    assert c.core(0).get_job(c.now, 2, ["q"], nohang=True)
    assert c.core(0).acks.ack_job(c.now, [job_id]) == 1
    c.pump()
    c.advance(1000)
    assert job_id not in c.core(0).jobs
    c.nodes[0].on_peer_messages(c.now, c.ids[2], [WillQueue(job_id)])
    sent = c.nodes[0].ready(c.now).messages.get(c.ids[2], [])
    assert SetAck(job_id, 0) in sent
    # Never for an id this node knows nothing of (a job it never held, or one moved away).
    c.nodes[0].advance()
    c.nodes[0].on_peer_messages(c.now, c.ids[2], [WillQueue("D-" + "1" * 38)])
    assert not c.nodes[0].ready(c.now).messages.get(c.ids[2])


def test_getjob_timeout_and_nohang() -> None:
    c = Cluster(1)
    assert c.core(0).get_job(c.now, 1, ["q"], nohang=True) is None
    assert c.core(0).get_job(c.now, 2, ["q"], timeout_ms=250) is PENDING
    c.advance(300)
    assert (2, None) in c.replies[c.ids[0]]


def test_getjob_of_several_queues_round_robin_or_in_order() -> None:
    """Disque takes one job per queue per pass; ``in_order`` empties the queues in the order
    given (priority sub-queues, highest first)."""
    c = Cluster(1)
    for name in ("hi", "lo"):
        for i in range(3):
            c.core(0).add_job(c.now, 1, name, f"{name}{i}".encode(), AddOptions(timeout_ms=0))
    got = c.core(0).get_job(c.now, 2, ["hi", "lo"], count=4)
    assert isinstance(got, list)
    assert [j.body for j in got] == [b"hi0", b"lo0", b"hi1", b"lo1"]
    got = c.core(0).get_job(c.now, 3, ["hi", "lo"], count=2, in_order=True)
    assert isinstance(got, list) and [j.body for j in got] == [b"hi2", b"lo2"]
    for i in range(3):
        c.core(0).add_job(c.now, 1, "hi", f"h{i}".encode(), AddOptions(timeout_ms=0))
        c.core(0).add_job(c.now, 1, "lo", f"l{i}".encode(), AddOptions(timeout_ms=0))
    got = c.core(0).get_job(c.now, 4, ["hi", "lo"], count=4, in_order=True)
    assert isinstance(got, list) and [j.body for j in got] == [b"h0", b"h1", b"h2", b"l0"]
    got = c.core(0).get_job(c.now, 5, ["hi", "lo"], count=4, in_order=True, nohang=True)
    assert isinstance(got, list) and [j.body for j in got] == [b"l1", b"l2"]


def test_blocked_in_order_getjob_is_woken_by_any_of_its_queues() -> None:
    c = Cluster(1)
    assert c.core(0).get_job(c.now, 7, ["hi", "lo"], count=5, in_order=True) is PENDING
    c.core(0).add_job(c.now, 1, "lo", b"low", AddOptions(timeout_ms=0))
    c.pump()
    served = [r for t, r in c.replies[c.ids[0]] if t == 7]
    assert served and [j.body for j in served[0]] == [b"low"]  # type: ignore[union-attr]


def test_single_node_fifo_and_ttl() -> None:
    c = Cluster(1)
    ids_ = [
        c.core(0).add_job(c.now, i, "q", str(i).encode(), AddOptions(timeout_ms=0))
        for i in range(100)
    ]
    got = c.core(0).get_job(c.now, 1000, ["q"], count=100)
    assert isinstance(got, list) and [j.id for j in got] == ids_
    c.core(0).add_job(c.now, 1, "t", b"x", AddOptions(timeout_ms=0, ttl_s=5))
    c.advance(6100, step=100)
    assert c.core(0).qlen("t") == 0 and len(c.core(0).jobs) == 100


def test_working_postpones_and_nack_requeues() -> None:
    c = Cluster(3)
    c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, retry_s=2))
    c.pump()
    got = c.core(0).get_job(c.now, 2, ["q"], nohang=True)
    assert isinstance(got, list)
    job_id = got[0].id
    for _ in range(3):
        c.advance(1500)
        assert c.core(0).working(c.now, job_id) == 2
    assert sum(c.core(i).qlen("q") for i in range(3)) == 0
    assert c.core(0).nack(c.now, [job_id]) == 1
    c.pump()
    assert c.core(0).qlen("q") == 1
    assert all(c.core(i).jobs[job_id].nacks == 1 for i in range(3))


def test_memory_levels_external_replication_then_oom() -> None:
    c = Cluster(3)
    core = c.core(0)
    core.memory.max_bytes = 20_000
    body = b"x" * 1000
    local_copies = 0
    external = None
    for k in range(40):
        try:
            r = core.add_job(c.now, k, "m", body, AddOptions(timeout_ms=1000, repl=2))
        except DisqueError as e:
            assert e.code == "OOM"
            break
        c.pump()
        job_id = next(v for t, v in c.replies[c.ids[0]] if t == k)
        assert isinstance(job_id, str), r
        if job_id in core.jobs:
            local_copies += 1
        else:
            external = job_id  # level 1: the copies live on the two other nodes only
            break
        core.update_memory(c.now)
    assert local_copies > 0 and external is not None
    holders = [i for i in (1, 2) if external in c.core(i).jobs]
    assert holders == [1, 2]
    # One of them was told to queue it (ENQUEUE), so a consumer can get it.
    assert c.core(1).qlen("m") + c.core(2).qlen("m") >= 1
    # Full: ADDJOB is refused with Disque's OOM error.
    core.memory.max_bytes = core.memory.used_bytes
    core.update_memory(c.now)
    with pytest.raises(DisqueError) as e:
        core.add_job(c.now, 999, "m", body, AddOptions(timeout_ms=1000, repl=2))
    assert e.value.code == "OOM"


def test_memory_level_two_evicts_acked_jobs_only() -> None:
    c = Cluster(1)
    core = c.core(0)
    ids_ = [core.add_job(c.now, k, "e", b"y" * 500, AddOptions(timeout_ms=0)) for k in range(10)]
    got = core.get_job(c.now, 100, ["e"], count=5)
    assert isinstance(got, list)
    # On a single node an ack deletes at once (nothing to GC): use a peer-less dummy state.
    for j in got:
        j.state = 3  # ACKED, as if GC were still waiting for a peer
    before = len(core.jobs)
    limit = core.memory.used_bytes
    core.memory.max_bytes = limit  # 100%: evict acked jobs until below 95%
    assert core.update_memory(c.now) in (1, 2)
    assert len(core.jobs) < before and core.memory.used_bytes <= limit * 95 // 100
    assert all(i in core.jobs for i in ids_[5:])  # unacked jobs are never evicted
    core.memory.max_bytes = limit * 4 // 10  # more than every acked job can free
    assert core.update_memory(c.now) == 3
    assert sorted(core.jobs) == sorted(ids_[5:])


def test_beanstalk_put_replicated_owner_answers_willqueue_no_takeover() -> None:
    c = Cluster(3)
    owner = c.core(0)
    did, pending = owner.bridge.add(
        c.now, 5, "tube", b"bjob", priority=10, ttr_s=1, delay_s=0, repl=2, timeout_ms=1000, bid=7
    )
    assert pending
    c.pump()
    assert (5, did) in c.replies[c.ids[0]]
    holders = [i for i in (1, 2) if did in c.core(i).jobs]
    assert len(holders) == 1
    # The owner is alive: its answers to WILLQUEUE keep the holder from taking over.
    c.advance(30_000, step=50)
    assert all(not c.core(i).bridge.takeovers for i in range(3))
    assert c.core(holders[0]).qlen("tube") == 0  # never in a Disque queue


def _beanstalk_job(c: Cluster, i: int, body: bytes) -> int:
    """A live job in node ``i``'s beanstalk core: what a replicated put's record links to."""
    b = c.beanstalk(i)
    return b.put(b.open_session(), 10, 0, 1000, body, c.now)


def test_beanstalk_takeover_keeps_buried_state_and_delete_reaches_holders() -> None:
    c = Cluster(3)
    owner = c.core(0)
    bid = _beanstalk_job(c, 0, b"bjob")
    did, _ = owner.bridge.add(
        c.now, 5, "tube", b"bjob", priority=10, ttr_s=1, delay_s=0, repl=3, timeout_ms=1000, bid=bid
    )
    c.pump()
    owner.bridge.update(c.now, did, 3, 99)  # buried with a new priority
    c.pump()
    assert all(c.core(i).jobs[did].bstate == 3 for i in (1, 2))
    c.cut = {c.ids[0]}  # the owner is lost
    c.advance(20_000, step=50)
    # The node core hands a takeover to the holder's beanstalk core: a new local job.
    took = [
        (i, j)
        for i in (1, 2)
        for j in c.beanstalk(i).jobs.values()
        if j.replica is not None and j.replica.disque_id == did
    ]
    assert took, "no holder took the job over"
    new_owner, job = took[0]
    assert (job.state, job.pri, job.body, job.tube.name) == (BURIED, 99, b"bjob", "tube")
    assert c.core(new_owner).jobs[did].bid == job.id  # adopted: the record links to it
    c.cut = set()
    # The new owner deletes it: every copy goes, the old owner's beanstalk job is dropped.
    c.core(new_owner).bridge.deleted(c.now, did)
    c.pump()
    assert all(did not in c.core(i).jobs for i in range(3))
    assert bid not in c.beanstalk(0).jobs


def test_beanstalk_put_times_out_without_copies_and_drops_the_engine_job() -> None:
    c = Cluster(3)
    c.cut = {c.ids[1], c.ids[2]}
    owner = c.core(0)
    bid = _beanstalk_job(c, 0, b"x")
    did, pending = owner.bridge.add(
        c.now, 5, "tube", b"x", priority=1, ttr_s=1, delay_s=0, repl=2, timeout_ms=300, bid=bid
    )
    assert pending
    c.advance(400)
    [(token, err)] = c.replies[c.ids[0]]
    assert token == 5 and isinstance(err, DisqueError) and err.code == "NOREPL"
    assert bid not in c.beanstalk(0).jobs and did not in owner.jobs


def test_sync_replication_replaces_a_target_that_became_unreachable() -> None:
    c = Cluster(4)
    creator = c.core(0)
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=5000, repl=3)) is PENDING
    first = {n for n in creator.jobs[next(iter(creator.jobs))].delivered if n != c.ids[0]}
    victim = sorted(first)[0]
    c.cut = {victim}  # its copy never arrives
    c.views[c.ids[0]].down = {victim}  # and failure detection says so
    c.pump()
    assert not c.replies[c.ids[0]]
    c.advance(200)
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and isinstance(job_id, str)
    holders = {i for i in range(4) if job_id in c.core(i).jobs}
    assert len(holders) == 3 and c.ids.index(victim) not in holders


def test_sync_replication_asks_a_silent_reachable_target_again() -> None:
    c = Cluster(3)
    creator = c.core(0)
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=10_000, repl=3)) is PENDING
    creator.outbox.clear()  # the first REPLJOBs are lost (a link broke and came back)
    c.advance(240)
    assert not c.replies[c.ids[0]]  # no new node to add, and not yet time to ask again
    c.advance(20)  # asked again at 250 ms
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and all(job_id in c.core(i).jobs for i in range(3))


def test_a_majority_add_whose_target_died_takes_the_third_node_at_its_first_resend() -> None:
    # The integrations' default REPLICATE on 3 nodes is 2: the one target chosen is killed
    # (silent, not yet known dead); the first resend, at 250 ms, adds a copy on the third
    # node, so the add is answered within a fraction of its 5 s timeout.
    c = Cluster(3)
    creator = c.core(0)
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=5000, repl=2)) is PENDING
    job_id = next(iter(creator.jobs))
    [target] = [n for n in creator.jobs[job_id].delivered if n != c.ids[0]]
    c.cut = {target}
    c.advance(240)
    assert not c.replies[c.ids[0]]
    c.advance(20)
    [(token, answer)] = c.replies[c.ids[0]]
    assert token == 1 and answer == job_id
    [third] = [n for n in c.ids if n not in (c.ids[0], target)]
    assert job_id in c.core(c.ids.index(third)).jobs


def test_sync_add_whose_target_is_down_completes_when_it_comes_back() -> None:
    # Disque's reachability: the target is down but the failure detector has not given up on
    # it yet (a restart, a link not up yet), so it is chosen, and REPLJOB is sent again until
    # it answers or the ms-timeout comes.
    c = Cluster(3)
    creator = c.core(0)
    c.cut = {c.ids[2]}
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=5000, repl=3)) is PENDING
    c.advance(3000)
    assert not c.replies[c.ids[0]]
    c.cut = set()
    c.advance(1000)  # the next resend (every second by now) reaches it
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and isinstance(job_id, str)
    assert all(c.core(i).jobs[job_id].state in (QUEUED, ACTIVE) for i in range(3))


def test_sync_add_asks_a_target_again_as_soon_as_its_link_is_up() -> None:
    # Frames to a link that is down are dropped; the link coming up (the IO layer's
    # peer_link_up) sends the waiting add's REPLJOB at once instead of at the next resend.
    c = Cluster(3)
    creator = c.core(0)
    c.cut = {c.ids[2]}
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=8000, repl=3)) is PENDING
    c.advance(2100)  # resent at 250, 500, 1000 and 2000 ms; the next one is at 3000 ms
    assert not c.replies[c.ids[0]]
    c.cut = set()
    creator.blocked.peer_link_up(c.now, c.ids[1])  # already has its copy: nothing to ask
    creator.blocked.peer_link_up(c.now, c.ids[2])
    c.pump()  # no time passes
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and all(job_id in c.core(i).jobs for i in range(3))


def test_sync_add_keeps_asking_a_target_declared_dead_until_it_is_back() -> None:
    c = Cluster(3)
    creator = c.core(0)
    c.cut = {c.ids[2]}
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=8000, repl=3)) is PENDING
    c.advance(1000)
    c.views[c.ids[0]].down = {c.ids[2]}  # PFAIL: no other node to replace it with
    c.advance(3000)
    assert not c.replies[c.ids[0]]
    c.cut = set()
    c.views[c.ids[0]].down = set()  # back, and reachable again
    c.advance(1000)
    [(token, job_id)] = c.replies[c.ids[0]]
    assert token == 1 and all(job_id in c.core(i).jobs for i in range(3))


def test_sync_add_takes_a_node_that_comes_back_in_place_of_a_lost_target() -> None:
    c = Cluster(4)
    creator = c.core(0)
    back = c.ids[3]
    c.cut = {back}
    c.views[c.ids[0]].down = {back}  # down at add time: not a target
    assert creator.add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=8000, repl=3)) is PENDING
    job_id = next(iter(creator.jobs))
    assert back not in creator.jobs[job_id].delivered
    creator.outbox.clear()  # the first copies are lost...
    c.cut = {back, c.ids[1], c.ids[2]}
    c.views[c.ids[0]].down = {back, c.ids[1]}  # ...and one target is then given up on
    c.advance(2000)
    assert not c.replies[c.ids[0]]
    c.cut = {c.ids[1]}
    c.views[c.ids[0]].down = {c.ids[1]}  # the other node comes back
    c.advance(1000)
    assert c.replies[c.ids[0]] == [(1, job_id)]
    holders = {i for i in range(4) if job_id in c.core(i).jobs}
    assert holders == {0, 2, 3}


def test_norepl_up_front_when_too_few_peers_are_reachable() -> None:
    c = Cluster(3)
    c.views[c.ids[0]].down = {c.ids[2]}
    with pytest.raises(DisqueError) as e:
        c.core(0).add_job(c.now, 1, "q", b"x", AddOptions(timeout_ms=1000, repl=3))
    assert e.value.code == "NOREPL" and "reachable" in e.value.message
    assert c.core(0).add_job(c.now, 2, "q", b"x", AddOptions(timeout_ms=1000, repl=2)) is PENDING


def test_queue_count_is_bounded_and_idle_queues_are_reclaimed_first() -> None:
    c = Cluster(1)
    core = c.core(0)
    core.max_queues = 3
    for name in ("a", "b", "c"):
        core.add_job(c.now, 1, name, b"x", AddOptions(timeout_ms=0))
    with pytest.raises(DisqueError) as e:
        core.add_job(c.now, 2, "d", b"x", AddOptions(timeout_ms=0))
    assert (e.value.code, e.value.message) == ("ERR", "too many queues (the limit is 3)")
    with pytest.raises(DisqueError):
        core.get_job(c.now, 3, ["e"], timeout_ms=100)
    assert sorted(core.queues) == ["a", "b", "c"] and len(core.jobs) == 3
    got = core.get_job(c.now, 4, ["c"], nohang=True)  # "c" is now empty and idle
    assert isinstance(got, list)
    assert core.add_job(c.now, 5, "d", b"x", AddOptions(timeout_ms=0))  # reclaims "c"
    assert sorted(core.queues) == ["a", "b", "d"]


# ------------------------------------------------------------------ idempotency keys
def test_idempotency_key_answers_the_first_id_and_adds_nothing() -> None:
    c = Cluster(3)
    core = c.core(0)
    assert (
        core.add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=3, idem_key="k1"))
        is PENDING
    )
    # A retry while the first add still waits for its copies waits with it.
    assert (
        core.add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=1000, repl=3, idem_key="k1"))
        is PENDING
    )
    c.pump()
    replies = dict(c.replies[c.ids[0]])
    assert replies[1] == replies[2] and isinstance(replies[1], str)
    first = replies[1]
    # After: answered at once, on the creator and on any node holding a copy.
    assert (
        core.add_job(c.now, 3, "q", b"a", AddOptions(timeout_ms=1000, repl=3, idem_key="k1"))
        == first
    )
    assert (
        c.core(1).add_job(c.now, 4, "q", b"x", AddOptions(timeout_ms=0, repl=1, idem_key="k1"))
        == first
    )
    assert sum(c.core(i).qlen("q") for i in range(3)) == 1
    assert len(c.core(1).jobs) == 1
    # The key is per queue, and another key is another job. A keyed REPLICATE 1 add is
    # answered once every live peer acknowledged its key (a retry elsewhere finds it).
    assert (
        core.add_job(c.now, 5, "q2", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k1"))
        is PENDING
    )
    assert (
        core.add_job(c.now, 6, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k2"))
        is PENDING
    )
    c.pump()
    replies = dict(c.replies[c.ids[0]])
    assert isinstance(replies[5], str) and isinstance(replies[6], str)
    assert len({first, replies[5], replies[6]}) == 3
    retry = c.core(2).add_job(c.now, 7, "q2", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k1"))
    assert retry == replies[5]


def test_idempotency_key_outlives_the_ack_until_the_window_ends() -> None:
    c = Cluster(1)
    core = c.core(0)
    core.keys.window_ms = 10_000
    first = core.add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
    assert isinstance(first, str)
    assert core.acks.ack_job(c.now, [first]) == 1
    c.advance(2000)
    assert first not in core.jobs
    assert (
        core.add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k")) == first
    )
    c.advance(9000)
    again = core.add_job(c.now, 3, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
    assert isinstance(again, str) and again != first


def test_failed_add_forgets_its_key_and_a_cancelled_first_add_passes_to_the_follower() -> None:
    c = Cluster(3)
    core = c.core(0)
    c.cut = {c.ids[1], c.ids[2]}  # no copies can be confirmed
    assert (
        core.add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=500, repl=3, idem_key="k"))
        is PENDING
    )
    c.advance(600)
    [(token, err)] = c.replies[c.ids[0]]
    assert token == 1 and isinstance(err, DisqueError) and err.code == "NOREPL"
    c.replies[c.ids[0]].clear()
    # NOREPL: the retry is a new add.
    assert (
        core.add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=5000, repl=3, idem_key="k"))
        is PENDING
    )
    assert (
        core.add_job(c.now, 3, "q", b"a", AddOptions(timeout_ms=5000, repl=3, idem_key="k"))
        is PENDING
    )
    core.cancel(2)  # the first client went away; the second still waits for the job
    c.cut = set()
    c.advance(2000)
    replies = dict(c.replies[c.ids[0]])
    assert 2 not in replies and isinstance(replies[3], str)
    assert sum(c.core(i).qlen("q") for i in range(3)) == 1


def test_idempotency_key_length_is_bounded() -> None:
    c = Cluster(1)
    with pytest.raises(DisqueError) as info:
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k" * 257))
    assert info.value.code == "ERR"


def test_every_node_learns_a_key_once_the_add_is_done_not_before() -> None:
    c = Cluster(4)
    core = c.core(0)
    assert (
        core.add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=2, idem_key="k"))
        is PENDING
    )
    # Before the copies exist nobody else knows the key (the add may still fail).
    assert all(("q", "k") not in c.core(i).keys.taken for i in (1, 2, 3))
    c.pump()
    [(_, first)] = c.replies[c.ids[0]]
    holders = {i for i in range(4) if first in c.core(i).jobs}
    assert len(holders) == 2
    outsider = min({1, 2, 3} - holders)  # a node that never held a copy
    r = c.core(outsider).add_job(
        c.now, 2, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k")
    )
    assert r == first
    assert first not in c.core(outsider).jobs  # answered, and nothing added there


# ------------------------------------------------------------------ keys delivered reliably
def _drop_idem_to(c: Cluster, dest: int, state: dict[str, bool]) -> None:
    """While ``state["on"]``: every IDEMKEYS to node ``dest`` is lost."""
    c.drop = lambda _s, d, msg: state["on"] and d == dest and isinstance(msg, IdemKeys)


def test_a_keyed_reply_waits_until_every_peer_acknowledged_the_key() -> None:
    c = Cluster(3, vote_keys=False)
    lossy = {"on": True}
    _drop_idem_to(c, 2, lossy)
    assert (
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=5000, repl=2, idem_key="k"))
        is PENDING
    )
    c.advance(1000)  # the copies exist, but node 2 has not got the key: resent, lost
    assert c.replies[c.ids[0]] == []
    assert c.core(0).stats["idem_resent"] >= 2
    lossy["on"] = False
    c.advance(2000)  # the next resend gets through and is acknowledged
    [(token, first)] = c.replies[c.ids[0]]
    assert token == 1 and isinstance(first, str)
    assert (
        c.core(2).add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
        == first
    )
    assert c.core(0).keys.unacked == {}  # nothing left to resend


def test_a_keyed_reply_is_released_at_its_timeout_and_the_key_still_arrives() -> None:
    c = Cluster(3)
    lossy = {"on": True}
    _drop_idem_to(c, 2, lossy)
    assert (
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=700, repl=2, idem_key="k"))
        is PENDING
    )
    c.advance(800)
    [(_, first)] = c.replies[c.ids[0]]
    assert isinstance(first, str)  # the add is done: its id, at its timeout
    lossy["on"] = False
    c.advance(6000)  # resent until acknowledged (backoff up to 5 s)
    assert (
        c.core(2).add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
        == first
    )


def test_learned_keys_are_persisted_and_outlive_the_job_restarts_and_rewrites() -> None:
    c = Cluster(3)
    assert (
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=2, idem_key="k"))
        is PENDING
    )
    c.pump()
    [(_, first)] = c.replies[c.ids[0]]
    assert isinstance(first, str)
    learner = next(i for i in (1, 2) if first not in c.core(i).jobs)
    nid = c.ids[learner]
    frames = list(iter_frames(b"".join(c.aof[nid])))
    # Its votes (PROMISE, ACCEPTED), then the decided key, persisted before the ack left.
    assert [rtype for rtype, _ in frames] == [REC_KEYVOTE, REC_KEYVOTE, REC_IDEMKEY]
    # The job is consumed and acked everywhere: its keys stay in their window.
    got = c.core(0).get_job(c.now, 2, ["q"], nohang=True)
    assert isinstance(got, list) and c.core(0).acks.ack_job(c.now, [first]) == 1
    c.advance(10_000)
    assert all(first not in c.core(i).jobs for i in range(3))
    for i in range(3):
        frames = list(iter_frames(b"".join(c.aof[c.ids[i]])))
        again = DisqueCore(c.views[c.ids[i]], random.Random(5), c.now)
        again.restore(c.now, frames)
        assert (
            again.add_job(c.now, 3, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
            == first
        )
        # A rewritten AOF keeps the key too, though the job is gone.
        snap = list(iter_frames(b"".join(c.core(i).aof.snapshot_records(c.now))))
        third = DisqueCore(c.views[c.ids[i]], random.Random(6), c.now)
        third.restore(c.now, snap)
        assert (
            third.add_job(c.now, 4, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
            == first
        )


def test_a_restarted_node_announces_its_keys_again() -> None:
    c = Cluster(3)
    lossy = {"on": True}
    _drop_idem_to(c, 2, lossy)
    assert (
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=300, repl=2, idem_key="k"))
        is PENDING
    )
    c.advance(400)
    [(_, first)] = c.replies[c.ids[0]]
    # Node 0 restarts from its AOF before node 2 ever got the key.
    frames = list(iter_frames(b"".join(c.aof[c.ids[0]])))
    fresh = DisqueCore(c.views[c.ids[0]], random.Random(9), c.now)
    fresh.restore(c.now, frames)
    cluster = c.nodes[0].cluster_cores
    assert cluster is not None
    cluster.replace_disque(fresh)
    lossy["on"] = False
    c.advance(1000)
    assert (
        c.core(2).add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
        == first
    )


# ------------------------------------------------------------------ the deljob race, closed
def _unfinished_keyed_add(c: Cluster) -> str:
    """Node 0 adds with key "k", REPLICATE 3: its copies reach nodes 1 and 2, but no GOTJOB
    comes back while ``gotjob_lost`` is set, so the add is not done."""
    assert (
        c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=500, repl=3, idem_key="k"))
        is PENDING
    )
    c.pump()
    [job_id] = c.core(1).jobs
    assert job_id in c.core(2).jobs
    return job_id


def test_a_retry_on_a_holder_of_a_failed_adds_copy_adds_the_job_again() -> None:
    c = Cluster(3, vote_keys=False)
    c.drop = lambda _s, _d, msg: isinstance(msg, GotJob | DelJob)  # DELJOB lost too
    dead = _unfinished_keyed_add(c)
    # The client gives up and retries on node 1, which holds the copy: held, not answered
    # with an id whose add may still fail.
    assert (
        c.core(1).add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=3000, repl=3, idem_key="k"))
        is PENDING
    )
    c.advance(600)  # node 0's add times out: NOREPL; its failure reaches the holders
    [(_, err)] = c.replies[c.ids[0]]
    assert isinstance(err, DisqueError) and err.code == "NOREPL"
    c.drop = None
    c.advance(1000)
    [(token, new)] = c.replies[c.ids[1]]
    assert token == 2 and isinstance(new, str) and new != dead
    assert all(dead not in c.core(i).jobs for i in range(3))
    assert sum(c.core(i).qlen("q") for i in range(3)) == 1


def test_a_retry_on_a_holder_answers_the_first_id_once_that_add_is_done() -> None:
    # The announcement layer's hold (with the vote, the retry adds and votes: both clients
    # get the one job the vote binds, tests/unit/test_keyvote.py).
    c = Cluster(3, vote_keys=False)
    c.drop = lambda _s, _d, msg: isinstance(msg, GotJob)
    first = _unfinished_keyed_add(c)
    assert (
        c.core(2).add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=3000, repl=3, idem_key="k"))
        is PENDING
    )
    c.drop = None
    c.advance(400)  # the copies are asked again and confirmed: the add is done
    assert dict(c.replies[c.ids[0]])[1] == first
    assert c.replies[c.ids[2]] == [(2, first)]
    assert sum(c.core(i).qlen("q") for i in range(3)) == 1


def test_an_acked_jobs_gc_attempts_come_due_beside_other_jobs_timers() -> None:
    # Acked jobs' GC attempts have their own timer heap (core.py _awake_acked); with the
    # first SETACKs lost, only that heap's attempt can finish the GC, while the jobs of the
    # other heap keep their own timers.
    c = Cluster(3)
    for token in (1, 2):
        c.core(0).add_job(c.now, token, "q", b"x", AddOptions(timeout_ms=1000, repl=3, retry_s=60))
    c.pump()
    job_ids = [job_id for _, job_id in c.replies[c.ids[0]]]
    got = c.core(0).get_job(c.now, 3, ["q"], nohang=True)
    assert isinstance(got, list) and len(got) == 1
    acked = got[0].id
    c.cut = {c.ids[1], c.ids[2]}
    assert c.core(0).acks.ack_job(c.now, [acked]) == 1
    c.pump()
    assert all(c.core(i).jobs[acked].state != ACKED for i in (1, 2))  # they never heard
    c.cut = set()
    # A node ticks only at its next deadline (as the mesh does): that must count the GC
    # attempt (an acked job's qtime_ms), which then runs on time, not at a later timer.
    gc_at = c.core(0).jobs[acked].qtime_ms
    c.advance(gc_at - c.now, step=1)  # due once passed (disq/core/timers.py)
    assert all(c.core(i).jobs[acked].state != ACKED for i in (1, 2))
    c.advance(1, step=1)
    assert all(acked not in c.core(i).jobs for i in range(3))
    c.advance(3000)
    (other,) = [j for j in job_ids if j != acked]
    assert c.core(0).jobs[other].state == QUEUED and c.core(0).qlen("q") == 1


_SCANNED: list[object] = []


class _ScanCountingCore(DisqueCore):
    """A mutant that records every heap entry a compaction scans (a subclass, not a patched
    method: the compiled core's methods cannot be replaced on an instance)."""

    def _awake_live(self, entry: AwakeEntry) -> bool:
        _SCANNED.append(entry)
        return super()._awake_live(entry)


def test_a_timer_heap_is_compacted_only_when_more_than_half_of_it_is_stale() -> None:
    c = Cluster(1, core_class=_ScanCountingCore)
    core = c.core(0)
    scanned = _SCANNED
    scanned.clear()
    job_ids = [
        core.add_job(c.now, k, "q", b"x", AddOptions(timeout_ms=0, repl=1, retry_s=60))
        for k in range(20_000)
    ]
    # A heap that grows with its jobs is all live: never scanned (it used to be, at every
    # doubling).
    assert scanned == [] and len(core._awake) == 20_000
    # Postponing one job again and again leaves a stale entry each time: those are dropped
    # once they outnumber the jobs, so the heap stays bounded.
    for _ in range(50_000):
        core.working(c.now, job_ids[0])
        assert len(core._awake) <= 2 * len(core.jobs) + REBUILD_SLACK + 1
    assert scanned
    # And the timers still work: the postponed job (dequeued by WORKING) is requeued.
    assert core.qlen("q") == 19_999
    c.advance(70_000, step=1000)
    assert core.qlen("q") == 20_000
