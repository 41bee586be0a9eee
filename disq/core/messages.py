"""Node-to-node messages as the pure cores see them (proto/disq/v1/cluster.proto).

The cores (membership, cluster) never see protobuf: they take and return these plain slotted
classes, so the simulator can move them between in-process nodes without serialising, and
the gRPC link layer (disq/server/peer_link.py) converts a whole frame at once at the edge.
Names and meanings are Disque's (reference/anchors.md 2.5).

An outbox entry is ``(destination node id, message)``; the IO layer groups one iteration's
entries by destination and sends each peer one frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from disq.core.job_record import ID_LEN, RECORD, Headers, body_end, decode_trailer, pack_record

# Member states (SWIM). Ints for cheap comparison, same numbers as the proto enum.
ALIVE = 1
SUSPECT = 2
DEAD = 3
LEFT = 4

MEMBER_STATE_NAMES = {ALIVE: "alive", SUSPECT: "suspect", DEAD: "dead", LEFT: "left"}


# Each class's fields, in its constructor's order (what a dataclass's ``fields()`` gave).
FIELDS: dict[type, tuple[str, ...]] = {}


class _Message:
    """The messages' equality and repr, a dataclass's, from FIELDS.

    Plain classes with their own __init__, not @dataclass: a compiled module still runs the
    dataclass decorator at import, which built the classes' methods from source there (25
    classes: 6-7 ms of every start of a node with a cluster half, before its first answer).
    Member and JobData stay dataclasses: membership and the hand-off copy them with
    ``dataclasses.replace``. Equality and repr are for tests and logs, never on a hot path,
    so one generic pair serves all."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return False
        return all(getattr(self, f) == getattr(other, f) for f in FIELDS[type(self)])

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in FIELDS[type(self)])
        return f"{type(self).__name__}({shown})"


@dataclass(slots=True)
class Member:
    node_id: str  # 40 hex chars
    host: str
    grpc_port: int
    client_port: int  # RESP port, for HELLO
    incarnation: int  # only the node itself raises it, to refute suspicion
    state: int  # ALIVE / SUSPECT / DEAD / LEFT
    leaving: bool = False


FIELDS[Member] = tuple(f.name for f in fields(Member))


class Ping(_Message):
    __slots__ = ("gossip", "meet", "probe_id")

    def __init__(
        self,
        probe_id: int,
        gossip: list[Member] | None = None,
        meet: bool = False,  # CLUSTER MEET / --join (membership.meet_message)
    ) -> None:
        self.probe_id = probe_id
        self.gossip = [] if gossip is None else gossip
        self.meet = meet


FIELDS[Ping] = ("probe_id", "gossip", "meet")


class Ack(_Message):
    __slots__ = ("gossip", "probe_id", "target")

    def __init__(
        self,
        probe_id: int,
        target: str = "",  # set when answering on behalf of a PingReq
        gossip: list[Member] | None = None,
    ) -> None:
        self.probe_id = probe_id
        self.target = target
        self.gossip = [] if gossip is None else gossip


FIELDS[Ack] = ("probe_id", "target", "gossip")


class PingReq(_Message):
    __slots__ = ("probe_id", "target")

    def __init__(self, probe_id: int, target: str) -> None:
        self.probe_id = probe_id
        self.target = target


FIELDS[PingReq] = ("probe_id", "target")


# The beanstalk state a replicated beanstalk job's copies carry (JobData.bstate,
# BeanstalkUpdate.bstate): beanstalkd's own numbers, only the two a copy can be taken over in.
BSTATE_READY = 0
BSTATE_BURIED = 3


# JobData's fields kept only in the AOF: they never travel (a module constant, not a ClassVar:
# mypyc's dataclasses take a ClassVar with a value for a field with a default).
AOF_ONLY_FIELDS: dict[type, tuple[str, ...]] = {}


