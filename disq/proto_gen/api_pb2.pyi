from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    NOREPL: _ClassVar[ErrorReason]
    MAXLEN: _ClassVar[ErrorReason]
    PAUSED: _ClassVar[ErrorReason]
    OOM: _ClassVar[ErrorReason]
    BADID: _ClassVar[ErrorReason]
    NOJOB: _ClassVar[ErrorReason]
    TOOLATE: _ClassVar[ErrorReason]
    LEAVING: _ClassVar[ErrorReason]
    SYNTAX: _ClassVar[ErrorReason]
    INDETERMINATE: _ClassVar[ErrorReason]
    NOT_FOUND: _ClassVar[ErrorReason]
    PRECONDITION_FAILED: _ClassVar[ErrorReason]
    LIMIT: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
NOREPL: ErrorReason
MAXLEN: ErrorReason
PAUSED: ErrorReason
OOM: ErrorReason
BADID: ErrorReason
NOJOB: ErrorReason
TOOLATE: ErrorReason
LEAVING: ErrorReason
SYNTAX: ErrorReason
INDETERMINATE: ErrorReason
NOT_FOUND: ErrorReason
PRECONDITION_FAILED: ErrorReason
LIMIT: ErrorReason

class ErrorInfo(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: ErrorReason
    message: str
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AddJobRequest(_message.Message):
    __slots__ = ("queue", "body", "timeout_ms", "replicate", "delay_s", "retry_s", "ttl_s", "maxlen", "idempotency_key", "delay_ms", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    MAXLEN_FIELD_NUMBER: _ClassVar[int]
    ASYNC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    body: bytes
    timeout_ms: int
    replicate: int
    delay_s: int
    retry_s: int
    ttl_s: int
    maxlen: int
    idempotency_key: str
    delay_ms: int
    headers: _containers.ScalarMap[str, bytes]
    def __init__(self, queue: _Optional[str] = ..., body: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ..., replicate: _Optional[int] = ..., delay_s: _Optional[int] = ..., retry_s: _Optional[int] = ..., ttl_s: _Optional[int] = ..., maxlen: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., delay_ms: _Optional[int] = ..., headers: _Optional[_Mapping[str, bytes]] = ..., **kwargs) -> None: ...

class AddJobResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class AddJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[AddJobRequest]
    def __init__(self, jobs: _Optional[_Iterable[_Union[AddJobRequest, _Mapping]]] = ...) -> None: ...

class AddJobResult(_message.Message):
    __slots__ = ("id", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    error: ErrorInfo
    def __init__(self, id: _Optional[str] = ..., error: _Optional[_Union[ErrorInfo, _Mapping]] = ...) -> None: ...

class AddJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AddJobResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AddJobResult, _Mapping]]] = ...) -> None: ...

class GetJobsRequest(_message.Message):
    __slots__ = ("queues", "count", "nohang", "timeout_ms", "with_counters", "in_order")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NOHANG_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WITH_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    IN_ORDER_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    count: int
    nohang: bool
    timeout_ms: int
    with_counters: bool
    in_order: bool
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., count: _Optional[int] = ..., nohang: _Optional[bool] = ..., timeout_ms: _Optional[int] = ..., with_counters: _Optional[bool] = ..., in_order: _Optional[bool] = ...) -> None: ...

class QueuedJob(_message.Message):
    __slots__ = ("id", "queue", "body", "nacks", "additional_deliveries", "retry_s", "idempotency_key", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    body: bytes
    nacks: int
    additional_deliveries: int
    retry_s: int
    idempotency_key: str
    headers: _containers.ScalarMap[str, bytes]
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., body: _Optional[bytes] = ..., nacks: _Optional[int] = ..., additional_deliveries: _Optional[int] = ..., retry_s: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., headers: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class GetJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[QueuedJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[QueuedJob, _Mapping]]] = ...) -> None: ...

class Jobs(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[QueuedJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[QueuedJob, _Mapping]]] = ...) -> None: ...

