"""The routes RPCs' conversions (disq/server/api_routes.py) and the SDK's error classes for
their reasons; the RPCs themselves run against real nodes in tests/integration/test_routes.py."""

from __future__ import annotations

import grpc
import pytest

from disq.client import LimitError, NotFoundError, PreconditionFailedError
from disq.client.errors import from_info
from disq.core.routes.table import RouteError
from disq.proto_gen import api_pb2
from disq.server.api_routes import _ttl_capped, route_error


@pytest.mark.parametrize(
    ("code", "reason", "status", "sdk"),
    [
        ("NOT_FOUND", api_pb2.NOT_FOUND, grpc.StatusCode.NOT_FOUND, NotFoundError),
        (
            "PRECONDITION_FAILED",
            api_pb2.PRECONDITION_FAILED,
            grpc.StatusCode.FAILED_PRECONDITION,
            PreconditionFailedError,
        ),
        ("LIMIT", api_pb2.LIMIT, grpc.StatusCode.RESOURCE_EXHAUSTED, LimitError),
    ],
)
def test_route_errors_keep_their_reason_end_to_end(
    code: str, reason: int, status: grpc.StatusCode, sdk: type
) -> None:
    err = route_error(RouteError("what went wrong", code))
    assert (err.reason, err.code, err.message) == (reason, status, f"{code} what went wrong")
    got = from_info(api_pb2.ErrorInfo.FromString(err.info().SerializeToString()))
    assert isinstance(got, sdk) and got.reason == code and "what went wrong" in got.message


def test_a_bad_argument_is_syntax_invalid_argument() -> None:
    err = route_error(RouteError("exchange type 'x' is not supported"))
    assert (err.reason, err.code) == (api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT)


def test_a_delayed_jobs_message_ttl_counts_from_the_end_of_its_delay() -> None:
    job = api_pb2.AddJobRequest(queue="q", delay_s=30)
    assert _ttl_capped(job, 5_000) == 35
    job.ttl_s = 32
    assert _ttl_capped(job, 5_000) == 32


@pytest.mark.parametrize(
    ("ttl_s", "message_ttl_ms", "expected"),
    [
        (None, 1500, 2),  # whole seconds, rounded up
        (None, 1, 1),  # at least 1
        (None, 1000, 1),
        (600, 5_000, 5),
        (3, 60_000, 3),  # the add's own TTL is shorter: it stays
        (None, 2 * 86400 * 1000, 86400),  # unset: the add's default, 1 day
    ],
)
def test_a_queues_message_ttl_caps_the_adds_ttl(
    ttl_s: int | None, message_ttl_ms: int, expected: int
) -> None:
    job = api_pb2.AddJobRequest(queue="q")
    if ttl_s is not None:
        job.ttl_s = ttl_s
    assert _ttl_capped(job, message_ttl_ms) == expected