@dataclass(slots=True)
class JobData:
    """A job as it travels: TTL relative (clocks differ between nodes), counters included.

    The same record is the AOF's LOADJOB payload, where one clock holds: there the expiry is
    absolute (``expire_ms``) and ``ttl_remaining_s`` is 0. ``expire_ms`` never travels.
    """

    id: str
    queue: str
    body: bytes
    repl: int
    ctime: int  # creating node's ms * 1e6, strictly increasing per node
    delay_s: int
    retry_s: int
    ttl_remaining_s: int  # on the wire: seconds left (clocks differ); 0 in an AOF record
    nacks: int = 0
    additional_deliveries: int = 0
    nodes_delivered: list[str] = field(default_factory=list)
    priority: int = 1024
    beanstalk: bool = False  # put through a beanstalk door (a takeover puts it back there)
    bstate: int = BSTATE_READY  # the owner's last reported beanstalk state
    beanstalk_id: int = 0  # the owner's numeric alias
    idempotency_key: str = ""  # the ADDJOB's idempotency key: every copy answers a retried add
    # The add's headers (None: none). Only in the record: the older wire forms (pb Job,
    # ReplJobs' columns) are frozen, so a peer of an older build never gets them.
    headers: Headers | None = None
    expire_ms: int = 0  # in an AOF record: the absolute expiry (one clock); 0 on the wire


FIELDS[JobData] = tuple(f.name for f in fields(JobData))


AOF_ONLY_FIELDS[JobData] = ("expire_ms",)


class ReplJob(_Message):
    """ "Hold a copy": the job's record (job_record.py), the bytes the receiver's AOF keeps."""

    __slots__ = ("record",)

    def __init__(self, record: bytes) -> None:
        self.record = record

    @staticmethod
    def of(d: JobData) -> ReplJob:
        return ReplJob(record_of(d))

    @property
    def job(self) -> JobData:
        """The record decoded (an older peer's wire form, the simulator, the tests)."""
        return data_of(self.record)


FIELDS[ReplJob] = ("record",)


def record_of(d: JobData) -> bytes:
    """The record of a job as it travels (its TTL left, in seconds, becomes ``ttl_ms``)."""
    return pack_record(
        d.id,
        d.queue,
        d.body,
        d.repl,
        d.ctime,
        d.delay_s,
        d.retry_s,
        d.ttl_remaining_s * 1000,
        d.nacks,
        d.additional_deliveries,
        d.priority,
        d.beanstalk,
        d.bstate,
        d.beanstalk_id,
        d.nodes_delivered,
        d.idempotency_key,
        d.headers,
    )


def data_of(record: bytes, at: int = 0, expire_ms: int = -1) -> JobData:
    """A record (at ``at`` in ``record``, to its end) as JobData: with ``expire_ms`` the
    AOF's view (that absolute expiry, no TTL left), else the wire's (seconds left, rounded
    up). Not the hot path: a node's copies are read by DJob's ``deserialize``."""
    end = len(record)
    stop = body_end(record, at, end)
    f = RECORD.unpack_from(record, at)
    nodes_at = at + RECORD.size
    queue_at = nodes_at + ID_LEN * f[12]
    body_at = queue_at + f[13]
    raw_nodes = record[nodes_at:queue_at].decode()
    key, headers = decode_trailer(record[stop:]) if stop < end else ("", None)
    return JobData(
        id=f[0].rstrip(b"\0").decode(),  # a test's short id comes back
        queue=record[queue_at:body_at].decode("utf-8", "surrogateescape"),
        body=record[body_at:stop],
        repl=f[1],
        ctime=f[2],
        delay_s=f[3],
        retry_s=f[4],
        ttl_remaining_s=0 if expire_ms >= 0 else (f[5] + 999) // 1000,
        nacks=f[6],
        additional_deliveries=f[7],
        nodes_delivered=[raw_nodes[i : i + ID_LEN] for i in range(0, len(raw_nodes), ID_LEN)],
        priority=f[8],
        beanstalk=f[9] != 0,
        bstate=f[10],
        beanstalk_id=f[11],
        idempotency_key=key,
        headers=headers,
        expire_ms=max(expire_ms, 0),
    )


class _JobRef(_Message):
    """A message that names one job and says no more: its class is what it says."""

    __slots__ = ("job_id",)

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


class GotJob(_JobRef):  # "I hold a copy", answering ReplJob
    __slots__ = ()


class Enqueue(_JobRef):  # "queue it" (after external replication)
    __slots__ = ()


class WillQueue(_JobRef):  # sent 500 ms before a requeue
    __slots__ = ()


