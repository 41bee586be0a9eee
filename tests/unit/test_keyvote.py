"""The vote that binds an idempotency key to one job (disq/core/disque/keyvote.py), on the
in-memory mesh with a fake clock: deterministic, no sleeps."""

from __future__ import annotations

import random

import pytest

from disq.core.disque.api import PENDING, AddOptions, DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACTIVE, QUEUED
from disq.core.messages import (
    KV_ACCEPT,
    KV_ACCEPTED,
    KV_PREPARE,
    DelJob,
    KeyVote,
    KeyVotes,
    Message,
    ReplJob,
)
from disq.persistence.cluster_records import (
    REC_KEYVOTE,
    ClusterRecordError,
    KeyVoteEntry,
    decode_keyvotes,
    encode_keyvotes,
    to_core_records,
)
from disq.persistence.framing import iter_frames
from disq.testing.mesh import Mesh

K = ("q", "k")


class Cluster(Mesh):
    """Disque cores addressed by index (``core(i)``), as in test_disque_core.py."""

    def core(self, i: int) -> DisqueCore:
        return self.disque(i)


# ------------------------------------------------------------------ helpers


def votes_in(m: Message) -> list[KeyVote]:
    """The KeyVote steps a message carries (the node core merges them per peer)."""
    if isinstance(m, KeyVote):
        return [m]
    if isinstance(m, KeyVotes):
        return m.votes()
    return []


def is_vote(m: Message, phase: int = 0) -> bool:
    """``m`` carries KeyVote steps, all of ``phase`` (any phase if 0)."""
    votes = votes_in(m)
    return bool(votes) and all(phase == 0 or v.phase == phase for v in votes)


def records(c: Cluster, i: int) -> list[tuple[str, object]]:
    """Node ``i``'s AOF records so far, decoded, in file order."""
    return to_core_records(list(iter_frames(b"".join(c.aof[c.ids[i]]))))


def record_types(c: Cluster, i: int) -> list[int]:
    return [rtype for rtype, _ in iter_frames(b"".join(c.aof[c.ids[i]]))]


def deleted_in_aof(c: Cluster, i: int) -> set[str]:
    return {str(p) for kind, p in records(c, i) if kind == "DELJOB"}


def loaded_in_aof(c: Cluster, i: int) -> set[str]:
    return {getattr(p, "id", "") for kind, p in records(c, i) if kind == "LOADJOB"}


def queued(c: Cluster) -> list[tuple[int, str]]:
    """(node index, job id) of every queued job on the cluster."""
    return [
        (i, j.id) for i in range(len(c.ids)) for q in c.core(i).queues.values() for j in q.skiplist
    ]


def key_jobs(c: Cluster, key: str = "k") -> dict[str, set[int]]:
    """Job id -> the nodes holding a copy, for every job carrying ``key``."""
    out: dict[str, set[int]] = {}
    for i in range(len(c.ids)):
        for job_id, j in c.core(i).jobs.items():
            if j.idem_key == key:
                out.setdefault(job_id, set()).add(i)
    return out


def restart(c: Cluster, i: int, seed: int = 99) -> DisqueCore:
    """Node ``i`` crashes and comes back from its AOF (what its records say, nothing more)."""
    fresh = DisqueCore(c.views[c.ids[i]], random.Random(seed), c.now)
    fresh.restore(c.now, list(iter_frames(b"".join(c.aof[c.ids[i]]))))
    cluster = c.nodes[i].cluster_cores
    assert cluster is not None
    cluster.replace_disque(fresh)
    return fresh


def is_norepl(r: object) -> bool:
    return isinstance(r, DisqueError) and r.code == "NOREPL"


