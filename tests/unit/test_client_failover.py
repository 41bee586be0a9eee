"""Which failed calls the SDK may send to the next node (disq/client/failover.py): the one
answer every failover loop (adds, the blocking add, publish) takes."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from disq.client.failover import was_not_sent
from disq.server.late_services import NOT_STARTED_DETAILS


def failed(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    "details",
    [
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused",
        "Connection refused",
        "connections to all backends failing; last error: UNAVAILABLE",
        NOT_STARTED_DETAILS,  # a node still loading its client API (publish moved on too)
    ],
)
def test_a_call_that_never_reached_a_node_may_go_to_the_next(details: str) -> None:
    assert was_not_sent(failed(grpc.StatusCode.UNAVAILABLE, details))


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.UNAVAILABLE, "Socket closed"),  # it may have run
        (grpc.StatusCode.UNAVAILABLE, ""),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
        (grpc.StatusCode.CANCELLED, "Connection refused"),  # only UNAVAILABLE says not sent
        (grpc.StatusCode.INTERNAL, NOT_STARTED_DETAILS),
    ],
)
def test_a_call_that_may_have_run_is_not_sent_again(code: grpc.StatusCode, details: str) -> None:
    assert not was_not_sent(failed(code, details))