class Working(_Message):
    """Postpone the requeue (dequeue if queued). disq's ``delay_ms`` (a NACK with a DELAY):
    requeue at the receiver's now plus that, not after RETRY, and not as a new delivery;
    ``nacks``: the sender's nack counter, counted by that NACK; ``additional_deliveries``:
    its delivery counter (a RETRY run out on a queue with a backoff counts one, then holds
    the job for the backoff as a NACK DELAY does: disq/core/policy/)."""

    __slots__ = ("additional_deliveries", "delay_ms", "job_id", "nacks")

    def __init__(
        self, job_id: str, delay_ms: int = 0, nacks: int = 0, additional_deliveries: int = 0
    ) -> None:
        self.job_id = job_id
        self.delay_ms = delay_ms
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries


for _cls in (GotJob, Enqueue, WillQueue):
    FIELDS[_cls] = ("job_id",)
FIELDS[Working] = ("job_id", "delay_ms", "nacks", "additional_deliveries")


class Queued(_Message):
    """A requeue happened (or, answering WILLQUEUE, the job is queued at the sender).

    ``incr_nacks`` / ``incr_deliveries`` are Disque's INCR_NACKS / INCR_DELIV flags.
    ``nacks`` / ``additional_deliveries`` are disq's: the sender's counters after the
    requeue, merged by maximum (requeue.py's ``merge_counters`` says why); 0 and 0 from a peer
    that does not send them, which then count by the flags as Disque does."""

    __slots__ = ("additional_deliveries", "incr_deliveries", "incr_nacks", "job_id", "nacks")

    def __init__(
        self,
        job_id: str,
        incr_nacks: bool = False,
        incr_deliveries: bool = False,
        nacks: int = 0,
        additional_deliveries: int = 0,
    ) -> None:
        self.job_id = job_id
        self.incr_nacks = incr_nacks
        self.incr_deliveries = incr_deliveries
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries


FIELDS[Queued] = ("job_id", "incr_nacks", "incr_deliveries", "nacks", "additional_deliveries")


class SetAck(_Message):
    __slots__ = ("job_id", "may_have")

    def __init__(self, job_id: str, may_have: int) -> None:
        self.job_id = job_id
        self.may_have = may_have


FIELDS[SetAck] = ("job_id", "may_have")


class GotAck(_Message):
    __slots__ = ("job_id", "known")

    def __init__(self, job_id: str, known: bool) -> None:
        self.job_id = job_id
        self.known = known


FIELDS[GotAck] = ("job_id", "known")


class DelJob(_Message):
    __slots__ = ("job_ids",)

    def __init__(self, job_ids: list[str]) -> None:
        self.job_ids = job_ids


FIELDS[DelJob] = ("job_ids",)


class IdemKeys(_Message):
    """Idempotency keys of finished adds, for every peer (entry i: queues[i], keys[i],
    job_ids[i]), resent until the peer acknowledges them; and the acknowledgements of the
    keys the peer sent (entry i: ack_queues[i], ack_keys[i]), sent once they are persisted.
    One message carries both, so a node's announcements and acks to a peer merge into one."""

    __slots__ = ("ack_keys", "ack_queues", "job_ids", "keys", "queues")

    def __init__(
        self,
        queues: list[str],
        keys: list[str],
        job_ids: list[str],
        ack_queues: list[str] | None = None,
        ack_keys: list[str] | None = None,
    ) -> None:
        self.queues = queues
        self.keys = keys
        self.job_ids = job_ids
        self.ack_queues = [] if ack_queues is None else ack_queues
        self.ack_keys = [] if ack_keys is None else ack_keys


FIELDS[IdemKeys] = ("queues", "keys", "job_ids", "ack_queues", "ack_keys")


KV_PREPARE = 1
KV_PROMISE = 2
KV_ACCEPT = 3
KV_ACCEPTED = 4


class KeyVote(_Message):
    """One step of the vote that binds an idempotency key to one job (single-decree Paxos,
    disq/core/disque/keyvote.py). ``phase``: KV_PREPARE and KV_ACCEPT from the proposer
    (ballot ``(ballot, ballot_node)``; ``job_id`` the proposed job on ACCEPT), KV_PROMISE and
    KV_ACCEPTED back (``ok``; a PROMISE carries the acceptor's accepted ballot and job, a
    refusal the ballot it promised in ``acc_ballot``/``acc_node``). ``decided``: the job the
    key is already bound to on the replier, which ends the vote at once."""

    __slots__ = (
        "acc_ballot",
        "acc_node",
        "ballot",
        "ballot_node",
        "decided",
        "job_id",
        "key",
        "ok",
        "phase",
        "queue",
    )

    def __init__(
        self,
        phase: int,
        queue: str,
        key: str,
        ballot: int,
        ballot_node: str,
        ok: bool = False,
        acc_ballot: int = 0,
        acc_node: str = "",
        job_id: str = "",
        decided: str = "",
    ) -> None:
        self.phase = phase
        self.queue = queue
        self.key = key
        self.ballot = ballot
        self.ballot_node = ballot_node
        self.ok = ok
        self.acc_ballot = acc_ballot
        self.acc_node = acc_node
        self.job_id = job_id
        self.decided = decided