# ------------------------------------------------------------------ 1. concurrent adds
def test_two_concurrent_adds_of_a_key_on_two_nodes_get_one_job() -> None:
    c = Cluster(3)
    r0 = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=5000, repl=3, idem_key="k"))
    r1 = c.core(1).add_job(c.now, 2, "q", b"b", AddOptions(timeout_ms=5000, repl=3, idem_key="k"))
    assert r0 is PENDING and r1 is PENDING
    [a] = c.core(0).jobs
    [b] = c.core(1).jobs
    assert a != b
    c.pump()
    [(t0, id0)] = c.replies[c.ids[0]]
    [(t1, id1)] = c.replies[c.ids[1]]
    assert (t0, t1) == (1, 2)
    assert isinstance(id0, str) and id0 == id1 and id0 in (a, b)
    winner, loser = id0, (b if id0 == a else a)
    # One job of the key on the cluster, its copies on every node (REPLICATE 3); the loser
    # is gone everywhere, and every node that logged it logged its deletion.
    assert key_jobs(c) == {winner: {0, 1, 2}}
    for i in range(3):
        assert c.core(i).votes.decided_here(K) == winner
        assert K not in c.core(i).votes.prop
        if loser in loaded_in_aof(c, i):
            assert loser in deleted_in_aof(c, i)
    # Queued exactly once, and still once after several RETRY periods.
    assert [job_id for _, job_id in queued(c)] == [winner]
    for _ in range(5):
        c.advance(1000)
        assert [job_id for _, job_id in queued(c)] == [winner]
    # A later retry on any node answers it at once.
    for i in range(3):
        r = c.core(i).add_job(
            c.now, 10 + i, "q", b"z", AddOptions(timeout_ms=1000, repl=3, idem_key="k")
        )
        assert r == winner


# ------------------------------------------------------------------ 2. minority side
def test_keyed_add_cut_off_from_the_majority_answers_norepl_then_a_retry_binds_one_job() -> None:
    c = Cluster(3)
    c.cut = {c.ids[0]}
    # REPLICATE 1: no copies to wait for; only the vote can answer it.
    r = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=1, idem_key="k"))
    assert r is PENDING
    [a] = c.core(0).jobs
    c.advance(990)
    assert c.replies[c.ids[0]] == []  # no id without a majority
    assert queued(c) == []
    c.advance(20)
    [(token, err)] = c.replies[c.ids[0]]
    assert token == 1 and is_norepl(err)
    c.advance(3000)  # the vote goes on, in vain: still nothing queued
    assert queued(c) == [] and c.core(0).votes.decided_here(K) == ""
    c.cut = set()
    r = c.core(1).add_job(c.now, 2, "q", b"b", AddOptions(timeout_ms=5000, repl=1, idem_key="k"))
    assert r is PENDING
    c.advance(5000)
    [(token, bound)] = c.replies[c.ids[1]]
    assert token == 2 and isinstance(bound, str)
    assert list(key_jobs(c)) == [bound]
    assert [job_id for _, job_id in queued(c)] == [bound]
    assert all(c.core(i).votes.decided_here(K) == bound for i in range(3))
    if bound != a:
        assert a not in c.core(0).jobs and a in deleted_in_aof(c, 0)


def test_keyed_add_on_the_two_node_side_of_a_five_node_split() -> None:
    c = Cluster(5)
    minority = {0, 1}
    c.drop = lambda s, d, _m: (s in minority) != (d in minority)
    for i in range(5):
        side = minority if i in minority else set(range(5)) - minority
        c.views[c.ids[i]].down = {c.ids[k] for k in range(5) if k not in side}
    r = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, repl=2, idem_key="k"))
    assert r is PENDING
    [a] = c.core(0).jobs
    c.advance(990)
    # Its two copies exist (nodes 0 and 1), but 2 of 5 is no majority: no id, not queued.
    assert key_jobs(c) == {a: {0, 1}}
    assert c.replies[c.ids[0]] == [] and queued(c) == []
    c.advance(20)
    [(token, err)] = c.replies[c.ids[0]]
    assert token == 1 and is_norepl(err)
    c.advance(4000)
    assert queued(c) == []
    c.drop = None
    for v in c.views.values():
        v.down = set()
    r = c.core(3).add_job(c.now, 2, "q", b"b", AddOptions(timeout_ms=5000, repl=2, idem_key="k"))
    assert r is PENDING
    c.advance(8000)
    [(token, bound)] = c.replies[c.ids[3]]
    assert token == 2 and isinstance(bound, str)
    assert list(key_jobs(c)) == [bound]
    assert len(key_jobs(c)[bound]) == 2
    assert [job_id for _, job_id in queued(c)] == [bound]
    assert all(c.core(i).votes.decided_here(K) == bound for i in range(5))


# ------------------------------------------------------------------ 3. creator crashes
def _vote_started_then_lost(c: Cluster) -> str:
    """Node 0's REPLICATE 3 keyed add: its copies exist on nodes 1 and 2, its vote started,
    but none of its KeyVote messages got out."""
    c.drop = lambda s, _d, m: s == 0 and is_vote(m)
    r = c.core(0).add_job(
        c.now, 1, "q", b"a", AddOptions(timeout_ms=5000, repl=3, retry_s=2, idem_key="k")
    )
    assert r is PENDING
    c.pump()
    [a] = c.core(0).jobs
    assert key_jobs(c) == {a: {0, 1, 2}}
    assert K in c.core(0).votes.prop
    assert all(c.core(i).votes.decided_here(K) == "" for i in range(3))
    return a


