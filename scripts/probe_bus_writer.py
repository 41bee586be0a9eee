#!/usr/bin/env python3
"""What writing a frame on the bus costs the writing thread: grpc.aio's stream write against
grpc's sync stream fed by a writer thread (issue 14's last direction).

A receiver (a child process, grpc's sync server) takes one bidi stream of raw frames (no
protobuf: the bytes go through as they are) and counts them. The sender streams FRAMES frames
of SIZE bytes in one of two ways:

* ``aio``: the node's way today (disq/server/peer_link.py): ``await call.write(frame)`` on a
  grpc.aio stream, on the asyncio loop (uvloop);
* ``thread``: the main thread only puts the frame on a ``queue.SimpleQueue``; a writer thread
  feeds a sync grpc stream (``stub(iter(queue.get, None))``) from it.

It prints, per frame: the main thread's CPU (``time.thread_time``), the whole sender
process's CPU (``time.process_time``, every thread, gRPC's own included) and the wall time.
The main thread's CPU is what a node's loop would have left for its clients.

    .venv/bin/python scripts/probe_bus_writer.py [--frames 20000] [--size 4000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio

METHOD = "/probe.Bus/Link"


def _identity(b: bytes) -> bytes:
    return b


# ------------------------------------------------------------------------------ receiver
def receiver() -> None:
    """Count the frames of each stream; answer one frame (the count) when it ends."""

    def link(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        n = 0
        for _ in requests:
            n += 1
        yield str(n).encode()

    handler = grpc.method_handlers_generic_handler(
        "probe.Bus",
        {
            "Link": grpc.stream_stream_rpc_method_handler(
                link, request_deserializer=_identity, response_serializer=_identity
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(0)


# ------------------------------------------------------------------------------ senders
def send_aio(addr: str, frames: int, frame: bytes) -> tuple[float, float, float, int]:
    async def main() -> tuple[float, float, float, int]:
        async with grpc.aio.insecure_channel(addr) as ch:
            call = ch.stream_stream(
                METHOD, request_serializer=_identity, response_deserializer=_identity
            )()
            await call.write(frame)  # the stream is up before the clock starts
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            for _ in range(frames - 1):
                await call.write(frame)
            await call.done_writing()
            got = int((await call.read()).decode())
            return (
                time.thread_time() - c0,
                time.process_time() - p0,
                time.perf_counter() - t0,
                got,
            )

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover
        return asyncio.run(main())


def send_thread(addr: str, frames: int, frame: bytes) -> tuple[float, float, float, int]:
    ch = grpc.insecure_channel(addr)
    stub = ch.stream_stream(METHOD, request_serializer=_identity, response_deserializer=_identity)
    q: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    result: list[int] = []

    def writer() -> None:
        for r in stub(iter(q.get, None)):
            result.append(int(r.decode()))

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    q.put(frame)
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    put = q.put
    for _ in range(frames - 1):
        put(frame)
    main_cpu = time.thread_time() - c0
    q.put(None)
    t.join()
    out = (main_cpu, time.process_time() - p0, time.perf_counter() - t0, result[0])
    ch.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=20_000)
    p.add_argument("--size", type=int, default=4_000, help="bytes per frame")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.receiver:
        receiver()
        return 0
    child = subprocess.Popen(
        [sys.executable, __file__, "--receiver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        addr = f"127.0.0.1:{child.stdout.readline().strip()}"
        frame = b"x" * args.size
        rows: dict[str, list[tuple[float, float, float, int]]] = {"aio": [], "thread": []}
        for _ in range(args.repeat):  # interleaved
            rows["aio"].append(send_aio(addr, args.frames, frame))
            rows["thread"].append(send_thread(addr, args.frames, frame))
        n = args.frames
        print(f"{n:,} frames of {args.size:,} bytes, median of {args.repeat} interleaved runs")
        head = "| writer | main thread CPU / frame | process CPU / frame | wall / frame |"
        print(head + " frames/s |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, runs in rows.items():
            if any(r[3] != n for r in runs):
                print(f"{name}: the receiver counted {[r[3] for r in runs]} frames, want {n}")
                return 1
            main_us = statistics.median(r[0] for r in runs) / n * 1e6
            proc_us = statistics.median(r[1] for r in runs) / n * 1e6
            wall_us = statistics.median(r[2] for r in runs) / n * 1e6
            print(
                f"| {name} | {main_us:.1f} us | {proc_us:.1f} us | {wall_us:.1f} us "
                f"| {1e6 / wall_us:,.0f} |"
            )
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
