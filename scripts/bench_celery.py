#!/usr/bin/env python3
"""Celery on disq beside Celery on Redis: the same app, the same tasks, one worker process.

Starts redis-server (Debian's; scripts/ensure_redis_server.sh installs it) with an AOF
fsynced every second, and a 3-node disq cluster (cluster/lab.py: AOF, fsync everysec), then
for each broker row:

  * redis             ``redis://127.0.0.1:PORT/0``
  * disq-repl1        ``disq://node0?replicate=1&discover=0``
  * disq-repl2        ``disq://node0?replicate=2&discover=0`` (the cluster's majority:
                      a copy on one more node before the add is answered)
  * disq-repl3        ``disq://node0?replicate=3&discover=0`` (a copy on every node)

(``--rows`` picks some of them; redis is always run, every ratio is to it.)

``discover=0`` keeps the producer and the worker on the same node, as they are with one
Redis (otherwise the SDK may pick two different nodes and federation moves every job).

Per row: ``--tasks`` no-op tasks published with ``send_task`` from this process (publish
tasks/s), then one ``celery -A benchapp worker --pool solo`` process (one process: the
worker runs the tasks itself) drains them; the tasks count themselves in the worker and
write the times of the first and the last run: consume tasks/s = (tasks - 1) / (last -
first). Same flags for every broker (no mingle, gossip or heartbeats; default prefetch,
early acks). Medians of ``--repeat`` runs; ratios to Redis.

  .venv/bin/python scripts/bench_celery.py
  .venv/bin/python scripts/bench_celery.py --tasks 2000 --repeat 1 --markdown /tmp/celery.md

The disq nodes run the tree's code as it is (compiled by mypyc when built and not stale; with
``DISQ_PURE=1`` in the environment, the Python sources): the table's header says which.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "scripts")) if p not in sys.path]

from bench_common import log, machine_info  # noqa: E402

from cluster.lab import Lab  # noqa: E402

BIN = Path(sys.executable).parent

APP = """
import os
import time

from celery import Celery

app = Celery("benchapp", broker=os.environ["BROKER_URL"])
app.conf.broker_connection_retry_on_startup = True
OUT = os.environ["BENCH_OUT"]
N = int(os.environ["BENCH_TASKS"])
_count = 0


@app.task
def noop(k):
    global _count
    _count += 1
    if _count == 1 or _count == N:
        with open(os.path.join(OUT, "first" if _count == 1 else "last"), "w") as f:
            f.write(repr(time.time()))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    subprocess.run([str(ROOT / "scripts" / "ensure_redis_server.sh")], check=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def run_row(url: str, queue: str, tasks: int, workdir: Path) -> tuple[float, float]:
    """(publish tasks/s, consume tasks/s) of one broker URL."""
    from celery import Celery

    out = workdir / f"out-{queue}"
    out.mkdir()
    producer = Celery("producer", broker=url)
    with producer.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        with producer.producer_or_acquire() as p:
            start = time.perf_counter()
            for k in range(tasks):
                producer.send_task("benchapp.noop", args=(k,), queue=queue, producer=p)
            publish_s = time.perf_counter() - start
    env = dict(
        os.environ,
        BROKER_URL=url,
        BENCH_OUT=str(out),
        BENCH_TASKS=str(tasks),
        PYTHONPATH=os.pathsep.join([str(workdir), str(ROOT)]),
    )
    with open(workdir / f"worker-{queue}.log", "wb") as wlog:
        worker = subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "benchapp",
                "worker",
                "--pool",
                "solo",
                "-Q",
                queue,
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "-l",
                "WARNING",
            ],
            cwd=workdir,
            env=env,
            stdout=wlog,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 600
        while not (out / "last").exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"worker for {url} ended early:\n"
                    + (workdir / f"worker-{queue}.log").read_text()[-2000:]
                )
            time.sleep(0.05)
        time.sleep(0.05)  # the file's write completes
        first = float((out / "first").read_text())
        last = float((out / "last").read_text())
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    return tasks / publish_s, (tasks - 1) / (last - first)


def node_code() -> str:
    """How the nodes run the tree's modules: compiled (mypyc) or the Python sources."""
    done = subprocess.run(
        [sys.executable, "-c", "import disq._native as n; print(n.STATE)"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        check=False,
    )
    state = done.stdout.strip() or "unknown"
    return "compiled" if state == "compiled" else f"pure Python ({state})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    ap.add_argument(
        "--rows",
        default="disq-repl1,disq-repl2,disq-repl3",
        help="the disq rows to run, comma-separated (default: all three)",
    )
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="bench-celery-"))
    (workdir / "benchapp.py").write_text(APP)
    redis, redis_port = start_redis(workdir)
    lab = Lab(3, workdir / "lab", node_timeout_ms=2000)
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        lab.start()
        node0 = f"127.0.0.1:{lab.node(0).bus_port}"
        disq_rows = {f"disq-repl{r}": f"disq://{node0}?replicate={r}&discover=0" for r in (1, 2, 3)}
        wanted = [name.strip() for name in args.rows.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in disq_rows]
        if unknown:
            raise SystemExit(f"unknown rows {unknown}: pick from {sorted(disq_rows)}")
        rows = {"redis": f"redis://127.0.0.1:{redis_port}/0"}
        rows.update((name, disq_rows[name]) for name in wanted)
        for r in range(args.repeat):
            for name, url in rows.items():
                queue = f"bench-{name}-{r}"
                pub, con = run_row(url, queue, args.tasks, workdir)
                log(f"{name} run {r + 1}: publish {pub:,.0f} tasks/s, consume {con:,.0f} tasks/s")
                results.setdefault(name, []).append((pub, con))
    finally:
        lab.stop_all()
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    med = {
        name: (statistics.median(p for p, _ in rs), statistics.median(c for _, c in rs))
        for name, rs in results.items()
    }
    base_pub, base_con = med["redis"]
    lines = [
        f"Celery {args.tasks} no-op tasks, one `--pool solo` worker, median of {args.repeat}",
        f"({machine_info()}; disq nodes {node_code()}; 1-min load before: {load_before:.2f}, "
        f"after: {os.getloadavg()[0]:.2f})",
        "",
        "| broker | publish tasks/s | x Redis | consume tasks/s | x Redis | runs (pub / con) |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, (pub, con) in med.items():
        runs = ", ".join(f"{p:,.0f} / {c:,.0f}" for p, c in results[name])
        lines.append(
            f"| {name} | {pub:,.0f} | {pub / base_pub:.2f} | {con:,.0f} | {con / base_con:.2f} "
            f"| {runs} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
