"""The node core with a fake clock: Ready/advance, persist-before-send, reply routing by
token, the DELJOB/IdemKeys merge and the beanstalk bridge, through the in-memory mesh."""

from __future__ import annotations

import random
from typing import Any

import pytest

from disq.core.beanstalk.model import BURIED, READY
from disq.core.disque.api import PENDING, AddOptions, ClusterView, DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.messages import (
    BSTATE_BURIED,
    BeanstalkUpdate,
    DelJob,
    GotJob,
    IdemKeys,
    JobData,
    Message,
    ReplJob,
)
from disq.core.node_core import Ready, apply_ready
from disq.testing.mesh import Mesh


def _put(mesh: Mesh, i: int, body: bytes = b"job", pri: int = 10) -> tuple[Any, int, int]:
    """A beanstalk put on node ``i`` as the door makes it: the core's put, then the bridge."""
    node = mesh.nodes[i]
    session = node.beanstalk.open_session()
    job_id = node.beanstalk.put(session, pri, 0, 60_000, body, mesh.now)
    return session, job_id, node.beanstalk_put(session, job_id, mesh.now)


def test_ready_again_before_advance_is_refused() -> None:
    mesh = Mesh(1)
    node = mesh.nodes[0]
    node.disque.add_job(mesh.now, node.new_token(), "q", b"x", AddOptions(timeout_ms=0, repl=1))  # type: ignore[union-attr]
    assert node.has_ready()
    node.ready(mesh.now)
    with pytest.raises(RuntimeError, match="advance"):
        node.ready(mesh.now)
    node.advance()
    assert not node.has_ready()
    assert not node.ready(mesh.now)  # an empty Ready
    node.advance()


def test_persist_before_send_nothing_leaves_when_the_write_fails() -> None:
    mesh = Mesh(3)
    node = mesh.nodes[0]
    token = node.new_token()
    assert (
        mesh.disque(0).add_job(mesh.now, token, "q", b"x", AddOptions(timeout_ms=5000, repl=3))
        is PENDING
    )
    mesh.pump()  # copies confirmed: the reply is in the creator's next Ready
    # The two holders answered GOTJOB only after their LOADJOB was persisted by the mesh.
    assert all(len(mesh.aof[nid]) == 1 for nid in mesh.ids[1:])
    assert mesh.replies[mesh.ids[0]][-1][0] == token

    calls: list[str] = []
    mesh.disque(0).add_job(
        mesh.now, node.new_token(), "q", b"y", AddOptions(timeout_ms=5000, repl=3)
    )
    rd = node.ready(mesh.now)
    # REPLJOB to the two peers, and the creator's own copy, logged as they leave (its fsync
    # runs while theirs do: replication.py ``start``).
    assert len(rd.aof_records) == 1 and rd.messages

    def persist_fails(records: list[bytes]) -> bool:
        calls.append("persist")
        return False

    def send(peer: str, msgs: list[Message]) -> None:
        calls.append("send")

    def reply(token: int, result: object) -> None:
        calls.append("reply")

    def wake(session: object, result: object) -> None:
        calls.append("wake")

    # A Ready with records: the failed write keeps everything in.
    held = Ready()
    held.aof_records = [b"record"]
    held.messages = {"peer": [GotJob("D-x")]}
    held.replies = [(1, "D-x")]
    held.wakeups = [(node.beanstalk.open_session(), 1)]
    assert apply_ready(held, persist_fails, send, reply, wake) is False
    assert calls == ["persist"]
    calls.clear()
    assert apply_ready(held, lambda r: calls.append("persist") is None, send, reply, wake)
    assert calls == ["persist", "send", "reply", "wake"]
    # The add's own Ready: its record first, and a failed write keeps its REPLJOBs in.
    calls.clear()
    assert apply_ready(rd, persist_fails, send, reply, wake) is False
    assert calls == ["persist"]
    calls.clear()
    assert apply_ready(rd, lambda r: calls.append("persist") is None, send, reply, wake)
    assert calls == ["persist", "send", "send"]
    node.advance()
    # A Ready without records needs no write.
    calls.clear()
    bare = Ready()
    bare.messages = {"peer": [GotJob("D-x")]}
    assert apply_ready(bare, persist_fails, send, reply, wake)
    assert calls == ["send"]


def test_records_of_both_cores_in_one_ready_in_order() -> None:
    mesh = Mesh(1)
    node = mesh.nodes[0]
    _put(mesh, 0, b"beanstalk")
    node.disque.add_job(
        mesh.now, node.new_token(), "q", b"disque", AddOptions(timeout_ms=0, repl=1)
    )  # type: ignore[union-attr]
    rd = node.ready(mesh.now)
    assert len(rd.aof_records) == 2
    assert b"beanstalk" in rd.aof_records[0] and b"disque" in rd.aof_records[1]
    node.advance()


