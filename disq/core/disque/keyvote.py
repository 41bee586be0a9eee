"""One key, one job: a keyed ADDJOB's key is bound to its job by a vote of a majority of the
cluster (single-decree Paxos per key, Lamport's "Paxos Made Simple"), disq's addition.

Why a vote. Announcing keys (idempotency.py) reaches every peer in the end, but a retry that
lands on a node cut off from every node that knows the key, or that runs while the first add
is still in flight, has nothing to go on and adds a second job. Only an agreement between
nodes closes that: a majority that has seen the key is met by any other majority.

The rounds, for a key ``(queue, key)``; every node is an acceptor, the node with a job to
bind is the proposer, and a ballot is ``(n, node id)``:

- **PREPARE(b)** to every live peer (and this node). An acceptor that promised nothing
  higher promises b, persists it (KEYVOTE record: the Ready rule writes it before the PROMISE
  leaves) and answers the job it accepted last, with that ballot.
- With a majority of promises (``cluster_size() // 2 + 1``; a majority of known nodes, dead
  ones included), the proposer proposes the job accepted under the highest ballot, or its
  own: **ACCEPT(b, job)**; an acceptor that promised nothing higher accepts and persists.
- With a majority of ACCEPTED the key is **decided**: the IDEMKEY record makes it done here,
  and the IDEMKEYS announcement (resent until acknowledged) teaches every peer. Any node that
  knows the key decided answers any PREPARE or ACCEPT with it (``decided``), which ends a
  vote at once; a late retry is answered from there without a vote.
- A refusal or silence starts a new round with a higher ballot after a random backoff (200 ms
  doubling to 3 s), so two proposers do not keep cutting each other off.

What the job's copies do. A job is proposed only by its creator, once it is stored as its
add asked (its copies made; ASYNC and REPLICATE 1 wait for none), so a decided job was
stored. Until the key is decided, nothing queues a job of it: the creator queues its job
when it wins. A holder whose copy's RETRY fires while the key is undecided asks a majority
(PREPARE): a job accepted there must be finished (Paxos), and that may be this copy, which
is then requeued as any copy is (WILLQUEUE first); with nothing accepted it proposes nothing
(its creator may never have made the other copies), and the copy waits, unqueued: its add
was never answered. A copy of a job that lost is deleted at its RETRY. A losing job is
deleted on every holder (DELJOB) and its waiting clients get the winner's id. An add that
times out before its copies exist is deleted as an unkeyed one is (nobody can have proposed
its job). A retry that meets an undecided key adds its own job and votes, rather than wait
for a copy that never decides alone. Once a key's window is over, its jobs requeue as any.

The cost and the choice. Two round trips per keyed add on a cluster (none on a single
node: a majority of one is this node), and a keyed add cannot be answered without a
majority: under a partition the minority side answers NOREPL at the add's timeout (CP for
adds that carry a key, AP for the others, which do not vote). Acceptor state is kept for the
key's window (the keys' ``window_ms``), in memory and in the AOF. Membership changes are not part of
the vote: adding one node at a time keeps every two majorities intersecting; removing nodes
while a vote runs (CLUSTER FORGET) can break that, as in any majority scheme without
reconfiguration.
"""

from __future__ import annotations

import itertools
from collections.abc import Set
from typing import Protocol

from disq.core.constants import WILLQUEUE_ADVANCE_MS
from disq.core.disque.api import NOREPL_TIMEOUT, DisqueError
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.host import CoreHost
from disq.core.disque.idempotency import KeyTable
from disq.core.disque.job import ACKED, ACTIVE, BCAST_WILLQUEUE, QUEUED, WAIT_REPL, DJob
from disq.core.disque.state import KV_ADD as ADD
from disq.core.disque.state import KV_AT_ONCE as AT_ONCE
from disq.core.disque.state import KV_COPY as COPY
from disq.core.disque.state import KV_TIMER, NO_BALLOT, Ballot, Key
from disq.core.disque.state import Acceptor as _Acceptor
from disq.core.disque.state import Proposal as _Proposal
from disq.core.messages import (
    KV_ACCEPT,
    KV_ACCEPTED,
    KV_PREPARE,
    KV_PROMISE,
    KeyVote,
    KeyVotes,
)
from disq.persistence.cluster_records import (
    REC_KEYVOTE,
    KeyVoteEntry,
    encode_keyvotes,
)
from disq.persistence.framing import frame

