#!/usr/bin/env python3
"""The floor of a node-to-node round trip: one message out, one back, one in flight.

Two processes on loopback, both on uvloop. The pinger sends a small frame, the echoer answers
it, and the pinger sends the next one as soon as the answer arrives: the median round trip
is what one hop of a replicated ADDJOB (REPLJOB out, GOTJOB back) costs at pipeline 1 before
any core runs. Transports:

  peerlinks   disq's real bus (disq/server/peer_link.py): two one-way links, a ReplJob out
              and a GotJob back through the real codec; job messages take the job lanes
              (disq/server/job_lane.py), or with --no-lane the gRPC streams (as before the
              lanes)
  grpc-aio    one grpc.aio bidi stream, raw bytes both ways (no codec)
  grpc-sync   grpc's sync stack on threads, raw bytes: the loop hands a frame to a writer
              thread, a reader thread hands the answer back with call_soon_threadsafe
  tcp         an asyncio.Protocol on a plain TCP socket (TCP_NODELAY), length-prefixed frames

    .venv/bin/python scripts/probe_link_rtt.py [--count 5000] [--transport all]
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import uvloop  # noqa: E402

from disq.core.messages import GotJob, JobData, Message, ReplJob  # noqa: E402
from disq.logging import configure_logging  # noqa: E402
from disq.server.peer_link import PeerLinks  # noqa: E402

PINGER = "5" * 40
ECHOER = "7" * 40
METHOD = "/probe.Echo/Stream"
PAYLOAD = b"p" * 160  # about one REPLJOB of a 100-byte body
_IDENT: Callable[[bytes], bytes] = lambda b: b  # noqa: E731


def _job(i: int) -> ReplJob:
    return ReplJob(JobData(f"D-{i:08x}-{i:024x}-0e10", "probe", b"b" * 100, 3, i, 0, 300, 3600))


# ---- echo side (child process) -------------------------------------------------------------


async def echo_peerlinks(pinger_port: int, lane: bool) -> None:
    links: PeerLinks

    def on_messages(sender: str, msgs: list[Message]) -> None:
        for m in msgs:
            if isinstance(m, ReplJob):
                links.send(sender, GotJob(m.job.id))

    links = PeerLinks(ECHOER, on_messages, lane_port=0 if lane else None)
    port = await links.start()
    links.set_address(PINGER, "127.0.0.1", pinger_port)
    if not await links.wait_link_up(PINGER, 10):
        raise SystemExit("echo: no link to the pinger")
    await _serve_until_stdin_closes(port)
    await links.close()


async def echo_grpc_aio() -> None:
    async def stream(request_iterator: Any, context: Any) -> Any:
        async for data in request_iterator:
            yield data

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "probe.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream, _IDENT, _IDENT)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await _serve_until_stdin_closes(port)
    await server.stop(None)


def echo_grpc_sync() -> None:
    def stream(request_iterator: Iterator[bytes], context: Any) -> Iterator[bytes]:
        yield from request_iterator

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "probe.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream, _IDENT, _IDENT)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    sys.stdin.read()
    server.stop(None)


class _EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # frames are echoed as they come: the pinger parses


async def echo_tcp() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_EchoProtocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await _serve_until_stdin_closes(port)
    server.close()


async def _serve_until_stdin_closes(port: int) -> None:
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


# ---- ping side ------------------------------------------------------------------------------


class Pinger:
    """Sends one frame per answer; `rtts_us` collects the round trips."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.rtts_us: list[float] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent_at = 0.0
        self.send: Callable[[int], None] = lambda i: None

    def start(self) -> None:
        self.sent_at = time.perf_counter()
        self.send(0)

    def on_answer(self) -> None:
        now = time.perf_counter()
        self.rtts_us.append((now - self.sent_at) * 1e6)
        n = len(self.rtts_us)
        if n >= self.count:
            if not self.done.done():
                self.done.set_result(None)
            return
        self.sent_at = time.perf_counter()
        self.send(n)


def _spawn(transport: str, extra: list[str]) -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--role", "echo", "--transport", transport, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    return child, int(child.stdout.readline())


async def ping_peerlinks(count: int, lane: bool = True) -> list[float]:
    p = Pinger(count)
    links = PeerLinks(PINGER, lambda _s, msgs: p.on_answer(), lane_port=0 if lane else None)
    port = await links.start()
    extra = ["--pinger-port", str(port)] + ([] if lane else ["--no-lane"])
    child, echo_port = await asyncio.to_thread(_spawn, "peerlinks", extra)
    try:
        links.set_address(ECHOER, "127.0.0.1", echo_port)
        if not await links.wait_link_up(ECHOER, 10):
            raise SystemExit("ping: no link to the echoer")
        jobs = [_job(i) for i in range(count)]
        p.send = lambda i: links.send(ECHOER, jobs[i])
        await _warm_and_run(p)
    finally:
        _stop(child)
        await links.close()
    return p.rtts_us


