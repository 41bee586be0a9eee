#!/usr/bin/env python3
"""Where one Celery publish's time goes: each layer of the path timed on its own, one call
at a time, against node 0 of a 3-node cluster (cluster/lab.py, AOF fsync everysec) and a
redis-server beside it (scripts/ensure_redis_server.sh).

Rows (``--calls`` each, after 200 warm-up calls; REPLICATE as ``--replicate``):

  celery on memory://      Celery's ``send_task`` with kombu's in-memory transport: the
                           floor, Celery's and kombu's own work per task
  celery on redis          the same on ``redis://`` (one LPUSH per task)
  raw RESP ADDJOB          a socket, one ADDJOB and its reply: the node without gRPC
  raw grpc sync AddJob     grpc's sync stub, no SDK: the gRPC round trip
  ... on a bare server     the same call to a grpc.aio server (uvloop, as the nodes) whose
                           AddJob only answers an id: what gRPC itself costs a server
  SDK add_job via loop     ``Client.add_job`` as it was: a hop to the client's loop
                           thread, then AddJobs through grpc.aio
  SDK add_job              ``Client.add_job`` now: grpc's sync channel on the caller's thread
  SDK-view RESP add        ``disq.integrations.resp_adds.RespAdds.add_job``: one ADDJOB
                           on the node's RESP port with the SDK's node view (what the
                           transport ships, ``publish_over=resp``)
  celery on disq, gRPC (loop)  ``send_task`` on ``disq://?publish_over=grpc`` with the
                           loop-thread add
  celery on disq, gRPC     ``send_task`` on ``disq://?publish_over=grpc``: the
                           caller's-thread gRPC add
  celery on disq, RESP     ``send_task`` on ``disq://`` as shipped (``publish_over=resp``)
  celery on disq, RESP add (prototype)  ``publish_over=grpc`` with ``Client.add_job``
                           replaced by one ADDJOB on a bare socket (no failover, no TLS,
                           one thread): the floor the shipped RESP path is measured against

Columns: wall time per call, this process's CPU per call (``time.process_time``), and node
0's CPU per call (``/proc/<pid>/stat``, every thread of the node; 0 for rows that do not
touch it). The machine's other load shows in the wall column only.

    .venv/bin/python scripts/probe_publish.py [--calls 3000] [--replicate 1]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_celery import free_port, start_redis  # noqa: E402
from bench_common import log, machine_info  # noqa: E402

from cluster.lab import Lab  # noqa: E402

BODY = b"x" * 600  # about a Celery message's JSON envelope


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, call: Callable[[], Any], calls: int, node_pid: int | None) -> str:
    for _ in range(200):
        call()
    node0 = proc_cpu_s(node_pid) if node_pid else 0.0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    node = proc_cpu_s(node_pid) - node0 if node_pid else 0.0
    row = (
        f"| {name} | {wall / calls * 1e6:,.0f} | {calls / wall:,.0f} | "
        f"{cpu / calls * 1e6:,.0f} | {node / calls * 1e6:,.0f} |"
    )
    log(row)
    return row


def resp_addjob(port: int, replicate: int) -> Callable[[], bytes]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    args = [b"ADDJOB", b"probe-resp", BODY, b"5000", b"REPLICATE", str(replicate).encode()]
    cmd = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    def call() -> bytes:
        sock.sendall(cmd)
        reply = sock.recv(4096)
        if not reply.startswith(b"+"):
            raise RuntimeError(f"ADDJOB: {reply!r}")
        return reply

    return call


def _bare_server(port: int) -> None:
    """A grpc.aio server whose AddJob answers at once (run in a process of its own)."""
    import asyncio

    import grpc
    import uvloop

    from disq.proto_gen import api_pb2, api_pb2_grpc

    class Bare(api_pb2_grpc.QueueServicer):  # type: ignore[misc]
        async def AddJob(self, request: Any, context: Any) -> Any:
            return api_pb2.AddJobResponse(id="D-00000000-bare")

    async def serve() -> None:
        server = grpc.aio.server()
        api_pb2_grpc.add_QueueServicer_to_server(Bare(), server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    uvloop.install()
    asyncio.run(serve())


def resp_add_job(port: int) -> Callable[..., str]:
    """A stand-in for ``Client.add_job`` over the node's RESP port (the probe's last row)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    flags = {"replicate": b"REPLICATE", "retry_s": b"RETRY", "ttl_s": b"TTL", "delay_s": b"DELAY"}

    def add_job(self: Any, queue: str, body: bytes | str, **options: Any) -> str:
        data = body.encode() if isinstance(body, str) else body
        timeout_ms = str(options.pop("repl_timeout_ms", 5000)).encode()
        args = [b"ADDJOB", queue.encode(), data, timeout_ms]
        for key, value in options.items():
            if key == "async_":
                args.append(b"ASYNC")
            else:
                args += [flags[key], str(value).encode()]
        sock.sendall(
            b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        )
        reply = sock.recv(4096)
        if not reply.startswith(b"+"):
            raise RuntimeError(f"ADDJOB: {reply!r}")
        return reply[1:-2].decode()

    return add_job