FIELDS[KeyVote] = KEY_VOTE_FIELDS = (
    "phase",
    "queue",
    "key",
    "ballot",
    "ballot_node",
    "ok",
    "acc_ballot",
    "acc_node",
    "job_id",
    "decided",
)


class KeyVotes(_Message):
    """Many KeyVote steps for one peer, column by column (entry i is one KeyVote): the node
    core merges a Ready's KeyVotes to each peer into one (a keyed batch votes on every key,
    one message would be per key and phase)."""

    __slots__ = KeyVote.__slots__  # a column per field

    def __init__(
        self,
        phase: list[int] | None = None,
        queue: list[str] | None = None,
        key: list[str] | None = None,
        ballot: list[int] | None = None,
        ballot_node: list[str] | None = None,
        ok: list[bool] | None = None,
        acc_ballot: list[int] | None = None,
        acc_node: list[str] | None = None,
        job_id: list[str] | None = None,
        decided: list[str] | None = None,
    ) -> None:
        self.phase = [] if phase is None else phase
        self.queue = [] if queue is None else queue
        self.key = [] if key is None else key
        self.ballot = [] if ballot is None else ballot
        self.ballot_node = [] if ballot_node is None else ballot_node
        self.ok = [] if ok is None else ok
        self.acc_ballot = [] if acc_ballot is None else acc_ballot
        self.acc_node = [] if acc_node is None else acc_node
        self.job_id = [] if job_id is None else job_id
        self.decided = [] if decided is None else decided

    def add(self, v: KeyVote) -> None:
        for f in KEY_VOTE_FIELDS:
            getattr(self, f).append(getattr(v, f))

    def votes(self) -> list[KeyVote]:
        columns = [getattr(self, f) for f in KEY_VOTE_FIELDS]
        # whole rows only, whatever a broken peer sent
        return [KeyVote(*row) for row in zip(*columns, strict=False)]


FIELDS[KeyVotes] = KEY_VOTE_FIELDS  # a column per field


class NeedJobs(_Message):
    __slots__ = ("count", "queue")

    def __init__(self, queue: str, count: int) -> None:
        self.queue = queue
        self.count = count


FIELDS[NeedJobs] = ("queue", "count")


class YourJobs(_Message):
    """Federation's answer: the jobs' records (job_record.py), as a REPLJOB carries one."""

    __slots__ = ("records",)

    def __init__(self, records: list[bytes]) -> None:
        self.records = records

    @staticmethod
    def of(jobs: list[JobData]) -> YourJobs:
        return YourJobs([record_of(d) for d in jobs])

    @property
    def jobs(self) -> list[JobData]:
        """The records decoded (an older peer's wire form, the simulator, the tests)."""
        return [data_of(r) for r in self.records]


FIELDS[YourJobs] = ("records",)


class BeanstalkUpdate(_Message):
    __slots__ = ("bstate", "job_id", "priority")

    def __init__(self, job_id: str, bstate: int, priority: int) -> None:
        self.job_id = job_id
        self.bstate = bstate
        self.priority = priority


FIELDS[BeanstalkUpdate] = ("job_id", "bstate", "priority")


PAUSE_IN = 1
PAUSE_OUT = 2


class Pause(_Message):
    __slots__ = ("flags", "queue")

    def __init__(
        self,
        queue: str,
        flags: int,  # PAUSE_IN | PAUSE_OUT
    ) -> None:
        self.queue = queue
        self.flags = flags


FIELDS[Pause] = ("queue", "flags")


