"""The client API's stand-in on a gRPC server started before it (disq/server/late_services.py),
on a real grpc.aio server: UNAVAILABLE "not run" until the services are installed, then theirs."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from disq.client.failover import NOT_SENT_DETAILS
from disq.server.late_services import NOT_STARTED_DETAILS, LateServices


async def _check(port: int) -> tuple[grpc.StatusCode, str, int]:
    """One health Check: its status code, details and (when OK) the serving status."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            r = await health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or "", -1
        return grpc.StatusCode.OK, "", r.status


async def _unknown(port: int) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            await ch.unary_unary("/no.Such/Method")(b"", timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_calls_are_not_run_until_the_services_are_installed_then_served() -> None:
    async def scenario() -> None:
        server = grpc.aio.server()
        late = LateServices()
        late.attach(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            code, details, _ = await _check(port)
            assert code == grpc.StatusCode.UNAVAILABLE
            assert details == NOT_STARTED_DETAILS
            assert await _unknown(port) == grpc.StatusCode.UNAVAILABLE

            servicer = health.aio.HealthServicer()
            health_pb2_grpc.add_HealthServicer_to_server(servicer, late)  # in the server's place
            await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
            code, _, _ = await _check(port)
            assert code == grpc.StatusCode.UNAVAILABLE  # registered, not installed yet

            late.install()
            assert await _check(port) == (
                grpc.StatusCode.OK,
                "",
                health_pb2.HealthCheckResponse.SERVING,
            )
            assert await _unknown(port) == grpc.StatusCode.UNIMPLEMENTED
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_the_sdk_counts_an_early_call_as_never_sent() -> None:
    # The SDK retries such a call (elsewhere if it can) instead of reporting it indeterminate.
    assert any(marker in NOT_STARTED_DETAILS for marker in NOT_SENT_DETAILS)