class JobId(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class JobIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("ids", "delay_ms")
    IDS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    delay_ms: int
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class Count(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class WorkingResponse(_message.Message):
    __slots__ = ("retry_s",)
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    retry_s: int
    def __init__(self, retry_s: _Optional[int] = ...) -> None: ...

class SetResultRequest(_message.Message):
    __slots__ = ("key", "value", "ttl_s", "replicate", "repl_timeout_ms", "ack")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    REPL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    ttl_s: int
    replicate: int
    repl_timeout_ms: int
    ack: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., ttl_s: _Optional[int] = ..., replicate: _Optional[int] = ..., repl_timeout_ms: _Optional[int] = ..., ack: _Optional[bool] = ...) -> None: ...

class SetResultResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetResultRequest(_message.Message):
    __slots__ = ("key", "wait_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    wait_ms: int
    def __init__(self, key: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class GetResultResponse(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class ResultKey(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class QueuePolicy(_message.Message):
    __slots__ = ("queue", "max_deliveries", "dead_letter", "backoff_base_s", "backoff_max_s")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_BASE_S_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_S_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_deliveries: int
    dead_letter: str
    backoff_base_s: int
    backoff_max_s: int
    def __init__(self, queue: _Optional[str] = ..., max_deliveries: _Optional[int] = ..., dead_letter: _Optional[str] = ..., backoff_base_s: _Optional[int] = ..., backoff_max_s: _Optional[int] = ...) -> None: ...

class SetQueuePolicyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetQueuePolicyResponse(_message.Message):
    __slots__ = ("found", "policy")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    found: bool
    policy: QueuePolicy
    def __init__(self, found: _Optional[bool] = ..., policy: _Optional[_Union[QueuePolicy, _Mapping]] = ...) -> None: ...

class ListQueuePoliciesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuePoliciesResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[QueuePolicy]
    def __init__(self, policies: _Optional[_Iterable[_Union[QueuePolicy, _Mapping]]] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("queue", "to", "count")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    to: str
    count: int
    def __init__(self, queue: _Optional[str] = ..., to: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("found", "id", "queue", "state", "repl", "ttl_s", "ctime", "delay_s", "retry_s", "nacks", "additional_deliveries", "nodes_delivered", "nodes_confirmed", "next_requeue_within_ms", "next_awake_within_ms", "body", "idempotency_key", "result", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REPL_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    NODES_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    NEXT_REQUEUE_WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_AWAKE_WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    id: str
    queue: str
    state: str
    repl: int
    ttl_s: int
    ctime: int
    delay_s: int
    retry_s: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: _containers.RepeatedScalarFieldContainer[str]
    nodes_confirmed: _containers.RepeatedScalarFieldContainer[str]
    next_requeue_within_ms: int
    next_awake_within_ms: int
    body: bytes
    idempotency_key: str
    result: bytes
    headers: _containers.ScalarMap[str, bytes]
    def __init__(self, found: _Optional[bool] = ..., id: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[str] = ..., repl: _Optional[int] = ..., ttl_s: _Optional[int] = ..., ctime: _Optional[int] = ..., delay_s: _Optional[int] = ..., retry_s: _Optional[int] = ..., nacks: _Optional[int] = ..., additional_deliveries: _Optional[int] = ..., nodes_delivered: _Optional[_Iterable[str]] = ..., nodes_confirmed: _Optional[_Iterable[str]] = ..., next_requeue_within_ms: _Optional[int] = ..., next_awake_within_ms: _Optional[int] = ..., body: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., result: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class QueueName(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("found", "name", "len", "age_s", "idle_s", "blocked", "import_from", "import_rate", "jobs_in", "jobs_out", "pause", "jobs", "active", "delayed")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEN_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    IDLE_S_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    IMPORT_FROM_FIELD_NUMBER: _ClassVar[int]
    IMPORT_RATE_FIELD_NUMBER: _ClassVar[int]
    JOBS_IN_FIELD_NUMBER: _ClassVar[int]
    JOBS_OUT_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    found: bool
    name: str
    len: int
    age_s: int
    idle_s: int
    blocked: int
    import_from: _containers.RepeatedScalarFieldContainer[str]
    import_rate: int
    jobs_in: int
    jobs_out: int
    pause: str
    jobs: int
    active: int
    delayed: int
    def __init__(self, found: _Optional[bool] = ..., name: _Optional[str] = ..., len: _Optional[int] = ..., age_s: _Optional[int] = ..., idle_s: _Optional[int] = ..., blocked: _Optional[int] = ..., import_from: _Optional[_Iterable[str]] = ..., import_rate: _Optional[int] = ..., jobs_in: _Optional[int] = ..., jobs_out: _Optional[int] = ..., pause: _Optional[str] = ..., jobs: _Optional[int] = ..., active: _Optional[int] = ..., delayed: _Optional[int] = ...) -> None: ...

class QPeekRequest(_message.Message):
    __slots__ = ("queue", "count")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    count: int
    def __init__(self, queue: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class QScanRequest(_message.Message):
    __slots__ = ("cursor", "count", "busyloop", "minlen", "maxlen", "importrate")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BUSYLOOP_FIELD_NUMBER: _ClassVar[int]
    MINLEN_FIELD_NUMBER: _ClassVar[int]
    MAXLEN_FIELD_NUMBER: _ClassVar[int]
    IMPORTRATE_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    count: int
    busyloop: bool
    minlen: int
    maxlen: int
    importrate: int
    def __init__(self, cursor: _Optional[int] = ..., count: _Optional[int] = ..., busyloop: _Optional[bool] = ..., minlen: _Optional[int] = ..., maxlen: _Optional[int] = ..., importrate: _Optional[int] = ...) -> None: ...

class QScanResponse(_message.Message):
    __slots__ = ("cursor", "queues")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    queues: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cursor: _Optional[int] = ..., queues: _Optional[_Iterable[str]] = ...) -> None: ...

class JScanRequest(_message.Message):
    __slots__ = ("cursor", "count", "busyloop", "queue", "states")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BUSYLOOP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    count: int
    busyloop: bool
    queue: str
    states: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cursor: _Optional[int] = ..., count: _Optional[int] = ..., busyloop: _Optional[bool] = ..., queue: _Optional[str] = ..., states: _Optional[_Iterable[str]] = ...) -> None: ...

class JScanResponse(_message.Message):
    __slots__ = ("cursor", "jobs")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, cursor: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class PauseRequest(_message.Message):
    __slots__ = ("queue", "state", "bcast")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BCAST_FIELD_NUMBER: _ClassVar[int]
    queue: str
    state: str
    bcast: bool
    def __init__(self, queue: _Optional[str] = ..., state: _Optional[str] = ..., bcast: _Optional[bool] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class HelloRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("id", "host", "resp_port", "grpc_port", "priority")
    ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RESP_PORT_FIELD_NUMBER: _ClassVar[int]
    GRPC_PORT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    host: str
    resp_port: int
    grpc_port: int
    priority: int
    def __init__(self, id: _Optional[str] = ..., host: _Optional[str] = ..., resp_port: _Optional[int] = ..., grpc_port: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class HelloResponse(_message.Message):
    __slots__ = ("my_id", "nodes")
    MY_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    my_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, my_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("section",)
    SECTION_FIELD_NUMBER: _ClassVar[int]
    section: str
    def __init__(self, section: _Optional[str] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.ScalarMap[str, str]
    def __init__(self, fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReadEventsRequest(_message.Message):
    __slots__ = ("from_seq", "max_events", "since_ms")
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    from_seq: int
    max_events: int
    since_ms: int
    def __init__(self, from_seq: _Optional[int] = ..., max_events: _Optional[int] = ..., since_ms: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "time_ms", "kind", "queue", "job_id", "attempt", "size")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time_ms: int
    kind: str
    queue: str
    job_id: str
    attempt: int
    size: int
    def __init__(self, seq: _Optional[int] = ..., time_ms: _Optional[int] = ..., kind: _Optional[str] = ..., queue: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class ReadEventsResponse(_message.Message):
    __slots__ = ("node_id", "first_seq", "next_seq", "events")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    first_seq: int
    next_seq: int
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, node_id: _Optional[str] = ..., first_seq: _Optional[int] = ..., next_seq: _Optional[int] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class AddScheduleRequest(_message.Message):
    __slots__ = ("name", "spec", "zone", "queue", "body", "replicate", "retry_s", "ttl_s", "misfire", "catchup")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    ASYNC_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: str
    zone: str
    queue: str
    body: bytes
    replicate: int
    retry_s: int
    ttl_s: int
    misfire: str
    catchup: int
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[str] = ..., zone: _Optional[str] = ..., queue: _Optional[str] = ..., body: _Optional[bytes] = ..., replicate: _Optional[int] = ..., retry_s: _Optional[int] = ..., ttl_s: _Optional[int] = ..., misfire: _Optional[str] = ..., catchup: _Optional[int] = ..., **kwargs) -> None: ...

class AddScheduleResponse(_message.Message):
    __slots__ = ("replaced",)
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    replaced: bool
    def __init__(self, replaced: _Optional[bool] = ...) -> None: ...

class ScheduleName(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ScheduleChangeResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("name", "spec", "zone", "queue", "body", "replicate", "retry_s", "ttl_s", "misfire", "catchup", "paused", "next_fire_times", "last_tick", "last_job_id", "last_job_state", "last_error", "owner", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_S_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    ASYNC_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIMES_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: str
    zone: str
    queue: str
    body: bytes
    replicate: int
    retry_s: int
    ttl_s: int
    misfire: str
    catchup: int
    paused: bool
    next_fire_times: _containers.RepeatedScalarFieldContainer[int]
    last_tick: int
    last_job_id: str
    last_job_state: str
    last_error: str
    owner: str
    version: str
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[str] = ..., zone: _Optional[str] = ..., queue: _Optional[str] = ..., body: _Optional[bytes] = ..., replicate: _Optional[int] = ..., retry_s: _Optional[int] = ..., ttl_s: _Optional[int] = ..., misfire: _Optional[str] = ..., catchup: _Optional[int] = ..., paused: _Optional[bool] = ..., next_fire_times: _Optional[_Iterable[int]] = ..., last_tick: _Optional[int] = ..., last_job_id: _Optional[str] = ..., last_job_state: _Optional[str] = ..., last_error: _Optional[str] = ..., owner: _Optional[str] = ..., version: _Optional[str] = ..., **kwargs) -> None: ...

class ShowScheduleResponse(_message.Message):
    __slots__ = ("found", "schedule")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    schedule: Schedule
    def __init__(self, found: _Optional[bool] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class DeclareExchangeRequest(_message.Message):
    __slots__ = ("name", "type", "passive")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PASSIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    passive: bool
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., passive: _Optional[bool] = ...) -> None: ...

class ExchangeName(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeclareQueueRequest(_message.Message):
    __slots__ = ("name", "expires_ms", "message_ttl_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    expires_ms: int
    message_ttl_ms: int
    def __init__(self, name: _Optional[str] = ..., expires_ms: _Optional[int] = ..., message_ttl_ms: _Optional[int] = ...) -> None: ...

class BindingRequest(_message.Message):
    __slots__ = ("queue", "exchange", "routing_key")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    exchange: str
    routing_key: str
    def __init__(self, queue: _Optional[str] = ..., exchange: _Optional[str] = ..., routing_key: _Optional[str] = ...) -> None: ...

class RouteChangeResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class ListRoutesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Exchange(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class Binding(_message.Message):
    __slots__ = ("exchange", "queue", "routing_key")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    queue: str
    routing_key: str
    def __init__(self, exchange: _Optional[str] = ..., queue: _Optional[str] = ..., routing_key: _Optional[str] = ...) -> None: ...

class QueueDeclaration(_message.Message):
    __slots__ = ("name", "expires_ms", "message_ttl_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    expires_ms: int
    message_ttl_ms: int
    def __init__(self, name: _Optional[str] = ..., expires_ms: _Optional[int] = ..., message_ttl_ms: _Optional[int] = ...) -> None: ...

class ListRoutesResponse(_message.Message):
    __slots__ = ("exchanges", "bindings", "queues")
    EXCHANGES_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    exchanges: _containers.RepeatedCompositeFieldContainer[Exchange]
    bindings: _containers.RepeatedCompositeFieldContainer[Binding]
    queues: _containers.RepeatedCompositeFieldContainer[QueueDeclaration]
    def __init__(self, exchanges: _Optional[_Iterable[_Union[Exchange, _Mapping]]] = ..., bindings: _Optional[_Iterable[_Union[Binding, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueDeclaration, _Mapping]]] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("exchange", "routing_key", "job")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    routing_key: str
    job: AddJobRequest
    def __init__(self, exchange: _Optional[str] = ..., routing_key: _Optional[str] = ..., job: _Optional[_Union[AddJobRequest, _Mapping]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("queues", "results")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    results: _containers.RepeatedCompositeFieldContainer[AddJobResult]
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., results: _Optional[_Iterable[_Union[AddJobResult, _Mapping]]] = ...) -> None: ...
