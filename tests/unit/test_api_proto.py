"""The client API contract (proto/disq/v1/api.proto) has what the gRPC API issue asks for."""

from __future__ import annotations

from disq.proto_gen import api_pb2

REQUIRED_RPCS = {
    "AddJob", "AddJobs", "GetJobs", "StreamJobs", "Ack", "FastAck", "Nack", "Working",
    "Show", "QLen", "QStat", "QPeek", "QScan", "JScan", "Pause", "Hello", "Info", "ReadEvents",
    # issue 25: schedules
    "AddSchedule", "DeleteSchedule", "PauseSchedule", "ResumeSchedule", "ListSchedules",
    "ShowSchedule",
    # issue 29: exchanges, bindings, transient queues, publish, purge
    "DeclareExchange", "DeleteExchange", "DeclareQueue", "DeleteQueue", "BindQueue",
    "UnbindQueue", "ListRoutes", "Publish", "PurgeQueue",
    # results kept by the cluster
    "SetResult", "GetResult", "DeleteResult",
    # queue policies kept by the cluster
    "SetQueuePolicy", "GetQueuePolicy", "DeleteQueuePolicy", "ListQueuePolicies",
    # dead letters back (QREDRIVE, per node)
    "Redrive",
}  # fmt: skip
REQUIRED_REASONS = {
    "NOREPL", "MAXLEN", "PAUSED", "OOM", "BADID", "NOJOB", "TOOLATE", "LEAVING",
    "NOT_FOUND", "PRECONDITION_FAILED", "LIMIT",
}  # fmt: skip


def test_every_rpc_of_the_issue_is_in_the_service() -> None:
    service = api_pb2.DESCRIPTOR.services_by_name["Queue"]
    assert {m.name for m in service.methods} == REQUIRED_RPCS
    assert service.methods_by_name["StreamJobs"].server_streaming


def test_error_reasons_are_stable_and_complete() -> None:
    reasons = {v.name: v.number for v in api_pb2.ErrorReason.DESCRIPTOR.values}
    assert REQUIRED_REASONS <= set(reasons)
    assert reasons["ERROR_REASON_UNSPECIFIED"] == 0 and reasons["NOREPL"] == 1


def test_unset_retry_differs_from_retry_zero() -> None:
    # RETRY 0 means at-most-once; unset means Disque's default: the field must say which.
    assert not api_pb2.AddJobRequest(queue="q").HasField("retry_s")
    assert api_pb2.AddJobRequest(queue="q", retry_s=0).HasField("retry_s")
    data = api_pb2.AddJobRequest(queue="q", retry_s=0).SerializeToString()
    assert api_pb2.AddJobRequest.FromString(data).HasField("retry_s")
