"""The state DisqueCore's components share: its types, the timer ids and the vote kinds.

What two components both touch lives here (a blocked ADDJOB, a held retry, a key's vote,
...), declared once, so neither imports the other for it. Each type stays the data of the
component named beside it; only that component's methods change what it means. The constants
here are the ones a type's defaults or another component need: the rest of a component's
tuning stays in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from disq.core.disque.api import AddOptions

Key = tuple[str, str]  # (queue, idempotency key)

# The tokens of the core's own timers in ``_client_timers`` (client tokens are positive):
# blocked.py's ``BlockedClients.process`` hands each to its part when it fires.
IDEM_TIMER = -1  # idempotency.py: resend unacknowledged keys, expire the window
KV_TIMER = -2  # keyvote.py: the vote rounds' retries


# ---------------------------------------------------------------------------- gone.py
# What gone.py's ``GoneJobs.how`` says of a job id no longer here; requeue.py answers a
# WILLQUEUE for it by it.
GONE_DELETED = 1  # a DELJOB deleted it: a copy elsewhere is deleted too
GONE_ACKED = 2  # acked here: a copy elsewhere is acked too


# ---------------------------------------------------------------------------- blocked.py
# Silent targets of a synchronous ADDJOB are asked again (REPLJOB) from 250 ms on, the gap
# doubling (blocked.py says why).
REPL_RESEND_MIN_MS = 250


@dataclass(slots=True)
class AddWait:
    """A client blocked in a synchronous ADDJOB."""

    job_id: str
    deadline_ms: int  # 0: wait forever
    next_repl_ms: int
    repl_backoff_ms: int
    resend_ms: int = 0  # when silent targets are asked again
    resend_every_ms: int = REPL_RESEND_MIN_MS  # doubles up to blocked.py's REPL_RESEND_MS


@dataclass(slots=True)
class GetWait:
    """A client blocked in GETJOB."""

    queues: list[str]
    deadline_ms: int  # 0: forever


# ---------------------------------------------------------------------------- handoff.py
class Handoff:
    """A job a leaving node is handing to a peer, until that peer's GOTJOB confirms it."""

    __slots__ = ("enqueue", "queued", "target", "tried", "until")

    def __init__(self, enqueue: bool, queued: bool) -> None:
        self.enqueue = enqueue  # send ENQUEUE behind the REPLJOB
        self.queued = queued  # it was queued here: queue it again if nobody takes it
        self.target = ""
        self.tried: list[str] = []
        self.until = 0


# ---------------------------------------------------------------------------- idempotency.py
@dataclass(slots=True)
class HeldRetry:
    """A keyed ADDJOB that met a tentative key: held until the key's add is decided."""

    token: int
    deadline_ms: int  # 0: none
    queue: str
    body: bytes
    args: AddOptions  # its own (the retry's), for when it runs


@dataclass(slots=True)
class HeldReply:
    """The answer of a done keyed add, held until every live peer has its key."""

    job_id: str
    tokens: list[int]
    deadline_ms: int
    waiting: set[str]


# ---------------------------------------------------------------------------- keyvote.py
Ballot = tuple[int, str]
NO_BALLOT: Ballot = (0, "")

KV_RETRY_MIN_MS = 200  # a vote round's first retry gap (keyvote.py doubles it)

# What the winner's job does when its vote is won (keyvote.py says why only the first two
# propose their own job). replication.py and core.py start votes of the first two kinds.
KV_ADD = 1  # the creator's add, its copies made: finish it (queue here or ENQUEUE a holder)
KV_AT_ONCE = 2  # an ASYNC or REPLICATE 1 add: queue it (it is registered, not queued)
KV_COPY = 4  # a copy (or a restarted creator's job) whose RETRY fired with the key undecided


@dataclass(slots=True)
class Acceptor:
    """What this node, as an acceptor of a key's vote, promised and accepted."""

    promised: Ballot
    accepted: Ballot
    job_id: str  # accepted job ("" none)
    until: int


@dataclass(slots=True)
class Proposal:
    """This node's proposal of a job for a key, and the clients waiting on it."""

    job_id: str  # this node's candidate
    kind: int
    ballot: Ballot = NO_BALLOT
    phase: int = 0  # KV_PREPARE or KV_ACCEPT while a round runs
    value: str = ""  # the job proposed in the ACCEPT round
    promises: dict[str, tuple[Ballot, str]] = field(default_factory=dict)
    accepts: set[str] = field(default_factory=set)
    tokens: list[int] = field(default_factory=list)  # clients waiting for the key's job
    deadline_ms: int = 0  # the clients' NOREPL deadline (0: none)
    retry_ms: int = 0  # a new round if this one has no majority by then
    backoff_ms: int = KV_RETRY_MIN_MS
    highest: int = 0  # the highest ballot number seen for the key
    holders: set[str] = field(default_factory=set)  # ADD: the confirmed copies
