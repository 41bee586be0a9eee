"""Dead letters the cluster keeps (disq's addition): a queue's MAXDELIVERIES and DEADLETTER
(QPOLICY, disq/core/policy/) applied on the server, and QREDRIVE, which moves them back.

**When.** A job has failed a delivery when it comes back: a NACK, or its RETRY running out
(the requeue that counts an additional delivery, core.py's ``_enqueue``). Its deliveries so
far are ``nacks + additional_deliveries`` once that failure is counted (the add's own
delivery is the first). When they reach the queue's MAXDELIVERIES the job is not queued
again: it is moved to the DEADLETTER queue, or, without one, dropped (acked) and counted.
So with MAXDELIVERIES 3 a job is delivered three times and the third failure moves it. A
NACK with a DELAY or a BACKOFF hold counts its failure at the NACK, so the hold's end moves
the job as well. At-most-once jobs (RETRY 0) are never queued again anyway and beanstalk
jobs follow the beanstalk engine's rule (a bury at the limit).

**Once, not once per copy** (Disque's objection to dead letter queues: every holder of a
copy may requeue the job, so several would each move it):

1. *The node that would requeue decides.* A requeue is already single-winner in the common
   case (WILLQUEUE asks the other holders first, a QUEUED answer stops it). The decider
   holds the job on every holder first (a WORKING with ``MOVE_HOLD_MS`` and the counters,
   as a NACK DELAY), so no holder queues it meanwhile, and a holder whose hold ends while
   the move is still unknown there decides in turn: its counters say the job is spent.
2. *The move is a keyed add.* The dead letter is a new job of the DEADLETTER queue with
   the idempotency key ``deadletter:<job id>`` (keyvote.py binds a key to one job by a
   majority vote). Two deciders (a partition, a hold that ended first elsewhere) both
   propose; the vote binds one job and the other add answers its id. Without a majority
   the add fails and is tried again ``RETRY_MS`` later: the job stays held, never queued
   and never dropped.
3. *Then the original is acked* (the ordinary ack: SETACK to every holder, the ack GC), only
   once the keyed add answered an id. A crash between the two leaves a bound key and a live
   job; the next decider's add answers the bound id and goes on to the ack. The price: the
   key window (an hour, idempotency.py) bounds how late that second decider may come; a
   job that stayed held longer than that (a minority partition for an hour) may be moved
   twice.

**What a dead letter keeps.** The body, the original's headers, and headers saying where it
came from (``HEADER_*`` below: the source queue, the reason, the original id, its
counters). A dead letter's copies follow the original's replication level (as many as the
reachable nodes hold, when fewer: a node down does not stop a move that a majority can
bind) and its RETRY (a consumer of the dead letter queue gets the time the original's
consumers had); its TTL is an add's default (a day), counted afresh: the dead letter
outlives its original. When the original's headers leave no room for those (``HEADERS_MAX``
pairs, ``HEADERS_MAX_BYTES``), the original's last ones are dropped, never the move.

**QREDRIVE** moves the dead letters queued on this node (as QLEN and QPEEK, a node's queue)
back to their source queue, or to the queue it names: each becomes a new job there (fresh
counters) by the same keyed add (``redrive:<dead letter id>``: a redrive repeated after a
crash adds nothing twice), the dead letter is acked once the new job exists, and the answer
counts the jobs moved (with the dead letter's replication and RETRY). A dead letter without
a source queue (not made by a policy) moves only with TO. Meanwhile the dead letter is held
on every holder, as a move holds.

A component of the core (``core.dead_letters``); the job table, the add and the ack are the
core's (:class:`DeadLetterHost`), the policies the cluster's table (``policies``, None on a
core without them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from disq.core import events as ev
from disq.core import ids
from disq.core.disque.api import PENDING, AddOptions, DisqueError, Pending
from disq.core.disque.host import CoreHost
from disq.core.disque.job import (
    ACTIVE,
    BCAST_QUEUED,
    BEANSTALK_ORIGIN,
    DEAD_LETTERING,
    DELIVERED,
    NACK_WAIT,
    QUEUED,
    DJob,
)
from disq.core.events import EventBuffer
from disq.core.job_record import Headers, headers_error

MOVE_HOLD_MS: Final = 10_000  # every holder holds a job being moved this long
MOVE_TIMEOUT_MS: Final = 5000  # a move's (or a redrive's) add waits this long for its copies
RETRY_MS: Final = 1000  # a move that failed (no majority, OOM, a paused queue) tries again
REDRIVE_MAX: Final = 10_000  # jobs one QREDRIVE moves at most (COUNT, or its default)

HEADER_SOURCE: Final = "disq-source-queue"
HEADER_REASON: Final = "disq-dead-reason"
HEADER_ORIGINAL: Final = "disq-original-id"
HEADER_NACKS: Final = "disq-nacks"
HEADER_DELIVERIES: Final = "disq-additional-deliveries"
DEAD_HEADERS: Final = frozenset(
    (HEADER_SOURCE, HEADER_REASON, HEADER_ORIGINAL, HEADER_NACKS, HEADER_DELIVERIES)
)
REASON_MAX_DELIVERIES: Final = b"maxdeliveries"


class PolicyLimits(Protocol):
    """The queue policies' limits (disq/core/policy/table.py's ``Policies``)."""

    def limit(self, queue: str) -> tuple[int, str]: ...


class Acker(Protocol):
    def ack_here(self, j: DJob, now_ms: int) -> None: ...


class Holder(Protocol):
    def _hold_everywhere(self, j: DJob, now_ms: int, wait_ms: int) -> None: ...


class DeadLetterHost(CoreHost, Protocol):
    """What the dead letters need of the core beyond its job table."""

    events: EventBuffer

    @property
    def acks(self) -> Acker: ...
    @property
    def requeue(self) -> Holder: ...

    def add_job(
        self, now_ms: int, token: int, queue: str, body: bytes, opts: AddOptions
    ) -> str | Pending: ...


class _Redrive:
    """A QREDRIVE whose adds are still out: its client's token, adds left, jobs moved."""

    def __init__(self, token: int) -> None:
        self.token = token
        self.left = 0
        self.moved = 0