def test_a_copy_never_proposes_itself_and_waits_for_a_retry_to_decide() -> None:
    # The creator restarts before any of its KeyVote messages got out: nothing was accepted
    # anywhere, so no job of the key can have been chosen. The holders' RETRYs ask a majority
    # (phase 1) but do not propose their copy (its creator may never have made every copy):
    # the add was never answered, and nothing is queued. A retry of the key then binds its
    # own job, and the old copies are deleted at their next RETRY.
    c = Cluster(3)
    a = _vote_started_then_lost(c)
    fresh = restart(c, 0)
    c.drop = None
    assert a in fresh.jobs and fresh.jobs[a].state == ACTIVE
    assert K in fresh.keys.tentative  # no IDEMKEY: its key comes back undecided
    c.advance(4500)  # past the RETRY (2 s + jitter): the copies ask, nothing is decided
    assert sum(c.core(i).stats.get("key_votes", 0) for i in range(3)) >= 1
    assert all(c.core(i).votes.decided_here(K) == "" for i in range(3))
    assert queued(c) == []
    assert c.replies[c.ids[0]] == []  # the crashed client's token is gone with it
    r = c.core(1).add_job(c.now, 10, "q", b"z", AddOptions(timeout_ms=2000, repl=2, idem_key="k"))
    assert r is PENDING
    c.advance(500)
    [(token, b)] = c.replies[c.ids[1]]
    assert token == 10 and isinstance(b, str) and b != a
    c.advance(5000)  # the copies of ``a`` lose at their RETRY
    assert list(key_jobs(c)) == [b]
    assert [job_id for _, job_id in queued(c)] == [b]
    for i in range(3):
        assert (
            c.core(i).add_job(
                c.now, 20 + i, "q", b"z", AddOptions(timeout_ms=0, repl=1, idem_key="k")
            )
            == b
        )


def test_a_creator_cut_off_after_its_accept_leaves_the_holders_to_finish_its_vote() -> None:
    # The creator's ACCEPT reached the acceptors but their ACCEPTED answers did not reach it,
    # and then it is cut off for good. A holder's RETRY finds the accepted job in phase 1 and
    # must finish the vote with it (Paxos): the key is bound to the creator's job, which is
    # queued once by a holder (WILLQUEUE first), and retries answer its id.
    c = Cluster(3)
    c.drop = lambda _s, d, m: d == 0 and is_vote(m, KV_ACCEPTED)
    r = c.core(0).add_job(
        c.now, 1, "q", b"a", AddOptions(timeout_ms=5000, repl=3, retry_s=2, idem_key="k")
    )
    assert r is PENDING
    c.pump()
    [a] = c.core(0).jobs
    assert all(c.core(i).votes.decided_here(K) == "" for i in range(3))
    c.cut = {c.ids[0]}
    c.drop = None
    c.advance(1500)
    assert queued(c) == []
    c.advance(3500)
    assert c.core(1).votes.decided_here(K) == a and c.core(2).votes.decided_here(K) == a
    where = queued(c)
    assert [job_id for _, job_id in where] == [a] and where[0][0] in (1, 2)
    for i in (1, 2):
        r = c.core(i).add_job(
            c.now, 10 + i, "q", b"z", AddOptions(timeout_ms=1000, repl=2, idem_key="k")
        )
        assert r == a
    assert list(key_jobs(c)) == [a]


