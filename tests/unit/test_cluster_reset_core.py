"""CLUSTER RESET in the cores: every job and queue gone, every waiter answered, and nothing
a forgotten node sends makes state until a meet (membership.py's doc, issue 31)."""

from __future__ import annotations

import random

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.disque.api import NOREPL_EXPIRED, PENDING, AddOptions, DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.membership import FORGOTTEN, Membership
from disq.core.messages import (
    ALIVE,
    Ack,
    JobData,
    Member,
    Ping,
    Queued,
    ReplJob,
    RouteSync,
    SchedSync,
)
from disq.core.node_core import NodeCore

T0 = 1_000_000


def _id(i: int) -> str:
    return f"{i + 1:040x}"


def _rec(i: int) -> Member:
    return Member(_id(i), f"10.0.0.{i + 1}", 7710, 7711, 0, ALIVE)


def _node(peers: int) -> NodeCore:
    """Node 0 with a real membership that knows ``peers`` peers (each met it)."""
    m = Membership(_rec(0), random.Random(1), T0)
    core = NodeCore(BeanstalkCore(), DisqueCore(m, random.Random(2), T0), m, contain_errors=False)
    for i in range(1, peers + 1):
        core.on_peer_messages(T0, _id(i), [Ping(probe_id=i, gossip=[_rec(i)], meet=True)])
    assert m.cluster_size() == peers + 1
    return core


def _copy_of(job_id: str, queue: str = "q") -> ReplJob:
    return ReplJob.of(JobData(job_id, queue, b"body", 2, T0 * 1_000_000, 0, 1, 3600))


def test_a_reset_flushes_every_job_and_queue_and_answers_every_waiter() -> None:
    node = _node(2)
    disque = node.disque
    assert disque is not None
    assert disque.add_job(T0, 1, "kept", b"x", AddOptions(timeout_ms=0, repl=1)) != PENDING
    assert disque.add_job(T0, 2, "waits", b"x", AddOptions(timeout_ms=5000, repl=3)) is PENDING
    assert disque.get_job(T0, 3, ["empty"], timeout_ms=0) is PENDING
    node.on_peer_messages(T0, _id(1), [_copy_of("D-00000002-aaaaaaaaaaaaaaaaaaaaaaaa-05a1")])
    assert len(disque.jobs) == 3 and disque.outbox
    node.cluster_reset(T0 + 1)
    assert disque.jobs == {} and disque.queues == {} and disque.memory.used_bytes == 0
    assert disque.outbox == []  # the add's REPLJOBs to the forgotten peers do not leave
    assert sorted(disque.replies, key=lambda r: r[0]) == [
        (2, DisqueError("NOREPL", NOREPL_EXPIRED)),  # unregisterJob's answer
        (3, None),  # GETJOB's timeout reply, as Disque's flushServerData
    ]
    assert node.membership is not None and node.membership.cluster_size() == 1
    # Nothing the flushed jobs had armed fires later.
    node.tick(T0 + 3_600_000)
    assert disque.jobs == {} and disque.queues == {} and disque.outbox == []


def test_keyed_adds_waiting_for_their_keys_vote_are_answered_too() -> None:
    node = _node(2)
    disque = node.disque
    assert disque is not None
    for token in (5, 6):  # the second repeats the key: it waits for the same vote
        reply = disque.add_job(
            T0, token, "q", b"x", AddOptions(timeout_ms=5000, repl=1, idem_key="k")
        )
        assert reply is PENDING
    node.cluster_reset(T0 + 1)
    gone = DisqueError("NOREPL", NOREPL_EXPIRED)
    assert disque.replies == [(5, gone), (6, gone)]
    # The key went with the job: an add with it on the reset node is a new add.
    assert (
        disque.add_job(T0 + 2, 7, "q", b"x", AddOptions(timeout_ms=0, repl=1, idem_key="k"))
        != PENDING
    )


