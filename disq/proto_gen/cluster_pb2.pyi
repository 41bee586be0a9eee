from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATE_UNSPECIFIED: _ClassVar[MemberState]
    ALIVE: _ClassVar[MemberState]
    SUSPECT: _ClassVar[MemberState]
    DEAD: _ClassVar[MemberState]
    LEFT: _ClassVar[MemberState]
MEMBER_STATE_UNSPECIFIED: MemberState
ALIVE: MemberState
SUSPECT: MemberState
DEAD: MemberState
LEFT: MemberState

class Frame(_message.Message):
    __slots__ = ("from_node", "seq", "messages")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    seq: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, from_node: _Optional[str] = ..., seq: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("ping", "ack", "ping_req", "repl_job", "got_job", "enqueue", "queued", "will_queue", "set_ack", "got_ack", "del_job", "need_jobs", "your_jobs", "working", "pause", "beanstalk_update", "idem_keys", "key_vote", "key_votes", "repl_jobs", "got_jobs", "set_acks", "got_acks", "sched_sync", "route_sync", "job_records", "result", "got_result", "policy_sync")
    PING_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    PING_REQ_FIELD_NUMBER: _ClassVar[int]
    REPL_JOB_FIELD_NUMBER: _ClassVar[int]
    GOT_JOB_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    WILL_QUEUE_FIELD_NUMBER: _ClassVar[int]
    SET_ACK_FIELD_NUMBER: _ClassVar[int]
    GOT_ACK_FIELD_NUMBER: _ClassVar[int]
    DEL_JOB_FIELD_NUMBER: _ClassVar[int]
    NEED_JOBS_FIELD_NUMBER: _ClassVar[int]
    YOUR_JOBS_FIELD_NUMBER: _ClassVar[int]
    WORKING_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    BEANSTALK_UPDATE_FIELD_NUMBER: _ClassVar[int]
    IDEM_KEYS_FIELD_NUMBER: _ClassVar[int]
    KEY_VOTE_FIELD_NUMBER: _ClassVar[int]
    KEY_VOTES_FIELD_NUMBER: _ClassVar[int]
    REPL_JOBS_FIELD_NUMBER: _ClassVar[int]
    GOT_JOBS_FIELD_NUMBER: _ClassVar[int]
    SET_ACKS_FIELD_NUMBER: _ClassVar[int]
    GOT_ACKS_FIELD_NUMBER: _ClassVar[int]
    SCHED_SYNC_FIELD_NUMBER: _ClassVar[int]
    ROUTE_SYNC_FIELD_NUMBER: _ClassVar[int]
    JOB_RECORDS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    GOT_RESULT_FIELD_NUMBER: _ClassVar[int]
    POLICY_SYNC_FIELD_NUMBER: _ClassVar[int]
    ping: Ping
    ack: Ack
    ping_req: PingReq
    repl_job: ReplJob
    got_job: GotJob
    enqueue: Enqueue
    queued: Queued
    will_queue: WillQueue
    set_ack: SetAck
    got_ack: GotAck
    del_job: DelJob
    need_jobs: NeedJobs
    your_jobs: YourJobs
    working: Working
    pause: Pause
    beanstalk_update: BeanstalkUpdate
    idem_keys: IdemKeys
    key_vote: KeyVote
    key_votes: KeyVotes
    repl_jobs: ReplJobs
    got_jobs: GotJobs
    set_acks: SetAcks
    got_acks: GotAcks
    sched_sync: SchedSync
    route_sync: RouteSync
    job_records: JobRecords
    result: Result
    got_result: GotResult
    policy_sync: PolicySync
    def __init__(self, ping: _Optional[_Union[Ping, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., ping_req: _Optional[_Union[PingReq, _Mapping]] = ..., repl_job: _Optional[_Union[ReplJob, _Mapping]] = ..., got_job: _Optional[_Union[GotJob, _Mapping]] = ..., enqueue: _Optional[_Union[Enqueue, _Mapping]] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., will_queue: _Optional[_Union[WillQueue, _Mapping]] = ..., set_ack: _Optional[_Union[SetAck, _Mapping]] = ..., got_ack: _Optional[_Union[GotAck, _Mapping]] = ..., del_job: _Optional[_Union[DelJob, _Mapping]] = ..., need_jobs: _Optional[_Union[NeedJobs, _Mapping]] = ..., your_jobs: _Optional[_Union[YourJobs, _Mapping]] = ..., working: _Optional[_Union[Working, _Mapping]] = ..., pause: _Optional[_Union[Pause, _Mapping]] = ..., beanstalk_update: _Optional[_Union[BeanstalkUpdate, _Mapping]] = ..., idem_keys: _Optional[_Union[IdemKeys, _Mapping]] = ..., key_vote: _Optional[_Union[KeyVote, _Mapping]] = ..., key_votes: _Optional[_Union[KeyVotes, _Mapping]] = ..., repl_jobs: _Optional[_Union[ReplJobs, _Mapping]] = ..., got_jobs: _Optional[_Union[GotJobs, _Mapping]] = ..., set_acks: _Optional[_Union[SetAcks, _Mapping]] = ..., got_acks: _Optional[_Union[GotAcks, _Mapping]] = ..., sched_sync: _Optional[_Union[SchedSync, _Mapping]] = ..., route_sync: _Optional[_Union[RouteSync, _Mapping]] = ..., job_records: _Optional[_Union[JobRecords, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., got_result: _Optional[_Union[GotResult, _Mapping]] = ..., policy_sync: _Optional[_Union[PolicySync, _Mapping]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("node_id", "host", "grpc_port", "client_port", "incarnation", "state", "leaving")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GRPC_PORT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_PORT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    host: str
    grpc_port: int
    client_port: int
    incarnation: int
    state: MemberState
    leaving: bool
    def __init__(self, node_id: _Optional[str] = ..., host: _Optional[str] = ..., grpc_port: _Optional[int] = ..., client_port: _Optional[int] = ..., incarnation: _Optional[int] = ..., state: _Optional[_Union[MemberState, str]] = ..., leaving: _Optional[bool] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("probe_id", "gossip", "meet")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_FIELD_NUMBER: _ClassVar[int]
    MEET_FIELD_NUMBER: _ClassVar[int]
    probe_id: int
    gossip: _containers.RepeatedCompositeFieldContainer[Member]
    meet: bool
    def __init__(self, probe_id: _Optional[int] = ..., gossip: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., meet: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("probe_id", "target", "gossip")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_FIELD_NUMBER: _ClassVar[int]
    probe_id: int
    target: str
    gossip: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, probe_id: _Optional[int] = ..., target: _Optional[str] = ..., gossip: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class PingReq(_message.Message):
    __slots__ = ("probe_id", "target")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    probe_id: int
    target: str
    def __init__(self, probe_id: _Optional[int] = ..., target: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "queue", "body", "repl", "ctime", "delay_s", "retry_s", "ttl_remaining_s", "nacks", "additional_deliveries", "nodes_delivered", "priority", "beanstalk", "bstate", "beanstalk_id", "idempotency_key")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    REPL_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    TTL_REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BEANSTALK_FIELD_NUMBER: _ClassVar[int]
    BSTATE_FIELD_NUMBER: _ClassVar[int]
    BEANSTALK_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    body: bytes
    repl: int
    ctime: int
    delay_s: int
    retry_s: int
    ttl_remaining_s: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    beanstalk: bool
    bstate: int
    beanstalk_id: int
    idempotency_key: str
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., body: _Optional[bytes] = ..., repl: _Optional[int] = ..., ctime: _Optional[int] = ..., delay_s: _Optional[int] = ..., retry_s: _Optional[int] = ..., ttl_remaining_s: _Optional[int] = ..., nacks: _Optional[int] = ..., additional_deliveries: _Optional[int] = ..., nodes_delivered: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., beanstalk: _Optional[bool] = ..., bstate: _Optional[int] = ..., beanstalk_id: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ReplJob(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GotJob(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReplJobs(_message.Message):
    __slots__ = ("id", "queue", "body", "repl", "ctime", "delay_s", "retry_s", "ttl_remaining_s", "nacks", "additional_deliveries", "nodes_delivered", "nodes_delivered_count", "priority", "beanstalk", "bstate", "beanstalk_id", "idempotency_key")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    REPL_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    TTL_REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    NODES_DELIVERED_COUNT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BEANSTALK_FIELD_NUMBER: _ClassVar[int]
    BSTATE_FIELD_NUMBER: _ClassVar[int]
    BEANSTALK_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    id: _containers.RepeatedScalarFieldContainer[str]
    queue: _containers.RepeatedScalarFieldContainer[str]
    body: _containers.RepeatedScalarFieldContainer[bytes]
    repl: _containers.RepeatedScalarFieldContainer[int]
    ctime: _containers.RepeatedScalarFieldContainer[int]
    delay_s: _containers.RepeatedScalarFieldContainer[int]
    retry_s: _containers.RepeatedScalarFieldContainer[int]
    ttl_remaining_s: _containers.RepeatedScalarFieldContainer[int]
    nacks: _containers.RepeatedScalarFieldContainer[int]
    additional_deliveries: _containers.RepeatedScalarFieldContainer[int]
    nodes_delivered: _containers.RepeatedScalarFieldContainer[str]
    nodes_delivered_count: _containers.RepeatedScalarFieldContainer[int]
    priority: _containers.RepeatedScalarFieldContainer[int]
    beanstalk: _containers.RepeatedScalarFieldContainer[bool]
    bstate: _containers.RepeatedScalarFieldContainer[int]
    beanstalk_id: _containers.RepeatedScalarFieldContainer[int]
    idempotency_key: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[_Iterable[str]] = ..., queue: _Optional[_Iterable[str]] = ..., body: _Optional[_Iterable[bytes]] = ..., repl: _Optional[_Iterable[int]] = ..., ctime: _Optional[_Iterable[int]] = ..., delay_s: _Optional[_Iterable[int]] = ..., retry_s: _Optional[_Iterable[int]] = ..., ttl_remaining_s: _Optional[_Iterable[int]] = ..., nacks: _Optional[_Iterable[int]] = ..., additional_deliveries: _Optional[_Iterable[int]] = ..., nodes_delivered: _Optional[_Iterable[str]] = ..., nodes_delivered_count: _Optional[_Iterable[int]] = ..., priority: _Optional[_Iterable[int]] = ..., beanstalk: _Optional[_Iterable[bool]] = ..., bstate: _Optional[_Iterable[int]] = ..., beanstalk_id: _Optional[_Iterable[int]] = ..., idempotency_key: _Optional[_Iterable[str]] = ...) -> None: ...

class JobRecords(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, record: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GotJobs(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[_Iterable[str]] = ...) -> None: ...

class Enqueue(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ("job_id", "incr_nacks", "incr_deliveries", "nacks", "additional_deliveries")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCR_NACKS_FIELD_NUMBER: _ClassVar[int]
    INCR_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    incr_nacks: bool
    incr_deliveries: bool
    nacks: int
    additional_deliveries: int
    def __init__(self, job_id: _Optional[str] = ..., incr_nacks: _Optional[bool] = ..., incr_deliveries: _Optional[bool] = ..., nacks: _Optional[int] = ..., additional_deliveries: _Optional[int] = ...) -> None: ...

class WillQueue(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class SetAck(_message.Message):
    __slots__ = ("job_id", "may_have")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MAY_HAVE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    may_have: int
    def __init__(self, job_id: _Optional[str] = ..., may_have: _Optional[int] = ...) -> None: ...

class GotAck(_message.Message):
    __slots__ = ("job_id", "known")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    known: bool
    def __init__(self, job_id: _Optional[str] = ..., known: _Optional[bool] = ...) -> None: ...

class SetAcks(_message.Message):
    __slots__ = ("job_id", "may_have")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MAY_HAVE_FIELD_NUMBER: _ClassVar[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    may_have: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[_Iterable[str]] = ..., may_have: _Optional[_Iterable[int]] = ...) -> None: ...

class GotAcks(_message.Message):
    __slots__ = ("job_id", "known")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    known: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, job_id: _Optional[_Iterable[str]] = ..., known: _Optional[_Iterable[bool]] = ...) -> None: ...

class DelJob(_message.Message):
    __slots__ = ("job_ids",)
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class IdemKeys(_message.Message):
    __slots__ = ("queues", "keys", "job_ids", "ack_queues", "ack_keys")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    ACK_QUEUES_FIELD_NUMBER: _ClassVar[int]
    ACK_KEYS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    keys: _containers.RepeatedScalarFieldContainer[str]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    ack_queues: _containers.RepeatedScalarFieldContainer[str]
    ack_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., keys: _Optional[_Iterable[str]] = ..., job_ids: _Optional[_Iterable[str]] = ..., ack_queues: _Optional[_Iterable[str]] = ..., ack_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class KeyVote(_message.Message):
    __slots__ = ("phase", "queue", "key", "ballot", "ballot_node", "ok", "acc_ballot", "acc_node", "job_id", "decided")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    BALLOT_NODE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ACC_BALLOT_FIELD_NUMBER: _ClassVar[int]
    ACC_NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDED_FIELD_NUMBER: _ClassVar[int]
    phase: int
    queue: str
    key: str
    ballot: int
    ballot_node: str
    ok: bool
    acc_ballot: int
    acc_node: str
    job_id: str
    decided: str
    def __init__(self, phase: _Optional[int] = ..., queue: _Optional[str] = ..., key: _Optional[str] = ..., ballot: _Optional[int] = ..., ballot_node: _Optional[str] = ..., ok: _Optional[bool] = ..., acc_ballot: _Optional[int] = ..., acc_node: _Optional[str] = ..., job_id: _Optional[str] = ..., decided: _Optional[str] = ...) -> None: ...

class KeyVotes(_message.Message):
    __slots__ = ("phase", "queue", "key", "ballot", "ballot_node", "ok", "acc_ballot", "acc_node", "job_id", "decided")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    BALLOT_NODE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ACC_BALLOT_FIELD_NUMBER: _ClassVar[int]
    ACC_NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDED_FIELD_NUMBER: _ClassVar[int]
    phase: _containers.RepeatedScalarFieldContainer[int]
    queue: _containers.RepeatedScalarFieldContainer[str]
    key: _containers.RepeatedScalarFieldContainer[str]
    ballot: _containers.RepeatedScalarFieldContainer[int]
    ballot_node: _containers.RepeatedScalarFieldContainer[str]
    ok: _containers.RepeatedScalarFieldContainer[bool]
    acc_ballot: _containers.RepeatedScalarFieldContainer[int]
    acc_node: _containers.RepeatedScalarFieldContainer[str]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    decided: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, phase: _Optional[_Iterable[int]] = ..., queue: _Optional[_Iterable[str]] = ..., key: _Optional[_Iterable[str]] = ..., ballot: _Optional[_Iterable[int]] = ..., ballot_node: _Optional[_Iterable[str]] = ..., ok: _Optional[_Iterable[bool]] = ..., acc_ballot: _Optional[_Iterable[int]] = ..., acc_node: _Optional[_Iterable[str]] = ..., job_id: _Optional[_Iterable[str]] = ..., decided: _Optional[_Iterable[str]] = ...) -> None: ...

class SchedSync(_message.Message):
    __slots__ = ("entries", "tick_names", "tick_s", "tick_jobs", "digest", "want")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TICK_NAMES_FIELD_NUMBER: _ClassVar[int]
    TICK_S_FIELD_NUMBER: _ClassVar[int]
    TICK_JOBS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    tick_names: _containers.RepeatedScalarFieldContainer[str]
    tick_s: _containers.RepeatedScalarFieldContainer[int]
    tick_jobs: _containers.RepeatedScalarFieldContainer[str]
    digest: int
    want: bool
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ..., tick_names: _Optional[_Iterable[str]] = ..., tick_s: _Optional[_Iterable[int]] = ..., tick_jobs: _Optional[_Iterable[str]] = ..., digest: _Optional[int] = ..., want: _Optional[bool] = ...) -> None: ...

class RouteSync(_message.Message):
    __slots__ = ("entries", "digest", "want", "whole")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    digest: int
    want: bool
    whole: bool
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ..., digest: _Optional[int] = ..., want: _Optional[bool] = ..., whole: _Optional[bool] = ...) -> None: ...

class PolicySync(_message.Message):
    __slots__ = ("entries", "digest", "want", "whole")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    digest: int
    want: bool
    whole: bool
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ..., digest: _Optional[int] = ..., want: _Optional[bool] = ..., whole: _Optional[bool] = ...) -> None: ...

class NeedJobs(_message.Message):
    __slots__ = ("queue", "count")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    count: int
    def __init__(self, queue: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class YourJobs(_message.Message):
    __slots__ = ("jobs", "records")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., records: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Working(_message.Message):
    __slots__ = ("job_id", "delay_ms", "nacks", "additional_deliveries")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    delay_ms: int
    nacks: int
    additional_deliveries: int
    def __init__(self, job_id: _Optional[str] = ..., delay_ms: _Optional[int] = ..., nacks: _Optional[int] = ..., additional_deliveries: _Optional[int] = ...) -> None: ...

class BeanstalkUpdate(_message.Message):
    __slots__ = ("job_id", "bstate", "priority")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BSTATE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    bstate: int
    priority: int
    def __init__(self, job_id: _Optional[str] = ..., bstate: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class Pause(_message.Message):
    __slots__ = ("queue", "flags")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    flags: int
    def __init__(self, queue: _Optional[str] = ..., flags: _Optional[int] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("job_id", "value", "ttl_ms", "deleted")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    value: bytes
    ttl_ms: int
    deleted: bool
    def __init__(self, job_id: _Optional[str] = ..., value: _Optional[bytes] = ..., ttl_ms: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GotResult(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...