class Result(_Message):
    """A job's result kept by every node (results.py): store it (or, ``deleted``, drop it);
    answered by GotResult once stored. ``ttl_ms`` is the time it has left, as a job's TTL
    travels: relative, each node expires it on its own clock."""

    __slots__ = ("deleted", "job_id", "ttl_ms", "value")

    def __init__(self, job_id: str, value: bytes, ttl_ms: int, deleted: bool = False) -> None:
        self.job_id = job_id
        self.value = value
        self.ttl_ms = ttl_ms
        self.deleted = deleted


FIELDS[Result] = ("job_id", "value", "ttl_ms", "deleted")


class GotResult(_JobRef):  # "I hold the result", answering Result
    __slots__ = ()


FIELDS[GotResult] = ("job_id",)


MISFIRE_CATCHUP = 0
MISFIRE_SKIP = 1


class ScheduleDef(_Message):
    """A recurring job as the cluster keeps it (disq/core/schedule/): one per name, the
    highest ``(version_ms, version_node)`` wins on every node (an update, a pause, a delete
    are new versions; a delete is a tombstone). ``repl`` 0, ``retry_s``/``ttl_s`` -1: the
    add's defaults. ``catchup``: MISFIRE_CATCHUP's bound on ticks fired late."""

    __slots__ = (
        "async_",
        "body",
        "catchup",
        "deleted",
        "misfire",
        "name",
        "paused",
        "queue",
        "repl",
        "retry_s",
        "spec",
        "ttl_s",
        "version_ms",
        "version_node",
        "zone",
    )

    def __init__(
        self,
        name: str,
        spec: str,
        zone: str,
        queue: str,
        body: bytes,
        repl: int = 0,
        retry_s: int = -1,
        ttl_s: int = -1,
        async_: bool = False,
        misfire: int = MISFIRE_CATCHUP,
        catchup: int = 1,
        paused: bool = False,
        deleted: bool = False,
        version_ms: int = 0,
        version_node: str = "",
    ) -> None:
        self.name = name
        self.spec = spec
        self.zone = zone
        self.queue = queue
        self.body = body
        self.repl = repl
        self.retry_s = retry_s
        self.ttl_s = ttl_s
        self.async_ = async_
        self.misfire = misfire
        self.catchup = catchup
        self.paused = paused
        self.deleted = deleted
        self.version_ms = version_ms
        self.version_node = version_node


FIELDS[ScheduleDef] = (
    "name",
    "spec",
    "zone",
    "queue",
    "body",
    "repl",
    "retry_s",
    "ttl_s",
    "async_",
    "misfire",
    "catchup",
    "paused",
    "deleted",
    "version_ms",
    "version_node",
)


class SchedSync(_Message):
    """Schedules between nodes: definitions (``entries``) and the last tick each schedule's
    job was bound to (entry i: tick_names[i], tick_s[i], tick_jobs[i]), pushed on a change;
    ``digest`` of the sender's definitions, sent alone now and then (anti-entropy): a
    receiver whose digest differs answers with all its entries and ``want`` set, and the
    sender answers that with all of its own."""

    __slots__ = ("digest", "entries", "tick_jobs", "tick_names", "tick_s", "want")

    def __init__(
        self,
        entries: list[ScheduleDef] | None = None,
        tick_names: list[str] | None = None,
        tick_s: list[int] | None = None,
        tick_jobs: list[str] | None = None,
        digest: int = 0,
        want: bool = False,
    ) -> None:
        self.entries = [] if entries is None else entries
        self.tick_names = [] if tick_names is None else tick_names
        self.tick_s = [] if tick_s is None else tick_s
        self.tick_jobs = [] if tick_jobs is None else tick_jobs
        self.digest = digest
        self.want = want


FIELDS[SchedSync] = ("entries", "tick_names", "tick_s", "tick_jobs", "digest", "want")


ROUTE_EXCHANGE = 1
ROUTE_BINDING = 2
ROUTE_QUEUE = 3


