"""Which failed calls the SDK may send to the next node (disq/client/failover.py): the one
answer every path (adds, the blocking add, publish, the integrations' RESP calls) takes, and
the one loop that acts on it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from disq.client.errors import (
    ERROR_KEY,
    AuthError,
    IndeterminateError,
    LeavingError,
    NoReplError,
    UnavailableError,
)
from disq.client.failover import (
    How,
    NoAnswer,
    NodeAddr,
    NodeSet,
    NotSent,
    send_with_failover,
    send_with_failover_sync,
    was_not_sent,
)
from disq.proto_gen import api_pb2
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


# ---------------------------------------------------------------------- the judgement table
# What the one loop (send_with_failover and its sync twin) does with each outcome of a send
# to the first node: the next node answers, or the first one's failure is the answer.
A, B = "127.0.0.1:1", "127.0.0.1:2"


class _InOrder(random.Random):
    """Candidates in the seeds' order (no shuffle among equals)."""

    def shuffle(self, x: Any) -> None:
        return None


def _nodes() -> NodeSet:
    return NodeSet([A, B], rng=_InOrder(), tls=None, refresh_s=10.0, discover=False)


def refused(reason: int) -> grpc.aio.AioRpcError:
    info = api_pb2.ErrorInfo(reason=reason, message="refused")  # type: ignore[arg-type]
    trailers = grpc.aio.Metadata((ERROR_KEY, info.SerializeToString()))
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), trailers, "x")


def _first_fails(exc: BaseException) -> Callable[[NodeAddr], str]:
    def send(n: NodeAddr) -> str:
        if n.addr == A:
            raise exc
        return f"answered by {n.addr}"

    return send


MOVES_ON = "answered by " + B


@pytest.mark.parametrize(
    ("failure", "how", "outcome"),
    [
        # Never left: the next node, for any call.
        (failed(grpc.StatusCode.UNAVAILABLE, "Connection refused"), {}, MOVES_ON),
        (failed(grpc.StatusCode.UNAVAILABLE, NOT_STARTED_DETAILS), {}, MOVES_ON),
        (NotSent("not reachable"), {}, MOVES_ON),
        # Left, no answer: an add is indeterminate; a repeatable call goes on.
        (failed(grpc.StatusCode.UNAVAILABLE, "Socket closed"), {}, IndeterminateError),
        (failed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline"), {}, IndeterminateError),
        (NoAnswer("RESP: reset"), {}, IndeterminateError),
        (failed(grpc.StatusCode.UNAVAILABLE, "Socket closed"), {"repeatable": True}, MOVES_ON),
        (NoAnswer("RESP: reset"), {"repeatable": True}, MOVES_ON),
        # The node's refusal is the answer, wherever the call goes; LEAVING moves an add.
        (refused(api_pb2.NOREPL), {}, NoReplError),
        (NoReplError("NOREPL"), {}, NoReplError),
        (failed(grpc.StatusCode.UNAUTHENTICATED, "NOAUTH"), {"repeatable": True}, AuthError),
        (refused(api_pb2.LEAVING), {}, MOVES_ON),
        (LeavingError("LEAVING"), {}, MOVES_ON),
        (refused(api_pb2.LEAVING), {"leaving_moves": False}, LeavingError),
        # Not a failure of the call: passes through untouched, nothing marked.
        (KeyError("a bug"), {}, KeyError),
    ],
)
def test_what_a_failure_on_the_first_node_means(
    failure: BaseException, how: How, outcome: str | type[BaseException]
) -> None:
    for run in (_run_sync, _run_async):
        nodes = _nodes()
        if isinstance(outcome, str):
            assert run(nodes, _first_fails(failure), how) == outcome
            assert nodes.last_node == B  # the answering node is the home now
        else:
            with pytest.raises(outcome):
                run(nodes, _first_fails(failure), how)
            assert nodes.last_node is None
        # Set aside (a backoff set, never a clock read): a transport failure, or a LEAVING
        # that moved the call.
        set_aside = outcome in (MOVES_ON, IndeterminateError)
        assert (nodes.by_addr[A].down_until > 0) == set_aside, (failure, how)


def _run_sync(nodes: NodeSet, send: Callable[[NodeAddr], str], how: How) -> str:
    return send_with_failover_sync(nodes, send, **_an_add(how))


def _run_async(nodes: NodeSet, send: Callable[[NodeAddr], str], how: How) -> str:
    async def asend(n: NodeAddr) -> str:
        return send(n)

    return asyncio.run(send_with_failover(nodes, asend, **_an_add(how)))


def _an_add(how: How) -> How:
    full = How(**how)
    full["what"] = "add"
    return full


def test_a_leaving_node_moves_an_add_only_while_another_node_is_left() -> None:
    nodes = _nodes()

    def send(n: NodeAddr) -> str:
        raise LeavingError("LEAVING", node=n.addr)

    with pytest.raises(LeavingError):
        send_with_failover_sync(nodes, send, what="add")
    assert nodes.by_addr[A].down_until > 0  # set aside, and B was tried


def test_no_node_answering_is_unavailable_naming_the_last_failure() -> None:
    nodes = _nodes()
    with pytest.raises(UnavailableError, match=r"no node answered.*not reachable"):
        send_with_failover_sync(nodes, _raise(NotSent("not reachable")), what="add")


def _raise(exc: BaseException) -> Callable[[NodeAddr], str]:
    def send(n: NodeAddr) -> str:
        raise exc

    return send