KV_RETRY_MAX_MS = 3000
KV_RECORD_KEYS = 1000  # acceptor entries per KEYVOTE record in a rewrite

# What the winner's job does when its vote is won: ADD, AT_ONCE, COPY (state.py's KV_ADD, ...).
# Only the first two propose their own job: a job is proposed by its creator once it is stored
# as its add asked (its copies made; ASYNC and REPLICATE 1 ask for none to wait for). A copy
# never proposes itself: its creator may have failed to make the other copies (an add that
# timed out is deleted as before, no vote: nobody can have proposed its job), and a key bound
# to an under-replicated job would acknowledge it to a retry.


class AddFinisher(Protocol):
    """What a won vote needs of replication (replication.py's Replication, which imports
    this module)."""

    def finish_add(self, j: DJob, confirmed: Set[str], now_ms: int) -> None: ...


class VoteHost(CoreHost, Protocol):
    """What the key votes need of the core: its job table and messages, and the
    idempotency part's keys (idempotency.py), which a decided vote binds."""

    vote_keys: bool
    blocked: BlockedClients
    keys: KeyTable

    @property
    def replication(self) -> AddFinisher: ...


class KeyVoting:
    """The votes on idempotency keys: this node as acceptor (``acc``) and as proposer
    (``prop``), and the timer of their rounds."""

    def __init__(self, host: VoteHost) -> None:
        self.host = host
        self.acc: dict[Key, _Acceptor] = {}
        self.prop: dict[Key, _Proposal] = {}
        self.timer_ms = 0  # the armed timer (0: none)

    def reset(self) -> None:
        """FLUSHALL: no vote, no timer (flush.py answered the proposals' clients)."""
        self.acc.clear()
        self.prop.clear()
        self.timer_ms = 0

    # ------------------------------------------------------------------ entry points
    def needed(self, j: DJob) -> bool:
        """Does this job's key go through a vote? Keyed jobs, on a cluster."""
        return bool(j.idem_key) and self.host.vote_keys and self.host.view.cluster_size() > 1

    def propose(
        self,
        j: DJob,
        kind: int,
        tokens: list[int],
        deadline_ms: int,
        now_ms: int,
        holders: Set[str] | None = None,
    ) -> None:
        """Bind ``j``'s key by a vote with ``j`` as candidate; ``tokens`` get the key's job
        id once decided (NOREPL at ``deadline_ms``)."""
        k = (j.queue, j.idem_key)
        decided = self.decided_here(k)
        if decided:
            self._resolve(k, decided, _Proposal(j.id, kind, tokens=tokens), now_ms)
            return
        p = self.prop.get(k)
        if p is not None:
            if p.job_id != j.id and kind != COPY:
                # A second candidate here (a copy's vote ran, then this node's own add):
                # the add's job is the candidate; the copy is decided with the key anyway.
                p.job_id, p.kind = j.id, kind
            p.tokens.extend(tokens)
            if deadline_ms and (not p.deadline_ms or deadline_ms < p.deadline_ms):
                p.deadline_ms = deadline_ms
            if holders:
                p.holders |= holders
            self._arm(deadline_ms)
            return
        p = _Proposal(j.id, kind, tokens=list(tokens), deadline_ms=deadline_ms)
        if holders:
            p.holders = set(holders)
        self.prop[k] = p
        self.host.stats["key_votes"] = self.host.stats.get("key_votes", 0) + 1
        self._arm(deadline_ms)
        self._round(k, p, now_ms)

    def blocks_requeue(self, j: DJob, now_ms: int) -> bool:
        """A copy's RETRY fired: while its key is undecided here it is not queued; its vote
        runs (with this copy as candidate) and decides whether it is queued or deleted."""
        if not self.needed(j):
            return False
        k = (j.queue, j.idem_key)
        if k not in self.host.keys.taken:
            return False  # the key's window is over: the job requeues as any job does
        decided = self.decided_here(k)
        if decided == j.id:
            return False
        if decided:
            # The key went to another job: this copy lost (its DELJOB was lost, or it came
            # after the decision). Never queued: it goes.
            self.host.stats["idem_copies_dropped"] = (
                self.host.stats.get("idem_copies_dropped", 0) + 1
            )
            self._drop(j, decided, now_ms)
            return True
        if k not in self.prop:
            self.propose(j, COPY, [], 0, now_ms)
        return j.id in self.host.jobs and k in self.prop

    # ------------------------------------------------------------------ the proposer
    def _quorum(self) -> int:
        return self.host.view.cluster_size() // 2 + 1

    def _round(self, k: Key, p: _Proposal, now_ms: int) -> None:
        me = self.host.my_id
        acc = self.acc.get(k)
        top = max(p.highest, p.ballot[0], acc.promised[0] if acc is not None else 0)
        p.ballot = (top + 1, me)
        p.highest = top + 1
        p.phase = KV_PREPARE
        p.value = ""
        p.promises = {}
        p.accepts = set()
        p.retry_ms = now_ms + p.backoff_ms + int(self.host.rng.random() * p.backoff_ms)
        p.backoff_ms = min(p.backoff_ms * 2, KV_RETRY_MAX_MS)
        self._arm(p.retry_ms)
        msg = KeyVote(KV_PREPARE, k[0], k[1], p.ballot[0], me)
        for node in self.host.view.all_peers():
            if node != me:
                self.host._send(node, msg)
        self._on_reply(k, self.prepare(k, p.ballot, now_ms), me, now_ms)

    def _on_reply(self, k: Key, r: KeyVote, sender: str, now_ms: int) -> None:
        """A PROMISE or ACCEPTED (this node's own ones too) for the vote on ``k``."""
        if r.decided:
            self.learn(k, r.decided, now_ms, announce=False)
            return
        p = self.prop.get(k)
        if p is None or (r.ballot, r.ballot_node) != p.ballot:
            return  # a round that is over
        if not r.ok:
            # Refused: somebody promised a higher ballot. Next round above it, after the
            # backoff (at once would cut that proposer off in turn).
            p.highest = max(p.highest, r.acc_ballot)
            return
        quorum = self._quorum()
        if r.phase == KV_PROMISE and p.phase == KV_PREPARE:
            p.promises[sender] = ((r.acc_ballot, r.acc_node), r.job_id)
            if len(p.promises) < quorum:
                return
            best = max(p.promises.values())
            if not best[1] and p.kind == COPY:
                # Nothing accepted by a majority's members: no job of the key can have been
                # chosen, and a copy does not propose itself (see COPY). The key stays free;
                # the copy waits, unqueued, for a decision (its next RETRY asks again).
                del self.prop[k]
                return
            p.value = best[1] if best[1] else p.job_id
            p.phase = KV_ACCEPT
            me = self.host.my_id
            msg = KeyVote(KV_ACCEPT, k[0], k[1], p.ballot[0], me, job_id=p.value)
            for node in self.host.view.all_peers():
                if node != me:
                    self.host._send(node, msg)
            self._on_reply(k, self.accept(k, p.ballot, p.value, now_ms), me, now_ms)
        elif r.phase == KV_ACCEPTED and p.phase == KV_ACCEPT:
            p.accepts.add(sender)
            if len(p.accepts) >= quorum:
                self.learn(k, p.value, now_ms, announce=True)

    # ------------------------------------------------------------------ the acceptor
    def prune(self, now_ms: int, budget: int = 1000) -> None:
        """Acceptor state past its window goes (the core's cron, a bounded walk from the
        oldest entry; a rewrite drops every expired one too)."""
        acc = self.acc
        for k in list(itertools.islice(acc, budget)):
            if acc[k].until <= now_ms and k not in self.prop:
                del acc[k]

    def decided_here(self, k: Key) -> str:
        hit = self.host.keys.taken.get(k)
        if hit is not None and k not in self.host.keys.tentative:
            return hit[0]
        return ""

    def _state(self, k: Key, now_ms: int) -> _Acceptor:
        acc = self.acc.get(k)
        if acc is None:
            acc = self.acc[k] = _Acceptor(NO_BALLOT, NO_BALLOT, "", 0)
        acc.until = now_ms + self.host.keys.window_ms
        return acc

    def _log(self, k: Key, acc: _Acceptor) -> None:
        if self.host.persist:
            entry: KeyVoteEntry = (
                k[0],
                k[1],
                acc.promised[0],
                acc.promised[1],
                acc.accepted[0],
                acc.accepted[1],
                acc.job_id,
                acc.until + self.host.wall_offset_ms,  # wall-clock on disk (server/clock.py)
            )
            self.host.aof_out.append(frame(REC_KEYVOTE, encode_keyvotes([entry])))

    def _reply(self, phase: int, k: Key, b: Ballot) -> KeyVote:
        """An acceptor's reply to ballot ``b``; ``decided`` set when the key is bound here
        already, which answers the vote whatever the ballot."""
        return KeyVote(phase, k[0], k[1], b[0], b[1], decided=self.decided_here(k))

    def prepare(self, k: Key, b: Ballot, now_ms: int) -> KeyVote:
        reply = self._reply(KV_PROMISE, k, b)
        if reply.decided:
            return reply
        acc = self._state(k, now_ms)
        if b > acc.promised:
            acc.promised = b
            self._log(k, acc)
            reply.ok = True
            reply.acc_ballot, reply.acc_node = acc.accepted
            reply.job_id = acc.job_id
        else:
            reply.acc_ballot, reply.acc_node = acc.promised
        return reply

    def accept(self, k: Key, b: Ballot, job_id: str, now_ms: int) -> KeyVote:
        reply = self._reply(KV_ACCEPTED, k, b)
        if reply.decided:
            return reply
        acc = self._state(k, now_ms)
        if b >= acc.promised:
            acc.promised = acc.accepted = b
            acc.job_id = job_id
            self._log(k, acc)
            reply.ok = True
        else:
            reply.acc_ballot, reply.acc_node = acc.promised
        return reply

    def on_key_votes(self, now_ms: int, sender: str, msg: KeyVotes) -> None:
        for v in msg.votes():
            self.on_key_vote(now_ms, sender, v)

    def on_key_vote(self, now_ms: int, sender: str, msg: KeyVote) -> None:
        k = (msg.queue, msg.key)
        b = (msg.ballot, msg.ballot_node)
        if msg.phase == KV_PREPARE:
            self.host._send(sender, self.prepare(k, b, now_ms))
        elif msg.phase == KV_ACCEPT:
            self.host._send(sender, self.accept(k, b, msg.job_id, now_ms))
        else:
            self._on_reply(k, msg, sender, now_ms)

    # ------------------------------------------------------------------ the decision
    def learn(self, k: Key, job_id: str, now_ms: int, announce: bool) -> None:
        """``k`` is bound to ``job_id`` (decided here by a majority, or learned)."""
        decided = self.decided_here(k)
        if decided and decided != job_id:
            # Bound here already (a key taken outside a vote, e.g. while this node was
            # alone): the first binding stays, as idempotency.py's first done job wins.
            self.host.stats["key_vote_conflicts"] = self.host.stats.get("key_vote_conflicts", 0) + 1
            job_id = decided
            announce = False
        hit = self.host.keys.taken.get(k)
        until = hit[1] if hit is not None else now_ms + self.host.keys.window_ms
        losers = [i for i in self.host.keys.shadow.pop(k, ()) if i != job_id]
        if hit is not None and hit[0] != job_id and k in self.host.keys.tentative:
            losers.append(hit[0])
        if hit is None or hit[0] != job_id or k in self.host.keys.tentative:
            self.host.keys.tentative.discard(k)
            self.host.keys.taken.pop(k, None)
            self.host.keys.taken[k] = (job_id, until)
            self.host.keys.trim_keys()
            self.host.keys.log_keys([(k[0], k[1], job_id, until)])
        self.acc.pop(k, None)  # the IDEMKEY record supersedes the acceptor's state
        if announce:
            self.host.keys.announce(k, job_id, now_ms)
        p = self.prop.pop(k, None)
        if p is not None:
            self._resolve(k, job_id, p, now_ms)
        for i in losers:
            other = self.host.jobs.get(i)
            if other is not None and other.state != ACKED and other.idem_key == k[1]:
                self.host.stats["idem_copies_dropped"] = (
                    self.host.stats.get("idem_copies_dropped", 0) + 1
                )
                self._drop(other, job_id, now_ms)
        held = self.host.keys.held_retries.pop(k, None)
        for h in held or ():
            self.host.keys.held_retry_of.pop(h.token, None)
            self.host.replies.append((h.token, job_id))

    def _resolve(self, k: Key, job_id: str, p: _Proposal, now_ms: int) -> None:
        """The vote ``p`` is over: its clients get the key's job; its candidate lives
        (queued as its kind says) or is deleted everywhere."""
        for t in p.tokens:
            self.host.replies.append((t, job_id))
        j = self.host.jobs.get(p.job_id)
        if j is None:
            return
        if p.job_id != job_id:
            if j.state != ACKED:
                self._drop(j, job_id, now_ms)
            return
        if j.state == ACKED or j.state == QUEUED:
            return
        if p.kind == ADD:
            self.host.replication.finish_add(j, p.holders, now_ms)
        elif p.kind == AT_ONCE:
            if not j.delay_s:
                self.host._enqueue(j, now_ms)
            self.host._update_awake(j)  # or queued when its DELAY ends
        else:
            # A copy that won: requeued as any copy is, WILLQUEUE first, so holders that
            # decided at once do not all queue it (the QUEUED answers sort out the rest).
            j.flags |= BCAST_WILLQUEUE
            j.qtime_ms = now_ms + WILLQUEUE_ADVANCE_MS + int(self.host.rng.random() * 100)
            self.host._update_awake(j)

    def _drop(self, j: DJob, winner: str, now_ms: int) -> None:
        """A job that lost its key's vote goes from every holder; an add still waiting for
        its copies answers the winner's id (it is the key's job)."""
        if j.state == WAIT_REPL:
            self.host.blocked.answer_add_of(j.id, winner)
            j.state = ACTIVE
        self.host._delete_from_cluster(j, now_ms)

    # ------------------------------------------------------------------ the timer
    def _arm(self, at: int) -> None:
        if at and (self.timer_ms == 0 or at < self.timer_ms):
            self.timer_ms = at
            self.host.blocked.arm(at, KV_TIMER)

    def timer_fire(self, now_ms: int) -> None:
        """New rounds for votes without a majority in time; NOREPL for clients past their
        deadline (the vote goes on: its candidate must be decided, see the module doc)."""
        self.timer_ms = 0
        nxt = 0
        for k, p in list(self.prop.items()):
            if p.tokens and p.deadline_ms and p.deadline_ms <= now_ms:
                for t in p.tokens:
                    self.host.replies.append((t, DisqueError("NOREPL", NOREPL_TIMEOUT)))
                p.tokens = []
                p.deadline_ms = 0
                self.host.stats["noreply_timeouts"] += 1
            if p.job_id not in self.host.jobs and not p.tokens:
                del self.prop[k]  # its job went (acked, deleted, expired), nobody waits
                continue
            if p.retry_ms <= now_ms:
                self._round(k, p, now_ms)
                if k not in self.prop:
                    continue  # decided at once (this node alone is a majority)
            for at in (p.retry_ms, p.deadline_ms if p.tokens else 0):
                if at:
                    nxt = at if nxt == 0 else min(nxt, at)
        if nxt:
            self._arm(max(nxt, now_ms + 1))

    def cancel(self, token: int) -> bool:
        """A client waiting for a vote went away (the vote goes on)."""
        for p in self.prop.values():
            if token in p.tokens:
                p.tokens.remove(token)
                return True
        return False

    # ------------------------------------------------------------------ AOF
    def restore(self, now_ms: int, entries: list[KeyVoteEntry]) -> None:
        off = self.host.wall_offset_ms  # the file's times are wall-clock, memory's node-clock
        for queue, key, pn, pnode, an, anode, job_id, wall_until in entries:
            until = wall_until - off
            if until <= now_ms:
                continue
            self.acc[(queue, key)] = _Acceptor((pn, pnode), (an, anode), job_id, until)

    def after_restore(self) -> None:
        """Keys decided (IDEMKEY) need no acceptor state."""
        for k in [k for k in self.acc if self.decided_here(k)]:
            del self.acc[k]

    def records(self, now_ms: int) -> list[bytes]:
        """The KEYVOTE records of a rewritten AOF: acceptor state of undecided keys."""
        out: list[bytes] = []
        batch: list[KeyVoteEntry] = []
        for k, acc in list(self.acc.items()):
            if acc.until <= now_ms:
                del self.acc[k]
                continue
            pn, pnode = acc.promised
            an, anode = acc.accepted
            wall_until = acc.until + self.host.wall_offset_ms
            batch.append((k[0], k[1], pn, pnode, an, anode, acc.job_id, wall_until))
            if len(batch) >= KV_RECORD_KEYS:
                out.append(frame(REC_KEYVOTE, encode_keyvotes(batch)))
                batch = []
        if batch:
            out.append(frame(REC_KEYVOTE, encode_keyvotes(batch)))
        return out


def _count(stats: dict[str, int], name: str) -> None:
    stats[name] = stats.get(name, 0) + 1