class RouteEntry(_Message):
    """One entry of the routes table (disq/core/routes/): an exchange (``name``,
    ``exchange_type``), a binding (exchange ``name``, ``queue``, ``routing_key``) or a queue
    declaration (``name``, ``expires_ms``, ``message_ttl_ms``). The highest
    ``(version_ms, version_node)`` of one key wins on every node; ``deleted``: a tombstone."""

    __slots__ = (
        "deleted",
        "exchange_type",
        "expires_ms",
        "kind",
        "message_ttl_ms",
        "name",
        "queue",
        "routing_key",
        "version_ms",
        "version_node",
    )

    def __init__(
        self,
        kind: int,  # ROUTE_EXCHANGE | ROUTE_BINDING | ROUTE_QUEUE
        name: str,
        queue: str = "",
        routing_key: str = "",
        exchange_type: str = "",
        expires_ms: int = 0,
        message_ttl_ms: int = 0,
        deleted: bool = False,
        version_ms: int = 0,
        version_node: str = "",
    ) -> None:
        self.kind = kind
        self.name = name
        self.queue = queue
        self.routing_key = routing_key
        self.exchange_type = exchange_type
        self.expires_ms = expires_ms
        self.message_ttl_ms = message_ttl_ms
        self.deleted = deleted
        self.version_ms = version_ms
        self.version_node = version_node

    def key(self) -> tuple[int, str, str, str]:
        return (self.kind, self.name, self.queue, self.routing_key)


FIELDS[RouteEntry] = (
    "kind",
    "name",
    "queue",
    "routing_key",
    "exchange_type",
    "expires_ms",
    "message_ttl_ms",
    "deleted",
    "version_ms",
    "version_node",
)


class RouteSync(_Message):
    """Routes between nodes: changed entries, pushed at once; ``digest`` of the sender's
    table alone now and then; a receiver whose digest differs answers with its whole table
    and ``want`` set, and the sender answers that with its own (as SchedSync). ``whole``:
    the last message of a whole table (the receiver has heard everything the sender held)."""

    __slots__ = ("digest", "entries", "want", "whole")

    def __init__(
        self,
        entries: list[RouteEntry] | None = None,
        digest: int = 0,
        want: bool = False,
        whole: bool = False,
    ) -> None:
        self.entries = [] if entries is None else entries
        self.digest = digest
        self.want = want
        self.whole = whole


FIELDS[RouteSync] = ("entries", "digest", "want", "whole")


class PolicyEntry(_Message):
    """One queue's policy (disq/core/policy/): ``max_deliveries`` (0: none),
    ``dead_letter`` ("": none), a backoff of ``backoff_base_s`` doubling up to
    ``backoff_max_s`` (max 0: none). The highest ``(version_ms, version_node)`` of one queue
    wins on every node; ``deleted``: a tombstone."""

    __slots__ = (
        "backoff_base_s",
        "backoff_max_s",
        "dead_letter",
        "deleted",
        "max_deliveries",
        "queue",
        "version_ms",
        "version_node",
    )

    def __init__(
        self,
        queue: str,
        max_deliveries: int = 0,
        dead_letter: str = "",
        backoff_base_s: int = 0,
        backoff_max_s: int = 0,
        deleted: bool = False,
        version_ms: int = 0,
        version_node: str = "",
    ) -> None:
        self.queue = queue
        self.max_deliveries = max_deliveries
        self.dead_letter = dead_letter
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.deleted = deleted
        self.version_ms = version_ms
        self.version_node = version_node


FIELDS[PolicyEntry] = (
    "queue",
    "max_deliveries",
    "dead_letter",
    "backoff_base_s",
    "backoff_max_s",
    "deleted",
    "version_ms",
    "version_node",
)


class PolicySync(_Message):
    """Queue policies between nodes, as RouteSync: changed entries pushed at once, a digest
    now and then, whole tables swapped on a mismatch; ``whole``: a whole table's last."""

    __slots__ = ("digest", "entries", "want", "whole")

    def __init__(
        self,
        entries: list[PolicyEntry] | None = None,
        digest: int = 0,
        want: bool = False,
        whole: bool = False,
    ) -> None:
        self.entries = [] if entries is None else entries
        self.digest = digest
        self.want = want
        self.whole = whole


FIELDS[PolicySync] = ("entries", "digest", "want", "whole")


MembershipMessage = Ping | Ack | PingReq
JobMessage = (
    ReplJob
    | GotJob
    | Enqueue
    | Queued
    | WillQueue
    | SetAck
    | GotAck
    | DelJob
    | NeedJobs
    | YourJobs
    | Working
    | Pause
    | BeanstalkUpdate
    | IdemKeys
    | KeyVote
    | KeyVotes
    | SchedSync
    | RouteSync
    | PolicySync
    | Result
    | GotResult
)
Message = MembershipMessage | JobMessage

MEMBERSHIP_TYPES = (Ping, Ack, PingReq)
