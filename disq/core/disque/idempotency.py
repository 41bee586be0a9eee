"""Idempotent ADDJOB (disq's addition): a key repeated on a queue within the window adds nothing
and answers the first job's id.

On a cluster, which job a key names is decided by a vote of a majority (keyvote.py): this
module keeps the key table, persists and announces decided keys (the learners' path), and
holds retries that meet an undecided key. With ``vote_keys`` off (a single node, or tests of
this layer), the rules below decide alone, and cannot promise one job per key under
partitions (keyvote.py says why).

Keys are remembered node-wide in ``KeyTable.taken``, oldest first (insertion order). A key is either
*done* (its add finished: the node's own once its copies exist, or learned from a peer) or
*tentative* (``_idem_tentative``: known only from a copy, REPLJOB or the creator's own add
still waiting, whose add may still fail).

- **Travel.** Inside the job (REPLJOB, YOURJOBS, the AOF's LOADJOB): every holder knows its
  job's key, tentatively. By IDEMKEYS once the add is done: every peer gets the key, resent
  on a timer with backoff (250 ms doubling to 5 s; nothing is sent while the peer is dead)
  until that peer acknowledges it (the ``ack_*`` columns of IDEMKEYS, sent only once the key
  is persisted there). A restarted node announces its own keys again to every peer.
- **Persistence.** A key turning done on a node is written as an IDEMKEY record (before any
  ack leaves: the Ready rule), kept by rewrites for its window, after its job is gone too.
- **A retry meeting a tentative key** is held (``_held_retries``) until the key is done (it
  answers the id), or its copy is deleted unacked (its add failed: the retry is run as a new
  add), or its own timeout (NOREPL): a holder never answers the id of a job whose add may
  still fail (the race where a retry beat the failed add's DELJOB to a holder).
- **A done keyed add's reply waits** (``_held_replies``) until every live peer (not dead;
  leaving ones included) has acknowledged the key, or is declared dead, or the add's timeout
  (5 s without one): a client that has its id and retries anyway finds the key on every
  node that was connected.
- A done key announced by a peer for another job than a tentative copy here wins: that copy
  (an add that never finished here, e.g. its creator crashed) is deleted, so the key keeps one
  job.

The ADDJOBs that repeat a key while the first add still waits for its copies wait with it
(``followers``, in blocked.py).

A component of the core (``core.keys``): it owns the key table, the announcements and the
held retries and replies; the job table and the messages are the core's (:class:`IdemHost`),
and a vote on a key is keyvote.py's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from disq.core import ids
from disq.core.disque.api import (
    NOREPL_TIMEOUT,
    PENDING,
    AddOptions,
    DisqueError,
    Pending,
)
from disq.core.disque.blocked import BlockedClients
from disq.core.disque.gone import GoneJobs
from disq.core.disque.host import CoreHost
from disq.core.disque.job import ACKED, DELIVERED, WAIT_REPL, DJob
from disq.core.disque.state import IDEM_TIMER, Key
from disq.core.disque.state import HeldReply as _HeldReply
from disq.core.disque.state import HeldRetry as _HeldRetry
from disq.core.messages import IdemKeys
from disq.persistence.cluster_records import REC_IDEMKEY, IdemKeyEntry, encode_idemkeys
from disq.persistence.framing import frame

# Idempotent adds: a key is remembered this long after its add (node-wide), for at most
# IDEM_MAX_KEYS keys (the oldest go first): a retry after that adds a second job.
IDEM_WINDOW_MS = 3_600_000
IDEM_MAX_KEYS = 1_000_000
IDEM_KEY_MAX_BYTES = 256
# Announcements a peer has not acknowledged are sent again after 250 ms, doubling to 5 s; a
# dead peer is looked at again every 500 ms (nothing is sent to it).
IDEM_RESEND_MIN_MS = 250
IDEM_RESEND_MAX_MS = 5000
IDEM_UNREACHABLE_CHECK_MS = 500
IDEM_LIVE_CHECK_MS = 500  # while keys are in their window: did a dead peer come back?
IDEM_BATCH_KEYS = 10_000  # keys per resent IDEMKEYS
IDEM_RECORD_KEYS = 1000  # keys per IDEMKEY record in a rewrite
# A done add without a timeout holds its reply at most this long for its key's acks.
IDEM_REPLY_WAIT_MS = 5000
# An IDEMKEYS entry whose job id starts with this says that job's add failed.
FAILED = "-"


class VoteLearner(Protocol):
    """What the keys need of the key votes (keyvote.py's KeyVoting)."""

    def learn(self, k: Key, job_id: str, now_ms: int, announce: bool) -> None: ...


class IdemHost(CoreHost, Protocol):
    """What the idempotency keys need of the core."""

    vote_keys: bool
    blocked: BlockedClients

    @property
    def votes(self) -> VoteLearner: ...

    gone: GoneJobs

    def add_job(
        self, now_ms: int, token: int, queue: str, body: bytes, opts: AddOptions
    ) -> str | Pending: ...


class KeyTable:
    """The idempotency keys of this node: the key table (``taken``: key -> (job id, until),
    in age order; ``tentative``: keys whose add is not done), their announcements to peers,
    and the retries and replies held for a key."""

    def __init__(self, host: IdemHost) -> None:
        self.host = host
        self.taken: OrderedDict[Key, tuple[str, int]] = OrderedDict()
        self.tentative: set[Key] = set()
        self.shadow: dict[Key, list[str]] = {}  # other tentative copies of a key, older
        self.unacked: dict[str, dict[Key, str]] = {}  # peer -> keys it has not acknowledged
        self.resend: dict[str, tuple[int, int]] = {}  # peer -> (next resend, backoff)
        self.timer_ms = 0  # the armed timer (0: none)
        self.reannounce_due = False  # restored: announce the node's own keys again
        self.live: set[str] = set()  # the live peers the timer saw last (one back: resend)
        self.held_retries: dict[Key, list[_HeldRetry]] = {}
        self.held_retry_of: dict[int, Key] = {}
        self.held_replies: dict[Key, _HeldReply] = {}
        self.held_reply_of: dict[int, Key] = {}
        self.reruns: list[_HeldRetry] = []
        self.window_ms = IDEM_WINDOW_MS
        self.reply_wait = True  # a done keyed add answers once peers have its key

    def reset(self) -> None:
        """FLUSHALL: no key, nothing held (flush.py answered the held clients)."""
        self.taken.clear()
        self.tentative.clear()
        self.shadow.clear()
        self.unacked.clear()
        self.resend.clear()
        self.timer_ms = 0
        self.reannounce_due = False
        self.live.clear()
        self.held_retries.clear()
        self.held_retry_of.clear()
        self.held_replies.clear()
        self.held_reply_of.clear()
        self.reruns.clear()

    # ------------------------------------------------------------------ the key table
    def remember_key(self, j: DJob, now_ms: int, tentative: bool = True) -> None:
        """``j`` carries a key: tentatively (a copy, or this node's add still waiting), or
        done (``tentative=False``: a job handed over queued, YOURJOBS)."""
        if not j.idem_key:
            return
        k = (j.queue, j.idem_key)
        if not tentative:
            if self._take_key(k, j.id, now_ms + self.window_ms, now_ms):
                self.log_keys([(k[0], k[1], j.id, self.taken[k][1])])
            return
        hit = self.taken.get(k)
        if hit is not None and k not in self.tentative:
            return  # the key is done for a job already: a copy does not change that
        if hit is not None and hit[0] != j.id:
            self.shadow.setdefault(k, []).append(hit[0])  # two unfinished adds
        self.taken.pop(k, None)
        self.taken[k] = (j.id, now_ms + self.window_ms)
        self.tentative.add(k)
        self.trim_keys()

    def _take_key(self, k: Key, job_id: str, until: int, now_ms: int) -> bool:
        """The key is done for ``job_id``; True if that is new here (to be persisted). The
        first done job of a key wins; a tentative copy of another job loses the key and is
        deleted (its add never finished here: it would be a second job of the key)."""
        hit = self.taken.get(k)
        tentative = k in self.tentative
        if hit is not None and not tentative:
            return False
        if hit is not None and tentative and (hit[0] != job_id or k in self.shadow):
            # Other jobs held the key tentatively here (copies of unfinished adds).
            losers = [i for i in [*self.shadow.get(k, ()), hit[0]] if i != job_id]
            for i in losers:
                other = self.host.jobs.get(i)
                if other is not None and (
                    other.state == WAIT_REPL or i in self.host.blocked.add_by_job
                ):
                    return False  # this node's own add of the key still waits: it keeps it
            self.shadow.pop(k, None)
            for i in losers:
                other = self.host.jobs.get(i)
                if other is not None and other.state != ACKED and other.idem_key == k[1]:
                    self.host.stats["idem_copies_dropped"] = (
                        self.host.stats.get("idem_copies_dropped", 0) + 1
                    )
                    self.host._log_del(other.id)
                    self.host._unregister(other, now_ms)
        self.tentative.discard(k)
        self.taken.pop(k, None)
        self.taken[k] = (job_id, until)
        self.trim_keys()
        held = self.held_retries.pop(k, None)
        for h in held or ():
            self.held_retry_of.pop(h.token, None)
            self.host.replies.append((h.token, job_id))
        return True

    def trim_keys(self) -> None:
        idem = self.taken
        while len(idem) > IDEM_MAX_KEYS:
            k = next(iter(idem))
            del idem[k]
            self.tentative.discard(k)
            self.shadow.pop(k, None)

    def _known_key(self, queue: str, key: str, now_ms: int) -> str | None:
        """The id of the job first added with this key, if still in the window."""
        self.expire_keys(now_ms)
        hit = self.taken.get((queue, key))
        return hit[0] if hit is not None else None

    def decided_key(self, queue: str, key: str, now_ms: int) -> str:
        """The job a key is bound to here, done (not tentative), or "" (the scheduler asks
        before it fires a tick another node may have bound already)."""
        first = self._known_key(queue, key, now_ms)
        if first is None or (queue, key) in self.tentative:
            return ""
        return first

    def expire_keys(self, now_ms: int) -> None:
        idem = self.taken
        while idem:
            k = next(iter(idem))
            if idem[k][1] > now_ms:
                return
            del idem[k]
            self.tentative.discard(k)
            self.shadow.pop(k, None)

    def log_keys(self, entries: list[IdemKeyEntry]) -> None:
        if self.host.persist and entries:
            self.host.aof_out.append(frame(REC_IDEMKEY, encode_idemkeys(self._wall_keys(entries))))

    def _wall_keys(self, entries: list[IdemKeyEntry]) -> list[IdemKeyEntry]:
        """The entries with their window's end on the wall clock, as the AOF keeps it
        (in memory it is on the node clock, disq/server/clock.py)."""
        off = self.host.wall_offset_ms
        if not off:
            return entries
        return [(q, k, job_id, until + off) for q, k, job_id, until in entries]

    def forget_key(self, j: DJob, now_ms: int | None = None) -> None:
        """``j`` was deleted before its add was known done (NOREPL, cancelled, a copy
        DELJOBed unacked): a retry with the key must add the job. A done key stays: its job
        existed (a FASTACKed job's retry answers its id)."""
        if not j.idem_key:
            return
        k = (j.queue, j.idem_key)
        hit = self.taken.get(k)
        if hit is None or hit[0] != j.id or k not in self.tentative:
            return
        del self.taken[k]
        self.tentative.discard(k)
        if j.state == WAIT_REPL and ids.node_prefix(j.id) == self.host.my_id[:8]:
            # This node's add failed: its copies must not outlive it (a lost DELJOB would
            # leave a copy that is requeued and delivered beside the job a retry adds).
            now = now_ms if now_ms is not None else j.ctime // 1_000_000 - self.host.wall_offset_ms
            self.announce(k, FAILED + j.id, now)
        shadow = self.shadow.pop(k, None)
        while shadow:  # an older unfinished add's copy is here still: the key names it
            older = self.host.jobs.get(shadow.pop())
            if older is not None and older.idem_key == k[1] and older.state != ACKED:
                self.taken[k] = (older.id, hit[1])
                self.tentative.add(k)
                if shadow:
                    self.shadow[k] = shadow
                return  # held retries wait for that add now
        held = self.held_retries.pop(k, None)
        if held:
            for h in held:
                self.held_retry_of.pop(h.token, None)
            if now_ms is None:
                self.reruns.extend(held)
                self._arm(0)
            else:
                self._rerun(held, now_ms)

    def _adopt_key(self, j: DJob, now_ms: int) -> None:
        """A copy whose add was never known done was delivered here: it is the key's job.
        The key is done here and every peer is told, as its creator would have."""
        k = (j.queue, j.idem_key)
        hit = self.taken.get(k)
        if not j.idem_key or hit is None or hit[0] != j.id or k not in self.tentative:
            return
        if self._take_key(k, j.id, hit[1], now_ms):
            self.log_keys([(k[0], k[1], j.id, hit[1])])
            self.announce(k, j.id, now_ms)

    def key_done(self, j: DJob, now_ms: int) -> None:
        """Evidence that ``j``'s add finished (it was acked): its tentative key is done."""
        if not j.idem_key:
            return
        k = (j.queue, j.idem_key)
        hit = self.taken.get(k)
        if hit is not None and hit[0] == j.id and k in self.tentative:
            if ids.node_prefix(j.id) == self.host.my_id[:8]:
                self.announce_key(j, now_ms)
            elif self._take_key(k, j.id, hit[1], now_ms):
                self.log_keys([(k[0], k[1], j.id, hit[1])])

    # ------------------------------------------------------------------ ADDJOB
    def keyed_add(
        self,
        now_ms: int,
        token: int,
        queue: str,
        key: str,
        body: bytes,
        timeout_ms: int,
        args: AddOptions,
    ) -> str | Pending | None:
        """ADDJOB's key lookup: the first job's id, PENDING (the answer comes later), or
        None (a new job must be added)."""
        first = self._known_key(queue, key, now_ms)
        if first is None:
            return None
        leader = self.host.blocked.add_by_job.get(first)
        if leader is not None:  # the first add still waits for its copies: wait with it
            self.host.blocked.follow(leader, token)
            return PENDING
        k = (queue, key)
        held = self.held_replies.get(k)
        if held is not None and held.job_id == first:
            held.tokens.append(token)
            self.held_reply_of[token] = k
            return PENDING
        if k not in self.tentative:
            return first
        if self.host.vote_keys and self.host.view.cluster_size() > 1:
            # Undecided here: the retry adds its own job and votes (keyvote.py). If another
            # job of the key was accepted, the vote binds that one and answers its id; a copy
            # never decides by itself, so holding the retry for it could wait forever.
            return None
        copy = self.host.jobs.get(first)
        if copy is None:  # the copy is gone and its add never known done
            del self.taken[k]
            self.tentative.discard(k)
            return None
        if copy.flags & DELIVERED:  # a consumer has it: it is the key's job, whatever its add
            self._adopt_key(copy, now_ms)
            return first
        deadline = now_ms + timeout_ms if timeout_ms > 0 else 0
        self.held_retries.setdefault(k, []).append(_HeldRetry(token, deadline, queue, body, args))
        self.held_retry_of[token] = k
        self.host.stats["idem_retries_held"] = self.host.stats.get("idem_retries_held", 0) + 1
        if deadline:
            self._arm(deadline)
        return PENDING

    def _rerun(self, held: list[_HeldRetry], now_ms: int) -> None:
        """Held retries whose key's first add failed: each runs as the add it is."""
        for h in held:
            left = h.deadline_ms - now_ms if h.deadline_ms else 0
            if h.deadline_ms and left <= 0:
                self.host.replies.append((h.token, DisqueError("NOREPL", NOREPL_TIMEOUT)))
                continue
            try:
                res = self.host.add_job(now_ms, h.token, h.queue, h.body, h.args.with_timeout(left))
            except DisqueError as e:
                self.host.replies.append((h.token, e))
                continue
            if isinstance(res, str):
                self.host.replies.append((h.token, res))

    def hold_reply(self, j: DJob, tokens: list[int], deadline_ms: int, now_ms: int) -> bool:
        """A done keyed add: hold its answer until every live peer acknowledged the key (or
        was declared dead, or the add's timeout). False: answer now."""
        if not self.reply_wait or not j.idem_key or not tokens:
            return False
        unacked = self.unacked
        if not unacked:
            return False  # no peer owes an acknowledgement (a single node, or all caught up)
        k = (j.queue, j.idem_key)
        # Every live peer (leaving and suspected ones too: they take adds as well).
        waiting = {p for p in self.host.view.all_peers() if k in unacked.get(p, ())}
        if not waiting:
            return False
        if not deadline_ms or deadline_ms <= now_ms:
            deadline_ms = now_ms + IDEM_REPLY_WAIT_MS
        for t in tokens:
            self.held_reply_of[t] = k
        self.held_replies[k] = _HeldReply(j.id, list(tokens), deadline_ms, waiting)
        self.host.stats["idem_replies_held"] = self.host.stats.get("idem_replies_held", 0) + 1
        self._arm(deadline_ms)
        return True

    def _release_reply(self, k: Key) -> None:
        held = self.held_replies.pop(k, None)
        if held is None:
            return
        for t in held.tokens:
            self.held_reply_of.pop(t, None)
            self.host.replies.append((t, held.job_id))

    def cancel(self, token: int) -> bool:
        """A held keyed add's client went away."""
        k = self.held_retry_of.pop(token, None)
        if k is not None:
            rest = [h for h in self.held_retries.get(k, ()) if h.token != token]
            if rest:
                self.held_retries[k] = rest
            else:
                self.held_retries.pop(k, None)
            return True
        k = self.held_reply_of.pop(token, None)
        if k is not None:
            held = self.held_replies.get(k)
            if held is not None and token in held.tokens:
                held.tokens.remove(token)
                if not held.tokens:
                    del self.held_replies[k]
            return True
        return False

    # ------------------------------------------------------------------ announcements
    def announce_key(self, j: DJob, now_ms: int | None = None) -> None:
        """The add is done (its copies exist): the key is done here (persisted) and every
        peer learns it, again and again until it acknowledges it. Never before: an add
        that may still fail must not leave peers answering the id of a job that never was."""
        if not j.idem_key:
            return
        now = now_ms if now_ms is not None else j.ctime // 1_000_000 - self.host.wall_offset_ms
        k = (j.queue, j.idem_key)
        hit = self.taken.get(k)
        until = hit[1] if hit is not None and hit[0] == j.id else now + self.window_ms
        if self._take_key(k, j.id, until, now):
            self.log_keys([(k[0], k[1], j.id, until)])
        if self.taken.get(k, ("",))[0] != j.id:
            return  # another job had the key here first
        self.announce(k, j.id, now)

    def announce(self, k: Key, job_id: str, now: int) -> None:
        """``k`` is done for ``job_id`` (or, ``FAILED`` + id, that job's add failed): every
        peer is told, again on the timer until it acknowledges (a dead one once it is back)."""
        me = self.host.my_id
        peers = [node for node in self.host.view.all_peers() if node != me]
        if not peers:
            return  # a single node: nobody to tell, no timer to arm
        msg = IdemKeys([k[0]], [k[1]], [job_id])
        if not self.timer_ms:
            self._arm(now + IDEM_LIVE_CHECK_MS)
        for node in peers:
            self.unacked.setdefault(node, {})[k] = job_id
            self.host._send(node, msg)
            if node not in self.resend:
                self.resend[node] = (now + IDEM_RESEND_MIN_MS, IDEM_RESEND_MIN_MS)
                self._arm(now + IDEM_RESEND_MIN_MS)

    def on_idem_keys(self, now_ms: int, sender: str, msg: IdemKeys) -> None:
        if msg.keys:
            until = now_ms + self.window_ms
            learned: list[IdemKeyEntry] = []
            voting = self.host.vote_keys and self.host.view.cluster_size() > 1
            for queue, key, job_id in zip(msg.queues, msg.keys, msg.job_ids, strict=False):
                if job_id.startswith(FAILED):
                    self._drop_failed(job_id[len(FAILED) :], now_ms)
                elif voting:
                    # Decided by a vote (keyvote.py): binding, whatever this node had.
                    self.host.votes.learn((queue, key), job_id, now_ms, announce=False)
                elif self._take_key((queue, key), job_id, until, now_ms):
                    learned.append((queue, key, job_id, until))
            self.log_keys(learned)  # before the ack leaves (records first, then messages)
            self.host._send(sender, IdemKeys([], [], [], list(msg.queues), list(msg.keys)))
        if msg.ack_keys:
            pend = self.unacked.get(sender)
            for k in zip(msg.ack_queues, msg.ack_keys, strict=False):
                if pend is not None:
                    pend.pop(k, None)
                held = self.held_replies.get(k)
                if held is not None:
                    held.waiting.discard(sender)
                    if not held.waiting:
                        self._release_reply(k)
            if pend is not None and not pend:
                del self.unacked[sender]
                self.resend.pop(sender, None)
            elif sender in self.resend:
                # Progress: the peer is there; the next resend comes soon again.
                nxt = self.resend[sender][0]
                self.resend[sender] = (nxt, IDEM_RESEND_MIN_MS)

    def _drop_failed(self, job_id: str, now_ms: int) -> None:
        """The add of ``job_id`` failed on its creator: a copy here whose key is still
        tentative is deleted (and its key forgotten: held retries run as new adds)."""
        j = self.host.jobs.get(job_id)
        if j is None:
            self.host.gone.tombstone(job_id, now_ms)  # a late REPLJOB must not bring it back
            return
        if j.state == ACKED:
            return  # somebody consumed it: it lives on
        if j.flags & DELIVERED:
            self._adopt_key(j, now_ms)  # delivered here already: it is the key's job
            return
        k = (j.queue, j.idem_key)
        if j.idem_key and (self.taken.get(k, ("",))[0] != job_id or k not in self.tentative):
            return  # known done here after all
        self.host._log_del(job_id)
        self.forget_key(j, now_ms)
        self.host._unregister(j, now_ms)

    # ------------------------------------------------------------------ the timer
    def _arm(self, at: int) -> None:
        if self.timer_ms == 0 or at < self.timer_ms:
            self.timer_ms = at
            self.host.blocked.arm(at, IDEM_TIMER)

    def timer_fire(self, now_ms: int) -> None:
        """Resend what peers have not acknowledged, release held answers, time out held
        retries, run the retries whose key was dropped."""
        self.timer_ms = 0
        if self.reruns:
            reruns, self.reruns = self.reruns, []
            self._rerun(reruns, now_ms)
        if self.reannounce_due:
            self._reannounce(now_ms)
        live = set(self.host.view.all_peers())
        back = live - self.live
        self.live = live
        if back and self.taken:
            self._reannounce(now_ms, back)  # announced while they were dead, or new
        # Live peers (all_peers: not dead; leaving and suspected ones included) get resends;
        # a dead one is looked at again now and then (it may come back; its expired keys go).
        reach = set(self.host.view.all_peers())
        nxt = 0
        for peer in list(self.unacked):
            at, every = self.resend.get(peer, (now_ms, IDEM_RESEND_MIN_MS))
            if at <= now_ms:
                if peer in reach:
                    self._resend_keys(peer)
                    at, every = now_ms + every, min(every * 2, IDEM_RESEND_MAX_MS)
                else:
                    self._prune_unacked(peer)
                    at, every = now_ms + IDEM_UNREACHABLE_CHECK_MS, IDEM_RESEND_MIN_MS
                if peer not in self.unacked:
                    continue
                self.resend[peer] = (at, every)
            nxt = at if nxt == 0 else min(nxt, at)
        for k, held in list(self.held_replies.items()):
            held.waiting &= reach
            if not held.waiting or held.deadline_ms <= now_ms:
                self._release_reply(k)
            else:
                nxt = held.deadline_ms if nxt == 0 else min(nxt, held.deadline_ms)
        for k, hs in list(self.held_retries.items()):
            keep = []
            for h in hs:
                if h.deadline_ms and h.deadline_ms <= now_ms:
                    self.held_retry_of.pop(h.token, None)
                    self.host.replies.append((h.token, DisqueError("NOREPL", NOREPL_TIMEOUT)))
                else:
                    keep.append(h)
                    if h.deadline_ms:
                        nxt = h.deadline_ms if nxt == 0 else min(nxt, h.deadline_ms)
            if keep:
                self.held_retries[k] = keep
            else:
                del self.held_retries[k]
        if self.reannounce_due:
            nxt = now_ms + IDEM_RESEND_MAX_MS if nxt == 0 else min(nxt, now_ms + IDEM_RESEND_MAX_MS)
        if self.taken:  # watch for peers coming back while keys are in their window
            nxt = now_ms + IDEM_LIVE_CHECK_MS if nxt == 0 else min(nxt, now_ms + IDEM_LIVE_CHECK_MS)
        if nxt:
            self._arm(max(nxt, now_ms + 1))

    def _prune_unacked(self, peer: str) -> None:
        """Drop a dead peer's announcements whose key left the window (oldest first)."""
        pend = self.unacked[peer]
        idem = self.taken
        for k in list(pend):
            if k in idem or pend[k].startswith(FAILED):
                break
            del pend[k]
        if not pend:
            del self.unacked[peer]
            self.resend.pop(peer, None)

    def _resend_keys(self, peer: str) -> None:
        pend = self.unacked[peer]
        queues: list[str] = []
        keys: list[str] = []
        job_ids: list[str] = []
        for k, job_id in list(pend.items()):
            hit = self.taken.get(k)
            if job_id.startswith(FAILED):
                pass  # a failed add's notice: until acknowledged
            elif hit is None or hit[0] != job_id or k in self.tentative:
                del pend[k]  # expired, or no longer this node's to announce
                continue
            queues.append(k[0])
            keys.append(k[1])
            job_ids.append(job_id)
            if len(keys) >= IDEM_BATCH_KEYS:
                break
        if not pend:
            del self.unacked[peer]
            self.resend.pop(peer, None)
        if keys:
            self.host.stats["idem_resent"] = self.host.stats.get("idem_resent", 0) + len(keys)
            self.host._send(peer, IdemKeys(queues, keys, job_ids))

    def _reannounce(self, now_ms: int, to: set[str] | None = None) -> None:
        """The node's own done keys go to every peer again after a restart (which of them
        each peer had acknowledged was not persisted), or to peers that came back."""
        peers = [
            p
            for p in self.host.view.all_peers()
            if p != self.host.my_id and (to is None or p in to)
        ]
        if not peers:
            return
        if to is None:
            self.reannounce_due = False
        mine = self.host.my_id[:8]
        own = {
            k: v[0]
            for k, v in self.taken.items()
            if k not in self.tentative and ids.node_prefix(v[0]) == mine
        }
        if not own:
            return
        for p in peers:
            pend = self.unacked.setdefault(p, {})
            for k, job_id in own.items():
                pend.setdefault(k, job_id)
            self.resend[p] = (now_ms, IDEM_RESEND_MIN_MS)

    # ------------------------------------------------------------------ AOF
    def restore_keys(self, now_ms: int, entries: list[IdemKeyEntry]) -> None:
        """IDEMKEY records at start: those keys are done (later records win). Their
        windows' ends are wall-clock in the file."""
        off = self.host.wall_offset_ms
        for queue, key, job_id, wall_until in entries:
            until = wall_until - off
            if until <= now_ms:
                continue
            k = (queue, key)
            self.tentative.discard(k)
            self.taken.pop(k, None)
            self.taken[k] = (job_id, until)
        self.trim_keys()
        self.reannounce_due = True
        self._arm(now_ms)

    def records(self) -> list[bytes]:
        """The IDEMKEY records of a rewritten AOF: every done key in its window (tentative
        ones travel in their job's LOADJOB)."""
        out: list[bytes] = []
        batch: list[IdemKeyEntry] = []
        tentative = self.tentative
        for (queue, key), (job_id, until) in self.taken.items():
            if (queue, key) in tentative:
                continue
            batch.append((queue, key, job_id, until))
            if len(batch) >= IDEM_RECORD_KEYS:
                out.append(frame(REC_IDEMKEY, encode_idemkeys(self._wall_keys(batch))))
                batch = []
        if batch:
            out.append(frame(REC_IDEMKEY, encode_idemkeys(self._wall_keys(batch))))
        return out


def _count(stats: dict[str, int], name: str) -> None:
    stats[name] = stats.get(name, 0) + 1
