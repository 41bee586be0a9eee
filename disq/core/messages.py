"""Node-to-node messages as the pure cores see them (proto/disq/v1/cluster.proto).

The cores (membership, cluster) never see protobuf: they take and return these plain slotted
classes, so the simulator can move them between in-process nodes without serialising, and
the gRPC link layer (disq/server/peer_link.py) converts a whole frame at once at the edge.
Names and meanings are Disque's (reference/anchors.md 2.5).

An outbox entry is ``(destination node id, message)``; the IO layer groups one iteration's
entries by destination and sends each peer one frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Member states (SWIM). Ints for cheap comparison, same numbers as the proto enum.
ALIVE = 1
SUSPECT = 2
DEAD = 3
LEFT = 4

MEMBER_STATE_NAMES = {ALIVE: "alive", SUSPECT: "suspect", DEAD: "dead", LEFT: "left"}


@dataclass(slots=True)
class Member:
    node_id: str  # 40 hex chars
    host: str
    grpc_port: int
    client_port: int  # RESP port, for HELLO
    incarnation: int  # only the node itself raises it, to refute suspicion
    state: int  # ALIVE / SUSPECT / DEAD / LEFT
    leaving: bool = False


@dataclass(slots=True)
class Ping:
    probe_id: int
    gossip: list[Member] = field(default_factory=list)
    meet: bool = False  # CLUSTER MEET / --join (membership.meet_message)


@dataclass(slots=True)
class Ack:
    probe_id: int
    target: str = ""  # set when answering on behalf of a PingReq
    gossip: list[Member] = field(default_factory=list)


@dataclass(slots=True)
class PingReq:
    probe_id: int
    target: str


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
    expire_ms: int = 0  # in an AOF record: the absolute expiry (one clock); 0 on the wire


AOF_ONLY_FIELDS[JobData] = ("expire_ms",)


@dataclass(slots=True)
class ReplJob:
    job: JobData


@dataclass(slots=True)
class GotJob:
    job_id: str


@dataclass(slots=True)
class Enqueue:
    job_id: str


@dataclass(slots=True)
class Queued:
    """A requeue happened (or, answering WILLQUEUE, the job is queued at the sender).

    ``incr_nacks`` / ``incr_deliveries`` are Disque's INCR_NACKS / INCR_DELIV flags.
    ``nacks`` / ``additional_deliveries`` are disq's: the sender's counters after the
    requeue, merged by maximum (core.py ``_merge_counters`` says why); 0 and 0 from a peer
    that does not send them, which then count by the flags as Disque does."""

    job_id: str
    incr_nacks: bool = False
    incr_deliveries: bool = False
    nacks: int = 0
    additional_deliveries: int = 0


@dataclass(slots=True)
class WillQueue:
    job_id: str


@dataclass(slots=True)
class SetAck:
    job_id: str
    may_have: int


@dataclass(slots=True)
class GotAck:
    job_id: str
    known: bool


@dataclass(slots=True)
class DelJob:
    job_ids: list[str]


@dataclass(slots=True)
class IdemKeys:
    """Idempotency keys of finished adds, for every peer (entry i: queues[i], keys[i],
    job_ids[i]), resent until the peer acknowledges them; and the acknowledgements of the
    keys the peer sent (entry i: ack_queues[i], ack_keys[i]), sent once they are persisted.
    One message carries both, so a node's announcements and acks to a peer merge into one."""

    queues: list[str]
    keys: list[str]
    job_ids: list[str]
    ack_queues: list[str] = field(default_factory=list)
    ack_keys: list[str] = field(default_factory=list)


KV_PREPARE = 1
KV_PROMISE = 2
KV_ACCEPT = 3
KV_ACCEPTED = 4


@dataclass(slots=True)
class KeyVote:
    """One step of the vote that binds an idempotency key to one job (single-decree Paxos,
    disq/core/disque/keyvote.py). ``phase``: KV_PREPARE and KV_ACCEPT from the proposer
    (ballot ``(ballot, ballot_node)``; ``job_id`` the proposed job on ACCEPT), KV_PROMISE and
    KV_ACCEPTED back (``ok``; a PROMISE carries the acceptor's accepted ballot and job, a
    refusal the ballot it promised in ``acc_ballot``/``acc_node``). ``decided``: the job the
    key is already bound to on the replier, which ends the vote at once."""

    phase: int
    queue: str
    key: str
    ballot: int
    ballot_node: str
    ok: bool = False
    acc_ballot: int = 0
    acc_node: str = ""
    job_id: str = ""
    decided: str = ""