# ------------------------------------------------------------------ 4. acceptor state
def test_a_promise_and_an_accept_survive_a_restart() -> None:
    c = Cluster(3)
    proposer, other = c.ids[0], c.ids[2]
    c.nodes[1].on_peer_messages(c.now, proposer, [KeyVote(KV_PREPARE, "q", "k", 5, proposer)])
    c.pump()
    assert record_types(c, 1) == [REC_KEYVOTE]
    [(kind, entries)] = records(c, 1)
    assert kind == "KEYVOTE" and isinstance(entries, list)
    [(queue, key, pn, pnode, an, anode, job_id, _until)] = entries
    assert (queue, key, pn, pnode, an, anode, job_id) == ("q", "k", 5, proposer, 0, "", "")

    promised = restart(c, 1)
    low = promised.votes.prepare(K, (4, other), c.now)
    assert not low.ok and (low.acc_ballot, low.acc_node) == (5, proposer)
    # The same ballot again is no higher than the promise either.
    assert not promised.votes.prepare(K, (5, proposer), c.now).ok
    assert not promised.votes.accept(K, (4, other), "D-x", c.now).ok
    # Control: a node that never promised takes that lower ballot.
    assert c.core(2).votes.prepare(K, (4, other), c.now).ok

    # Accept under ballot 5, restart again: a higher PREPARE learns the accepted job.
    c.nodes[1].on_peer_messages(
        c.now, proposer, [KeyVote(KV_ACCEPT, "q", "k", 5, proposer, job_id="D-job")]
    )
    c.pump()
    assert record_types(c, 1) == [REC_KEYVOTE, REC_KEYVOTE]
    accepted = restart(c, 1, seed=7)
    assert not accepted.votes.prepare(K, (4, other), c.now).ok
    high = accepted.votes.prepare(K, (6, other), c.now)
    assert high.ok and (high.acc_ballot, high.acc_node, high.job_id) == (5, proposer, "D-job")
    # A rewritten AOF (snapshot) keeps the acceptor state as well.
    snap = list(iter_frames(b"".join(accepted.aof.snapshot_records(c.now))))
    assert [rtype for rtype, _ in snap] == [REC_KEYVOTE]
    third = DisqueCore(c.views[c.ids[1]], random.Random(3), c.now)
    third.restore(c.now, snap)
    refused = third.votes.prepare(K, (6, other), c.now)
    assert not refused.ok and (refused.acc_ballot, refused.acc_node) == (6, other)


def test_a_replied_promise_is_refused_to_a_lower_ballot_through_the_mesh() -> None:
    c = Cluster(3)
    seen: list[KeyVote] = []

    def spy(_s: int, d: int, m: Message) -> bool:
        if d == 0:
            seen.extend(votes_in(m))
        return False

    c.drop = spy
    c.nodes[1].on_peer_messages(c.now, c.ids[2], [KeyVote(KV_PREPARE, "q", "k", 9, c.ids[2])])
    c.pump()
    restart(c, 1)
    c.nodes[1].on_peer_messages(c.now, c.ids[0], [KeyVote(KV_PREPARE, "q", "k", 3, c.ids[0])])
    c.pump()
    [reply] = seen
    assert not reply.ok and (reply.ballot, reply.ballot_node) == (3, c.ids[0])
    assert (reply.acc_ballot, reply.acc_node) == (9, c.ids[2])


def test_keyvote_records_round_trip() -> None:
    entries: list[KeyVoteEntry] = [
        ("q", "k", 5, "a" * 40, 4, "b" * 40, "D-0123abcd-" + "A" * 24 + "-05a1", 1_000_000),
        ("qu\u00e9ue", "cl\u00e9 \udcff", 1, "c" * 40, 0, "", "", 2**63),
        ("", "", 0, "", 0, "", "", 0),
    ]
    assert decode_keyvotes(encode_keyvotes(entries)) == entries
    assert decode_keyvotes(encode_keyvotes([])) == []
    assert decode_keyvotes(memoryview(encode_keyvotes(entries))) == entries


@pytest.mark.parametrize("cut", [1, 3, 10, 30, -1])
def test_a_truncated_keyvote_record_is_refused(cut: int) -> None:
    raw = encode_keyvotes([("q", "k", 5, "a" * 40, 4, "b" * 40, "D-job", 1_000_000)])
    with pytest.raises(ClusterRecordError):
        decode_keyvotes(raw[:cut])


def test_junk_after_keyvote_entries_is_refused() -> None:
    raw = encode_keyvotes([("q", "k", 5, "a" * 40, 4, "b" * 40, "D-job", 1_000_000)])
    with pytest.raises(ClusterRecordError):
        decode_keyvotes(raw + b"\x00")


# ------------------------------------------------------------------ 5. one node
def test_a_single_node_binds_its_keys_without_a_vote() -> None:
    c = Cluster(1)
    sent: list[Message] = []

    def spy(_s: int, _d: int, m: Message) -> bool:
        sent.append(m)
        return False

    c.drop = spy
    core = c.core(0)
    first = core.add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=1000, idem_key="k"))
    assert isinstance(first, str)
    assert core.add_job(c.now, 2, "q", b"a", AddOptions(timeout_ms=1000, idem_key="k")) == first
    c.advance(2000)
    assert sent == [] and c.replies[c.ids[0]] == []
    assert core.stats.get("key_votes", 0) == 0 and core.votes.prop == {} and core.votes.acc == {}
    assert REC_KEYVOTE not in record_types(c, 0)
    assert core.qlen("q") == 1 and core.votes.decided_here(K) == first