def test_a_forgotten_node_makes_no_state_until_it_meets_the_node_again() -> None:
    node = _node(2)
    m, disque = node.membership, node.disque
    assert m is not None and disque is not None
    node.cluster_reset(T0)
    node.ready(T0)
    node.advance()
    # Still knowing us, peer 1 goes on: a probe, a copy, a queued job (a lane frame in
    # flight, a requeue of a job we had). None of it is taken.
    copy = _copy_of("D-00000002-bbbbbbbbbbbbbbbbbbbbbbbb-05a1")
    node.on_peer_messages(T0 + 10, _id(1), [Ping(probe_id=7, gossip=[_rec(1), _rec(2)])])
    node.on_peer_messages(T0 + 10, _id(1), [copy, Queued("D-x")])
    # A digest that differs would make the routes table and the scheduler answer with
    # their whole tables: they do not hear it.
    node.on_peer_messages(T0 + 10, _id(1), [RouteSync(digest=7), SchedSync(digest=7)])
    assert disque.jobs == {} and disque.queues == {} and m.cluster_size() == 1
    assert m.ignored == 5 and m.outbox == [] and disque.outbox == []
    assert node.routes is not None and node.routes.outbox == []
    assert node.scheduler is not None and node.scheduler.outbox == []
    # Its meet (CLUSTER MEET there) brings it back, and what it sends after is read.
    node.on_peer_messages(T0 + 20, _id(1), [Ping(probe_id=8, gossip=[_rec(1)], meet=True)])
    node.on_peer_messages(T0 + 20, _id(1), [copy])
    assert m.member(_id(1)) is not None and list(disque.jobs) == [copy.job.id]
    assert m.forgotten() == [_id(2)]


def test_after_a_reset_on_both_sides_a_meet_joins_them_again() -> None:
    # The Ack to our own meet comes from a node we forgot: taken, by its probe id.
    a = Membership(_rec(0), random.Random(1), T0)
    a.on_message(T0, _id(1), Ping(probe_id=1, gossip=[_rec(1)], meet=True))
    a.reset(T0)
    assert a.forgotten() == [_id(1)] and (_id(1), FORGOTTEN) in a.events
    a.on_message(T0, _id(1), Ack(probe_id=5, gossip=[_rec(1)]))  # not an answer to a meet
    assert a.member(_id(1)) is None
    meet = a.meet_message()
    assert meet.meet
    a.on_message(T0, _id(1), Ack(probe_id=meet.probe_id, gossip=[_rec(1), _rec(2)]))
    assert a.member(_id(1)) is not None and a.forgotten() == []
    assert a.member(_id(2)) is not None  # news of a node never forgotten: as before


def test_forgotten_nodes_come_back_through_a_met_members_gossip_only() -> None:
    a = Membership(_rec(0), random.Random(1), T0)
    for i in (1, 2):
        a.on_message(T0, _id(i), Ping(probe_id=i, gossip=[_rec(i)], meet=True))
    a.reset(T0)
    # An unknown node that is not a member vouches for node 2: not enough.
    a.on_message(T0, _id(5), Ping(probe_id=9, gossip=[_rec(5), _rec(2)]))
    assert a.member(_id(5)) is not None and a.member(_id(2)) is None
    # Node 5 is a member now: its gossip is a known node's, as in Disque.
    a.on_message(T0, _id(5), Ping(probe_id=10, gossip=[_rec(5), _rec(2)]))
    assert a.member(_id(2)) is not None and a.forgotten() == [_id(1)]


def test_a_restart_keeps_ignoring_the_nodes_a_reset_forgot() -> None:
    a = Membership(_rec(0), random.Random(1), T0)
    a.on_message(T0, _id(1), Ping(probe_id=1, gossip=[_rec(1)], meet=True))
    a.reset(T0)
    snap = a.snapshot()
    b = Membership.restore(snap, _rec(0), random.Random(2), T0)
    assert b.ignores(_id(1))
    b.on_message(T0, _id(1), Ping(probe_id=2, gossip=[_rec(1)]))
    assert b.member(_id(1)) is None and b.outbox == []


def test_a_hard_reset_takes_a_new_id_and_never_takes_the_old_one_as_a_peer() -> None:
    node = _node(1)
    m, disque = node.membership, node.disque
    assert m is not None and disque is not None
    node.cluster_reset(T0, _id(9))
    assert m.my_id == _id(9) and m.incarnation == 0 and m.members()[0].node_id == _id(9)
    job_id = disque.add_job(T0, 1, "q", b"x", AddOptions(timeout_ms=0, repl=1))
    assert isinstance(job_id, str) and job_id.startswith(f"D-{_id(9)[:8]}-")
    # Peer 1 meets us again and gossips what it knew: our old id, at our own address.
    node.on_peer_messages(T0, _id(1), [Ping(probe_id=3, gossip=[_rec(1)], meet=True)])
    node.on_peer_messages(T0, _id(1), [Ping(probe_id=4, gossip=[_rec(1), _rec(0)])])
    assert [r.node_id for r in m.members()] == [_id(9), _id(1)]
    restored = Membership.restore(m.snapshot(), _rec(9), random.Random(3), T0)
    restored.on_message(T0, _id(1), Ping(probe_id=5, gossip=[_rec(1), _rec(0)]))
    assert restored.member(_id(0)) is None