def celery_publisher(url: str, queue: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    from celery import Celery

    app = Celery("probe", broker=url)
    stack = contextlib.ExitStack()
    conn = stack.enter_context(app.connection_for_write())
    conn.ensure_connection(max_retries=3)
    producer = stack.enter_context(app.producer_or_acquire())

    def call() -> Any:
        return app.send_task("probe.noop", args=(1, 1), queue=queue, producer=producer)

    return call, stack.close


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--replicate", type=int, default=1)
    args = ap.parse_args()

    import grpc

    from disq.client import Client
    from disq.integrations.resp_adds import RespAdds
    from disq.proto_gen import api_pb2, api_pb2_grpc

    n, r = args.calls, args.replicate
    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="probe-publish-"))
    redis, redis_port = start_redis(workdir)
    lab = Lab(3, workdir / "lab", node_timeout_ms=2000)
    rows: list[str] = []
    try:
        lab.start()
        node = lab.node(0)
        pid = node.proc.pid if node.proc is not None else None
        target = f"127.0.0.1:{node.bus_port}"
        disq_url = f"disq://{target}?replicate={r}&discover=0"

        call, close = celery_publisher("memory://", "probe-mem")
        rows.append(measure("celery on memory://", call, n, None))
        close()
        call, close = celery_publisher(f"redis://127.0.0.1:{redis_port}/0", "probe-redis")
        rows.append(measure("celery on redis", call, n, None))
        close()

        rows.append(measure(f"raw RESP ADDJOB R{r}", resp_addjob(node.port, r), n, pid))
        with grpc.insecure_channel(target) as channel:
            stub = api_pb2_grpc.QueueStub(channel)  # type: ignore[no-untyped-call]
            req = api_pb2.AddJobRequest(queue="probe-grpc", body=BODY, timeout_ms=5000)
            req.replicate = r
            rows.append(
                measure(f"raw grpc sync AddJob R{r}", lambda: stub.AddJob(req, timeout=10), n, pid)
            )

        bare_port = free_port()
        bare = multiprocessing.get_context("spawn").Process(target=_bare_server, args=(bare_port,))
        bare.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{bare_port}") as channel:
                grpc.channel_ready_future(channel).result(timeout=30)
                stub = api_pb2_grpc.QueueStub(channel)  # type: ignore[no-untyped-call]
                rows.append(
                    measure(
                        "... on a bare server",
                        lambda: stub.AddJob(req, timeout=10),
                        n,
                        bare.pid,
                    )
                )
        finally:
            bare.terminate()
            bare.join(10)

        with Client(target, discover=False) as c:
            aio = c.aio
            via_loop = c._run  # the path Client.add_job took before the blocking add
            rows.append(
                measure(
                    f"SDK add_job via loop R{r}",
                    lambda: via_loop(aio.add_job("probe-sdk", BODY, replicate=r)),
                    n,
                    pid,
                )
            )
            rows.append(
                measure(
                    f"SDK add_job R{r}", lambda: c.add_job("probe-sdk", BODY, replicate=r), n, pid
                )
            )
            c.hello()  # the RESP ports (discovery is off)
            adds = RespAdds(c)
            rows.append(
                measure(
                    f"SDK-view RESP add R{r}",
                    lambda: adds.add_job("probe-sdk", BODY, replicate=r),
                    n,
                    pid,
                )
            )
            adds.close()

        from disq.client import sync

        fast_add = sync.Client.add_job

        def loop_add(self: Any, queue: str, body: bytes | str, **options: Any) -> str:
            return str(self._run(self._aio.add_job(queue, body, **options)))

        grpc_url = f"{disq_url}&publish_over=grpc"
        sync.Client.add_job = loop_add  # type: ignore[method-assign]
        try:
            call, close = celery_publisher(grpc_url, "probe-disq")
            rows.append(measure(f"celery on disq R{r}, gRPC (loop)", call, n, pid))
            close()
        finally:
            sync.Client.add_job = fast_add  # type: ignore[method-assign]
        call, close = celery_publisher(grpc_url, "probe-disq")
        rows.append(measure(f"celery on disq R{r}, gRPC", call, n, pid))
        close()
        call, close = celery_publisher(disq_url, "probe-disq")
        rows.append(measure(f"celery on disq R{r}, RESP", call, n, pid))
        close()
        sync.Client.add_job = resp_add_job(node.port)  # type: ignore[method-assign]
        try:
            call, close = celery_publisher(grpc_url, "probe-disq")
            rows.append(measure(f"celery on disq R{r}, RESP add (prototype)", call, n, pid))
            close()
        finally:
            sync.Client.add_job = fast_add  # type: ignore[method-assign]
    finally:
        lab.stop_all()
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"{n} calls per row, one at a time, node 0 of 3 ({machine_info()}; "
        f"1-min load before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f})\n"
    )
    print("| path | wall us/call | calls/s | client CPU us/call | node CPU us/call |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