async def ping_grpc_aio(count: int) -> list[float]:
    child, port = await asyncio.to_thread(_spawn, "grpc-aio", [])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(METHOD, _IDENT, _IDENT)()
            rtts: list[float] = []
            for _ in range(count + count // 10):
                t0 = time.perf_counter()
                await call.write(PAYLOAD)
                await call.read()
                rtts.append((time.perf_counter() - t0) * 1e6)
            await call.done_writing()
    finally:
        _stop(child)
    return rtts[count // 10 :]


async def ping_grpc_sync(count: int) -> list[float]:
    loop = asyncio.get_running_loop()
    child, port = await asyncio.to_thread(_spawn, "grpc-sync", [])
    p = Pinger(count)
    out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def requests() -> Iterator[bytes]:
        while (data := out.get()) is not None:
            yield data

    def reader() -> None:  # the sync stack's reader thread hands every answer to the loop
        for _ in channel.stream_stream(METHOD, _IDENT, _IDENT)(requests()):
            loop.call_soon_threadsafe(p.on_answer)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        p.send = lambda i: out.put(PAYLOAD)
        await _warm_and_run(p)
    finally:
        out.put(None)
        thread.join(5)
        channel.close()
        _stop(child)
    return p.rtts_us


class _PingProtocol(asyncio.Protocol):
    def __init__(self, p: Pinger) -> None:
        self.p = p
        self.buf = b""

    def connection_made(self, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.p.send = lambda i: transport.write(struct.pack(">I", len(PAYLOAD)) + PAYLOAD)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        while len(buf) >= 4:
            n = struct.unpack_from(">I", buf)[0]
            if len(buf) < 4 + n:
                break
            buf = buf[4 + n :]
            self.p.on_answer()
        self.buf = buf


async def ping_tcp(count: int) -> list[float]:
    loop = asyncio.get_running_loop()
    child, port = await asyncio.to_thread(_spawn, "tcp", [])
    p = Pinger(count)
    try:
        transport, _ = await loop.create_connection(lambda: _PingProtocol(p), "127.0.0.1", port)
        await _warm_and_run(p)
        transport.close()
    finally:
        _stop(child)
    return p.rtts_us


async def _warm_and_run(p: Pinger) -> None:
    count = p.count
    p.count = count // 10  # warm-up, not counted
    p.start()
    await asyncio.wait_for(p.done, 60)
    p.rtts_us.clear()
    p.count = count
    p.done = asyncio.get_running_loop().create_future()
    p.start()
    await asyncio.wait_for(p.done, 60)


def _stop(child: subprocess.Popen[str]) -> None:
    if child.stdin is not None:
        child.stdin.close()
    child.wait(timeout=10)


PINGERS = {
    "peerlinks": ping_peerlinks,
    "grpc-aio": ping_grpc_aio,
    "grpc-sync": ping_grpc_sync,
    "tcp": ping_tcp,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=5000, help="round trips per transport")
    p.add_argument("--transport", choices=[*PINGERS, "all"], default="all")
    p.add_argument("--role", choices=("ping", "echo"), default="ping", help=argparse.SUPPRESS)
    p.add_argument("--pinger-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--no-lane", action="store_true", help="peerlinks: job messages on gRPC")
    args = p.parse_args()
    configure_logging()
    if args.role == "echo":
        if args.transport == "grpc-sync":
            echo_grpc_sync()
        elif args.transport == "peerlinks":
            uvloop.run(echo_peerlinks(args.pinger_port, not args.no_lane))
        elif args.transport == "grpc-aio":
            uvloop.run(echo_grpc_aio())
        else:
            uvloop.run(echo_tcp())
        return
    names = list(PINGERS) if args.transport == "all" else [args.transport]
    print(f"round trip, one in flight, {args.count} per transport, two processes on uvloop")
    for name in names:
        if name == "peerlinks":
            rtts = sorted(uvloop.run(ping_peerlinks(args.count, not args.no_lane)))
            name += " (gRPC only)" if args.no_lane else ""
        else:
            rtts = sorted(uvloop.run(PINGERS[name](args.count)))
        p50 = statistics.median(rtts)
        p99 = rtts[int(len(rtts) * 0.99)]
        print(f"  {name:<22} p50 {p50:7.1f} us   p99 {p99:7.1f} us")


if __name__ == "__main__":
    main()