def test_replies_are_routed_by_token_and_replicated_puts_wake_their_session() -> None:
    mesh = Mesh(3, beanstalk_replicate=2)
    node = mesh.nodes[0]
    token = node.new_token()
    assert (
        mesh.disque(0).add_job(mesh.now, token, "q", b"x", AddOptions(timeout_ms=5000, repl=2))
        is PENDING
    )
    session, job_id, pending = _put(mesh, 0)
    assert pending == 1  # INSERTED waits for the copy
    mesh.pump()
    replies = mesh.replies[mesh.ids[0]]
    assert [t for t, _ in replies] == [token]  # the put's token is not a door's business
    assert mesh.wakeups[mesh.ids[0]] == [(session, job_id)]


def test_a_replicated_put_without_copies_wakes_with_internal_error() -> None:
    mesh = Mesh(3, beanstalk_replicate=3)
    mesh.cut = {mesh.ids[1], mesh.ids[2]}
    session, job_id, pending = _put(mesh, 0)
    assert pending == 1
    mesh.advance(6000, step=100)
    assert mesh.wakeups[mesh.ids[0]] == [(session, "INTERNAL_ERROR")]
    assert job_id not in mesh.beanstalk(0).jobs  # dropped: the client never saw INSERTED


def test_a_cancelled_replicated_put_is_dropped() -> None:
    mesh = Mesh(3, beanstalk_replicate=2)
    mesh.cut = {mesh.ids[1], mesh.ids[2]}
    node = mesh.nodes[0]
    _, job_id, _ = _put(mesh, 0)
    token = next(iter(node._bputs))
    node.cancel(token)
    assert job_id not in node.beanstalk.jobs
    mesh.cut = set()
    mesh.advance(6000, step=100)
    assert mesh.wakeups[mesh.ids[0]] == []


def test_deljob_and_idemkeys_merge_into_one_each_per_peer_sent_last() -> None:
    mesh = Mesh(3)
    node = mesh.nodes[0]
    ids = []
    for k in range(3):
        t = node.new_token()
        mesh.disque(0).add_job(
            mesh.now, t, "q", b"x", AddOptions(timeout_ms=5000, repl=3, idem_key=f"k{k}")
        )
        mesh.pump()
        ids.append(mesh.replies[mesh.ids[0]][-1][1])
    assert mesh.disque(0).acks.fast_ack(mesh.now, ids) == 3  # a DELJOB per job per holder
    mesh.disque(0).add_job(mesh.now, node.new_token(), "q", b"x", AddOptions(timeout_ms=0, repl=1))
    rd = node.ready(mesh.now)
    for peer in mesh.ids[1:]:
        msgs = rd.messages[peer]
        deljobs = [m for m in msgs if isinstance(m, DelJob)]
        assert len(deljobs) == 1 and sorted(deljobs[0].job_ids) == sorted(ids)
        assert isinstance(msgs[-1], DelJob | IdemKeys)
        assert all(not isinstance(m, DelJob | IdemKeys) for m in msgs[: -len(deljobs)])
    node.advance()


def test_idempotency_keys_reach_every_peer_once_the_add_is_done() -> None:
    mesh = Mesh(3)
    node = mesh.nodes[0]
    t = node.new_token()
    mesh.disque(0).add_job(
        mesh.now, t, "q", b"x", AddOptions(timeout_ms=5000, repl=2, idem_key="k")
    )
    mesh.pump()
    [(_, job_id)] = mesh.replies[mesh.ids[0]]
    for i in (1, 2):  # a retry on any node answers the first id, with or without a copy
        again = mesh.disque(i).add_job(
            mesh.now, 99, "q", b"x", AddOptions(timeout_ms=5000, repl=2, idem_key="k")
        )
        assert again == job_id


def test_bury_on_the_owner_reaches_the_holders_and_a_takeover_keeps_it_buried() -> None:
    mesh = Mesh(3, beanstalk_replicate=3)
    owner = mesh.nodes[0]
    session, job_id, _ = _put(mesh, 0)
    mesh.pump()
    did = owner.beanstalk.jobs[job_id].replica.disque_id  # type: ignore[union-attr]
    job = owner.beanstalk.reserve(session, -1, mesh.now)
    assert job is not None and job.id == job_id
    seen: list[Message] = []
    mesh.pump(drop=lambda s, d, m: seen.append(m) is not None)
    owner.beanstalk.bury(session, job_id, 5, mesh.now)
    mesh.pump(drop=lambda s, d, m: seen.append(m) is not None)
    assert any(isinstance(m, BeanstalkUpdate) and m.bstate == BSTATE_BURIED for m in seen)
    mesh.pump()
    assert all(mesh.disque(i).jobs[did].bstate == BSTATE_BURIED for i in (1, 2))
    # The owner dies: a holder takes the job over into its own beanstalk core, buried.
    mesh.cut = {mesh.ids[0]}
    for i in (1, 2):
        mesh.views[mesh.ids[i]].down = {mesh.ids[0]}
    mesh.advance(200_000, step=500)
    adopted = [j for i in (1, 2) for j in mesh.beanstalk(i).jobs.values() if j.replica is not None]
    assert adopted and all(j.state == BURIED and j.pri == 5 for j in adopted)