class DeadLetters:
    """Moves to the DEADLETTER queue and back (QREDRIVE), with the adds in flight."""

    def __init__(self, host: DeadLetterHost) -> None:
        self.host = host
        self.policies: PolicyLimits | None = None
        self.new_token: Callable[[], int] | None = None  # set with the policies
        self.moves: dict[int, str] = {}  # a move's add token -> the job moved
        self.redrives: dict[int, tuple[str, _Redrive]] = {}  # add token -> (dead letter, call)

    # ------------------------------------------------------------------ the move
    def spent(self, j: DJob, now_ms: int, nack: bool) -> bool:
        """``j`` comes back here (``nack``: a NACK; else its requeue timer ran out): True if
        its queue's MAXDELIVERIES took it instead (a move started, or still going on);
        False: requeue it as usual."""
        if j.flags & DEAD_LETTERING and j.state == ACTIVE:
            j.qtime_ms = now_ms + MOVE_HOLD_MS  # its move's add is out: the answer decides
            self.host._update_awake(j)
            return True
        policies = self.policies
        if policies is None or j.state != ACTIVE or j.flags & BEANSTALK_ORIGIN:
            return False
        limit, dead_letter = policies.limit(j.queue)
        if limit <= 0 or (j.retry_s == 0 and j.flags & DELIVERED):
            return False
        # A NACK, or a RETRY run out of a job queued before: a failed delivery, not counted
        # yet. The end of a hold (NACK_WAIT) was counted at its NACK.
        failure = nack or (j.flags & BCAST_QUEUED and not j.flags & NACK_WAIT)
        if j.nacks + j.add_deliveries + (1 if failure else 0) < limit:
            return False
        if failure:
            if nack:
                j.nacks += 1
            else:
                j.add_deliveries += 1
        if not dead_letter:
            self._gone(j, now_ms, "jobs_dead_letter_dropped")
            return True
        self._move(j, now_ms, dead_letter)
        return True

    def _move(self, j: DJob, now_ms: int, dead_letter: str) -> None:
        self._count("dead_letter_moves")  # adds proposed (a retry, a second decider: more)
        key = "deadletter:" + j.id
        got = self._keyed_add(j, now_ms, dead_letter, key, dead_letter_headers(j))
        if got is None:
            self._failed(j, now_ms)
        elif isinstance(got, str):
            self._moved(j.id, got, now_ms)
        else:
            self.moves[got[1]] = j.id

    def _keyed_add(
        self, j: DJob, now_ms: int, queue: str, key: str, headers: Headers | None
    ) -> str | tuple[Pending, int] | None:
        """Hold ``j`` on every holder and add its body to ``queue`` under ``key``: the bound
        id, (PENDING, the add's token), or None (refused now)."""
        host = self.host
        j.flags |= DEAD_LETTERING
        host.requeue._hold_everywhere(j, now_ms, MOVE_HOLD_MS)  # logs the counters too
        token = self._token()
        opts = AddOptions(
            MOVE_TIMEOUT_MS,
            repl=self._repl(j),
            retry_s=j.retry_s or None,
            idem_key=key,
            headers=headers,
        )
        try:
            res = host.add_job(now_ms, token, queue, j.body, opts)
        except DisqueError:
            return None
        return res if isinstance(res, str) else (res, token)

    def _moved(self, job_id: str, dead_id: str, now_ms: int) -> None:
        """The key bound ``dead_id``: the original goes (acked everywhere)."""
        j = self.host.jobs.get(job_id)
        if j is None or j.state not in (ACTIVE, QUEUED):
            return  # acked or gone meanwhile: its ack already travels
        j.flags &= ~DEAD_LETTERING
        if ids.node_prefix(dead_id) != self.host.my_id[:8]:
            # Another decider's add won the vote: the move is its (and its event).
            self.host.acks.ack_here(j, now_ms)
            return
        self._gone(j, now_ms, "jobs_dead_lettered")

    def _gone(self, j: DJob, now_ms: int, stat: str) -> None:
        self._count(stat)
        deliveries = j.nacks + j.add_deliveries
        self.host.events.add(ev.DEADLETTERED, now_ms, j.queue, j.id, deliveries, len(j.body))
        self.host.acks.ack_here(j, now_ms)

    def _failed(self, j: DJob, now_ms: int) -> None:
        """The move's add failed: tried again RETRY_MS later, the job held meanwhile."""
        self._count("dead_letter_retries")
        j.flags &= ~DEAD_LETTERING
        if j.state == ACTIVE:
            j.qtime_ms = now_ms + RETRY_MS
            self.host._update_awake(j)

    # ------------------------------------------------------------------ QREDRIVE
    def redrive(self, now_ms: int, token: int, queue: str, to: str, count: int) -> int | Pending:
        """QREDRIVE: move up to ``count`` (0: ``REDRIVE_MAX``) dead letters queued here in
        ``queue`` to their source queue, or ``to``; the number moved, or PENDING (it
        arrives for ``token`` once every add answered)."""
        if to == queue:
            raise DisqueError("ERR", "QREDRIVE TO must name another queue")
        if not 0 <= count <= REDRIVE_MAX:
            raise DisqueError("ERR", f"COUNT value '{count}' is not an integer 1..{REDRIVE_MAX}")
        host = self.host
        q = host.queues.get(queue)
        if q is None or not q.skiplist:
            return 0
        count = count or REDRIVE_MAX
        call = _Redrive(token)
        picked: list[tuple[DJob, str]] = []
        for d in q.skiplist:
            if len(picked) >= count:
                break
            target = to or _header(d, HEADER_SOURCE)
            if target and target != queue:
                picked.append((d, target))
        for d, target in picked:
            host._dequeue(d)
            got = self._keyed_add(d, now_ms, target, "redrive:" + d.id, _kept(d))
            if got is None:
                self._unheld(d, now_ms)
            elif isinstance(got, str):
                self._redriven(d.id, call, now_ms)
            else:
                call.left += 1
                self.redrives[got[1]] = (d.id, call)
        if call.left:
            return PENDING
        return call.moved

    def _redriven(self, dead_id: str, call: _Redrive, now_ms: int) -> None:
        d = self.host.jobs.get(dead_id)
        if d is None or d.state not in (ACTIVE, QUEUED):
            return
        d.flags &= ~DEAD_LETTERING
        call.moved += 1
        self._count("jobs_redriven")
        self.host.events.add(ev.REDRIVEN, now_ms, d.queue, d.id, 0, len(d.body))
        self.host.acks.ack_here(d, now_ms)

    def _unheld(self, d: DJob, now_ms: int) -> None:
        """A redrive's add failed: the dead letter goes back into its queue here."""
        d.flags &= ~DEAD_LETTERING
        if d.state == ACTIVE:
            self.host._enqueue(d, now_ms, moved=True)

    # ------------------------------------------------------------------ answers
    def on_reply(self, now_ms: int, token: int, result: object) -> bool:
        """An add of ours answered (the core's replies carry it); False: not ours."""
        job_id = self.moves.pop(token, None)
        if job_id is not None:
            if isinstance(result, str):
                self._moved(job_id, result, now_ms)
            else:
                j = self.host.jobs.get(job_id)
                if j is not None:
                    self._failed(j, now_ms)
            return True
        entry = self.redrives.pop(token, None)
        if entry is None:
            return False
        dead_id, call = entry
        if isinstance(result, str):
            self._redriven(dead_id, call, now_ms)
        else:
            d = self.host.jobs.get(dead_id)
            if d is not None:
                self._unheld(d, now_ms)
        call.left -= 1
        if call.left == 0:
            self.host.replies.append((call.token, str(call.moved)))
        return True

    def _repl(self, j: DJob) -> int:
        """The moved job's copies: ``j``'s, or as many as the reachable nodes hold (a peer
        down does not stop the move; the key vote still needs a majority)."""
        return max(1, min(j.repl, len(self.host.view.reachable_peers()) + 1))

    def _count(self, stat: str) -> None:
        stats = self.host.stats
        stats[stat] = stats.get(stat, 0) + 1

    def has_adds(self) -> bool:
        return bool(self.moves or self.redrives)

    def _token(self) -> int:
        new_token = self.new_token
        if new_token is None:
            raise DisqueError("ERR", "dead letters need the node's token source")
        return new_token()


def _header(j: DJob, key: str) -> str:
    for k, v in j.headers or ():
        if k == key:
            return v.decode("utf-8", "surrogateescape")
    return ""


def _kept(j: DJob) -> Headers | None:
    """``j``'s headers without the ones a move added (a redrive's new job)."""
    kept = tuple(kv for kv in j.headers or () if kv[0] not in DEAD_HEADERS)
    return kept or None


def dead_letter_headers(j: DJob) -> Headers:
    """The dead letter's headers: the original's (the last ones dropped while they leave no
    room), then where it came from."""
    ours: Headers = (
        (HEADER_SOURCE, j.queue.encode("utf-8", "surrogateescape")),
        (HEADER_REASON, REASON_MAX_DELIVERIES),
        (HEADER_ORIGINAL, j.id.encode("latin-1")),
        (HEADER_NACKS, str(j.nacks).encode()),
        (HEADER_DELIVERIES, str(j.add_deliveries).encode()),
    )
    theirs = _kept(j) or ()
    while True:
        headers = theirs + ours
        if not theirs or not headers_error(headers):
            return headers
        theirs = theirs[:-1]