# ------------------------------------------------------------------ 6. late loser copy
def test_a_loser_copy_arriving_after_the_decision_is_deleted_at_its_retry() -> None:
    c = Cluster(3)
    late: list[Message] = []

    def drop(s: int, d: int, m: Message) -> bool:
        if isinstance(m, DelJob):
            return True  # no loser is deleted by message
        if s == 1 and d == 2 and isinstance(m, ReplJob):
            late.append(m)  # node 1's copy for node 2 is delayed
            return True
        return False

    c.drop = drop
    for i, token in ((0, 1), (1, 2)):
        r = c.core(i).add_job(
            c.now, token, "q", b"x", AddOptions(timeout_ms=3000, repl=3, retry_s=1, idem_key="k")
        )
        assert r is PENDING
    [a] = c.core(0).jobs
    [b] = [j for j in c.core(1).jobs if j != a]
    c.pump()
    # Node 0's job has its copies and wins; node 1's add answers the winner's id.
    assert c.replies[c.ids[0]] == [(1, a)] and c.replies[c.ids[1]] == [(2, a)]
    assert all(c.core(i).votes.decided_here(K) == a for i in range(3))
    assert key_jobs(c) == {a: {0, 1, 2}}
    # The delayed REPLJOB of the loser reaches node 2 after the decision.
    assert late and all(isinstance(m, ReplJob) and m.job.id == b for m in late)
    c.nodes[2].on_peer_messages(c.now, c.ids[1], late[:1])
    c.pump()
    assert b in c.core(2).jobs and c.core(2).jobs[b].state == ACTIVE
    dropped = c.core(2).stats.get("idem_copies_dropped", 0)
    for _ in range(40):  # 4 s in 100 ms slices: B never queued, gone at its RETRY
        c.advance(100)
        assert b not in {job_id for _, job_id in queued(c)}
    assert b not in c.core(2).jobs and b in deleted_in_aof(c, 2)
    assert c.core(2).stats.get("idem_copies_dropped", 0) == dropped + 1
    assert list(key_jobs(c)) == [a]
    assert [job_id for _, job_id in queued(c)] == [a]


# ------------------------------------------------------------------ 7. ASYNC, REPLICATE 1
@pytest.mark.parametrize(("async_", "repl"), [(True, 3), (False, 1)], ids=["async", "repl1"])
def test_async_and_replicate_1_keyed_adds_are_queued_only_once_their_vote_is_won(
    async_: bool, repl: int
) -> None:
    c = Cluster(3)
    r = c.core(0).add_job(
        c.now, 1, "q", b"a", AddOptions(timeout_ms=5000, repl=repl, async_=async_, idem_key="k")
    )
    assert r is PENDING
    [a] = c.core(0).jobs
    assert c.core(0).jobs[a].state == ACTIVE
    assert all(c.core(i).qlen("q") == 0 for i in range(3))
    c.pump()
    assert c.replies[c.ids[0]] == [(1, a)]
    assert queued(c) == [(0, a)] and c.core(0).jobs[a].state == QUEUED
    assert all(c.core(i).votes.decided_here(K) == a for i in range(3))


@pytest.mark.parametrize(
    ("async_", "repl"),
    [
        # Holders' RETRYs meet the undecided key: they finish the vote (the job was
        # accepted) and requeue their copies WILLQUEUE first, not at once (once found two
        # copies queued and two consumers served).
        pytest.param(True, 3, id="async"),
        pytest.param(False, 1, id="repl1"),
    ],
)
def test_async_and_replicate_1_keyed_adds_stay_unqueued_while_the_vote_is_stuck(
    async_: bool, repl: int
) -> None:
    c = Cluster(3)
    c.drop = lambda _s, _d, m: is_vote(m, KV_ACCEPTED)
    r = c.core(0).add_job(
        c.now,
        1,
        "q",
        b"a",
        AddOptions(timeout_ms=0, repl=repl, retry_s=1, async_=async_, idem_key="k"),
    )
    assert r is PENDING
    [a] = c.core(0).jobs
    c.advance(3000)  # RETRY fired several times: not queued while undecided
    assert queued(c) == [] and c.replies[c.ids[0]] == []
    c.drop = None
    c.advance(4000)
    assert c.replies[c.ids[0]] == [(1, a)]
    assert all(c.core(i).votes.decided_here(K) == a for i in range(3))
    # Queued once: one consumer gets it, the others find nothing.
    got = [c.core(i).get_job(c.now, 10 + i, ["q"], nohang=True) for i in range(3)]
    assert [[j.id for j in g] for g in got if isinstance(g, list)] == [[a]]