@dataclass(slots=True)
class KeyVotes:
    """Many KeyVote steps for one peer, column by column (entry i is one KeyVote): the node
    core merges a Ready's KeyVotes to each peer into one (a keyed batch votes on every key,
    one message would be per key and phase)."""

    phase: list[int] = field(default_factory=list)
    queue: list[str] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    ballot: list[int] = field(default_factory=list)
    ballot_node: list[str] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    acc_ballot: list[int] = field(default_factory=list)
    acc_node: list[str] = field(default_factory=list)
    job_id: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)

    def add(self, v: KeyVote) -> None:
        self.phase.append(v.phase)
        self.queue.append(v.queue)
        self.key.append(v.key)
        self.ballot.append(v.ballot)
        self.ballot_node.append(v.ballot_node)
        self.ok.append(v.ok)
        self.acc_ballot.append(v.acc_ballot)
        self.acc_node.append(v.acc_node)
        self.job_id.append(v.job_id)
        self.decided.append(v.decided)

    def votes(self) -> list[KeyVote]:
        return [
            KeyVote(*row)
            for row in zip(
                self.phase,
                self.queue,
                self.key,
                self.ballot,
                self.ballot_node,
                self.ok,
                self.acc_ballot,
                self.acc_node,
                self.job_id,
                self.decided,
                strict=False,  # whole rows only, whatever a broken peer sent
            )
        ]


@dataclass(slots=True)
class NeedJobs:
    queue: str
    count: int


@dataclass(slots=True)
class YourJobs:
    jobs: list[JobData]


@dataclass(slots=True)
class Working:
    job_id: str


@dataclass(slots=True)
class BeanstalkUpdate:
    job_id: str
    bstate: int
    priority: int


PAUSE_IN = 1
PAUSE_OUT = 2


@dataclass(slots=True)
class Pause:
    queue: str
    flags: int  # PAUSE_IN | PAUSE_OUT


MISFIRE_CATCHUP = 0
MISFIRE_SKIP = 1


@dataclass(slots=True)
class ScheduleDef:
    """A recurring job as the cluster keeps it (disq/core/schedule/): one per name, the
    highest ``(version_ms, version_node)`` wins on every node (an update, a pause, a delete
    are new versions; a delete is a tombstone). ``repl`` 0, ``retry_s``/``ttl_s`` -1: the
    add's defaults. ``catchup``: MISFIRE_CATCHUP's bound on ticks fired late."""

    name: str
    spec: str
    zone: str
    queue: str
    body: bytes
    repl: int = 0
    retry_s: int = -1
    ttl_s: int = -1
    async_: bool = False
    misfire: int = MISFIRE_CATCHUP
    catchup: int = 1
    paused: bool = False
    deleted: bool = False
    version_ms: int = 0
    version_node: str = ""


@dataclass(slots=True)
class SchedSync:
    """Schedules between nodes: definitions (``entries``) and the last tick each schedule's
    job was bound to (entry i: tick_names[i], tick_s[i], tick_jobs[i]), pushed on a change;
    ``digest`` of the sender's definitions, sent alone now and then (anti-entropy): a
    receiver whose digest differs answers with all its entries and ``want`` set, and the
    sender answers that with all of its own."""

    entries: list[ScheduleDef] = field(default_factory=list)
    tick_names: list[str] = field(default_factory=list)
    tick_s: list[int] = field(default_factory=list)
    tick_jobs: list[str] = field(default_factory=list)
    digest: int = 0
    want: bool = False


ROUTE_EXCHANGE = 1
ROUTE_BINDING = 2
ROUTE_QUEUE = 3


@dataclass(slots=True)
class RouteEntry:
    """One entry of the routes table (disq/core/routes/): an exchange (``name``,
    ``exchange_type``), a binding (exchange ``name``, ``queue``, ``routing_key``) or a queue
    declaration (``name``, ``expires_ms``, ``message_ttl_ms``). The highest
    ``(version_ms, version_node)`` of one key wins on every node; ``deleted``: a tombstone."""

    kind: int  # ROUTE_EXCHANGE | ROUTE_BINDING | ROUTE_QUEUE
    name: str
    queue: str = ""
    routing_key: str = ""
    exchange_type: str = ""
    expires_ms: int = 0
    message_ttl_ms: int = 0
    deleted: bool = False
    version_ms: int = 0
    version_node: str = ""

    def key(self) -> tuple[int, str, str, str]:
        return (self.kind, self.name, self.queue, self.routing_key)


@dataclass(slots=True)
class RouteSync:
    """Routes between nodes: changed entries, pushed at once; ``digest`` of the sender's
    table alone now and then; a receiver whose digest differs answers with its whole table
    and ``want`` set, and the sender answers that with its own (as SchedSync). ``whole``:
    the last message of a whole table (the receiver has heard everything the sender held)."""

    entries: list[RouteEntry] = field(default_factory=list)
    digest: int = 0
    want: bool = False
    whole: bool = False


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
)
Message = MembershipMessage | JobMessage

MEMBERSHIP_TYPES = (Ping, Ack, PingReq)
