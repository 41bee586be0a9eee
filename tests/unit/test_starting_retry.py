"""The SDK asks a starting node again (disq/client/starting.py), on a real grpc.aio server
whose client API is installed late (disq/server/late_services.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from disq.client import starting
from disq.client.starting import AsyncUnary, SyncUnary
from disq.server.late_services import NOT_STARTED_DETAILS, LateServices

REQ = health_pb2.HealthCheckRequest()


class CountingLate(LateServices):
    """Counts the calls answered "not run"; ``asked(n)`` is set once n were."""

    def __init__(self) -> None:
        super().__init__()
        self.not_run = 0
        self.waiters: dict[int, asyncio.Event] = {}

    def asked(self, n: int) -> asyncio.Event:
        return self.waiters.setdefault(n, asyncio.Event())

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        if not self.installed:
            self.not_run += 1
            for n, ev in self.waiters.items():
                if self.not_run >= n:
                    ev.set()
        return super().service(handler_call_details)


async def _server(late: LateServices) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    late.attach(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, late)
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, port


async def _asked_again_then_served(late: CountingLate, call: asyncio.Future[Any]) -> None:
    await asyncio.wait_for(late.asked(2).wait(), 10)  # asked, then asked again
    assert not call.done()
    late.install()
    r = await asyncio.wait_for(call, 10)
    assert r.status == health_pb2.HealthCheckResponse.SERVING


def test_the_details_name_what_the_sdk_looks_for() -> None:
    assert NOT_STARTED_DETAILS.endswith(starting.STARTING_DETAILS)


def test_a_call_to_a_starting_node_is_asked_again_until_its_api_is_in() -> None:
    async def scenario() -> None:
        late = CountingLate()
        server, port = await _server(late)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                check = AsyncUnary(health_pb2_grpc.HealthStub(ch).Check)
                await _asked_again_then_served(late, asyncio.ensure_future(check(REQ, timeout=5)))
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_a_node_that_stays_starting_is_given_up_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(starting, "WAIT_S", 0.2)

    async def scenario() -> None:
        late = CountingLate()
        server, port = await _server(late)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                check = AsyncUnary(health_pb2_grpc.HealthStub(ch).Check)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await check(REQ, timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
                assert info.value.details() == NOT_STARTED_DETAILS
                assert late.not_run >= 2
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_any_other_failure_is_not_asked_again() -> None:
    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        calls.append(request)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
        return b""

    calls: list[bytes] = []

    async def scenario() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "t.T", {"M": grpc.unary_unary_rpc_method_handler(refuse)}
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                m = AsyncUnary(ch.unary_unary("/t.T/M"))
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await m(b"x", timeout=5)
                assert info.value.details() == "draining"
                assert calls == [b"x"]
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_the_blocking_client_asks_again_too() -> None:
    async def scenario() -> None:
        late = CountingLate()
        server, port = await _server(late)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                check = SyncUnary(
                    ch.unary_unary(
                        "/grpc.health.v1.Health/Check",
                        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                        response_deserializer=health_pb2.HealthCheckResponse.FromString,
                    )
                )
                call = asyncio.ensure_future(asyncio.to_thread(check, REQ, timeout=5))
                await _asked_again_then_served(late, call)
        finally:
            await server.stop(None)

    asyncio.run(scenario())