# ------------------------------------------------------------------ timed-out adds
# Both once failed: a keyed add that timed out before its copies existed went on to propose
# its job (stored nowhere else, not even in its own AOF); now a job is proposed only by its
# creator once stored as asked, and a timed-out add is deleted as an unkeyed one is.
def test_a_timed_out_add_without_copies_never_binds_its_key_to_a_lost_job() -> None:
    c = Cluster(3)
    # Node 0's copies never arrive, nor the ACCEPTED answers to its vote.
    c.drop = lambda s, d, m: (
        (s == 0 and isinstance(m, ReplJob)) or (d == 0 and is_vote(m, KV_ACCEPTED))
    )
    r = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=300, repl=3, idem_key="k"))
    assert r is PENDING
    [a] = c.core(0).jobs
    c.advance(350)
    [(_, err)] = c.replies[c.ids[0]]
    assert is_norepl(err)
    assert a not in loaded_in_aof(c, 0)  # the job was never stored
    restart(c, 0)  # ... and node 0 crashes
    c.drop = None
    r = c.core(1).add_job(c.now, 2, "q", b"b", AddOptions(timeout_ms=3000, repl=3, idem_key="k"))
    assert r is PENDING
    c.advance(5000)
    [(token, bound)] = c.replies[c.ids[1]]
    assert token == 2 and isinstance(bound, str)
    # The acknowledged id must name a job the cluster holds.
    assert bound in key_jobs(c)


def test_a_timed_out_add_without_copies_is_not_acknowledged_to_a_retry() -> None:
    c = Cluster(3)
    c.drop = lambda s, _d, m: s == 0 and isinstance(m, ReplJob)
    r = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=300, repl=3, idem_key="k"))
    assert r is PENDING
    c.advance(350)
    [(_, err)] = c.replies[c.ids[0]]
    assert is_norepl(err)
    c.drop = None
    c.advance(1000)
    r = c.core(1).add_job(c.now, 2, "q", b"b", AddOptions(timeout_ms=3000, repl=3, idem_key="k"))
    c.advance(5000)
    answer: object = r if r is not PENDING else dict(c.replies[c.ids[1]]).get(2)
    assert isinstance(answer, str)
    # An id given to a client must survive the loss of any one node.
    assert len(key_jobs(c).get(answer, set())) >= 2


# ------------------------------------------------------------------ drain and pruning
def test_a_drain_does_not_hand_off_a_keyed_job_whose_vote_is_not_won() -> None:
    # Node 0 adds REPLICATE 1 with a key; its vote cannot finish (ACCEPTED answers lost). A
    # SIGTERM drain then must not queue that job on a peer: the vote may bind another job of
    # the key. An unkeyed job of the same node is handed off as before.
    c = Cluster(3)
    c.drop = lambda _s, d, m: d == 0 and is_vote(m, KV_ACCEPTED)
    r = c.core(0).add_job(c.now, 1, "q", b"a", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
    assert r is PENDING
    plain = c.core(0).add_job(c.now, 2, "q", b"p", AddOptions(timeout_ms=0, repl=1))
    assert isinstance(plain, str)
    c.pump()
    [keyed] = [i for i in c.core(0).jobs if i != plain]
    c.views[c.ids[0]].leaving = True
    assert c.core(0).handoff.start(c.now) == 1  # the plain job only
    c.pump()
    assert [job_id for _, job_id in queued(c)] == [plain]
    assert keyed in c.core(0).jobs and all(keyed not in c.core(i).jobs for i in (1, 2))


def test_acceptor_state_past_its_window_is_pruned() -> None:
    c = Cluster(3)
    core = c.core(1)
    core.keys.window_ms = 1000
    core.votes.prepare(K, (3, c.ids[0]), c.now)
    assert K in core.votes.acc
    c.advance(500)
    assert K in core.votes.acc  # still in its window
    c.advance(2000)  # the cron runs every second
    assert K not in core.votes.acc