def test_delete_on_the_owner_removes_every_copy() -> None:
    mesh = Mesh(3, beanstalk_replicate=3)
    owner = mesh.nodes[0]
    session, job_id, _ = _put(mesh, 0)
    mesh.pump()
    did = owner.beanstalk.jobs[job_id].replica.disque_id  # type: ignore[union-attr]
    assert all(did in mesh.disque(i).jobs for i in range(3))
    owner.beanstalk.delete(session, job_id, mesh.now)
    mesh.pump()
    assert all(did not in mesh.disque(i).jobs for i in range(3))


def test_next_deadline_is_the_earliest_of_the_cores_and_tick_runs_them() -> None:
    mesh = Mesh(1)
    node = mesh.nodes[0]
    assert node.next_deadline_ms() == mesh.disque(0).next_deadline_ms()
    session = node.beanstalk.open_session()
    node.beanstalk.put(session, 1, 50, 60_000, b"later", mesh.now)  # delayed 50 ms
    # Due once its end is passed (disq/core/timers.py): the first tick with work is at +51.
    assert node.next_deadline_ms() == mesh.now + 51
    node.tick(mesh.now + 50)
    [job] = node.beanstalk.jobs.values()
    assert job.state != READY
    node.tick(mesh.now + 51)
    assert job.state == READY


class _BrokenCore(DisqueCore):
    """A mutant core that fails on one message. The failure must come from the handler: an
    ill-typed message (a REPLJOB without its job) cannot even be built against the compiled
    message classes."""

    def __init__(self, view: ClusterView, rng: random.Random, now_ms: int) -> None:
        super().__init__(view, rng, now_ms)
        read = self.handlers[ReplJob]

        def broken(now_ms: int, sender: str, msg: ReplJob) -> None:
            if msg.job.id == "D-broken":
                raise AttributeError("broken handler")
            read(now_ms, sender, msg)

        self.handlers[ReplJob] = broken


def test_a_bad_peer_message_is_contained_and_counted() -> None:
    mesh = Mesh(2, core_class=_BrokenCore)
    node = mesh.nodes[0]
    node.contain_errors = True

    broken = ReplJob.of(JobData("D-broken", "q", b"", 1, 1, 0, 0, 0))
    node.on_peer_messages(mesh.now, mesh.ids[1], [broken, GotJob("D-x")])
    assert node.message_errors == 1 and "ReplJob" in node.errors[0][0]
    node.contain_errors = False
    with pytest.raises(AttributeError):
        node.on_peer_messages(mesh.now, mesh.ids[1], [broken])


def test_norepl_is_the_disque_error() -> None:
    mesh = Mesh(2)
    with pytest.raises(DisqueError):
        mesh.disque(0).add_job(mesh.now, 1, "q", b"x", AddOptions(timeout_ms=10, repl=3))


def test_the_doors_commands_go_in_through_the_node_core() -> None:
    # A job's life, every step a NodeCore call as a door makes it: the add's id arrives in a
    # Ready for its token, GETJOB/SHOW/QSTAT/WORKING/NACK/ACKJOB answer from the one API.
    mesh = Mesh(3)
    node = mesh.nodes[0]
    token = node.new_token()
    assert (
        node.add_job(mesh.now, token, "q", b"body", AddOptions(timeout_ms=5000, repl=3)) is PENDING
    )
    mesh.pump()
    [(answered, job_id)] = mesh.replies[mesh.ids[0]]
    assert answered == token and isinstance(job_id, str)
    assert job_id.startswith("D-" + node.my_id[:8])
    assert node.qlen("q") == 1 and node.job_count() == 1 and node.queue_count() == 1
    shown = dict(node.show(mesh.now, job_id) or [])
    assert shown["state"] == "queued" and shown["queue"] == "q"
    [job] = node.get_job(mesh.now, node.new_token(), ["q"], nohang=True)  # type: ignore[misc]
    assert job.id == job_id and job.body == b"body"
    assert node.working(mesh.now, job_id) > 0
    assert node.nack(mesh.now, [job_id]) == 1 and node.qlen("q") == 1
    assert dict(node.qstat(mesh.now, "q") or [])["len"] == 1
    assert node.ack_job(mesh.now, [job_id]) == 1 and node.qlen("q") == 0
    mesh.pump()
    assert all(mesh.disque(i).jobs == {} for i in range(3))  # the ack was collected everywhere


def test_a_node_without_its_cluster_half_answers_commands_with_err() -> None:
    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.node_core import NodeCore

    node = NodeCore(BeanstalkCore())
    with pytest.raises(DisqueError) as exc:
        node.qlen("q")
    assert exc.value.code == "ERR"
