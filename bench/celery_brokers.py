"""Celery on disq beside Celery on Redis: the same app, the same no-op task, one worker process.

redis-server (Debian's; scripts/ensure_redis_server.sh installs it) with an AOF fsynced every
second, rabbitmq-server (Debian's, one node; scripts/ensure_rabbitmq_server.sh), and 3 disq
nodes (cluster/lab.py: AOF, fsync everysec), then for each broker row:

  redis        redis://127.0.0.1:PORT/0 (always run: every ratio is to it)
  rabbitmq     amqp://guest:guest@127.0.0.1:PORT// (Celery's durable queues, persistent messages)
  disq-repl1   disq://node0?replicate=1&discover=0
  disq-repl2   disq://node0?replicate=2&discover=0 (the majority of 3: the integrations' default)
  disq-repl3   disq://node0?replicate=3&discover=0 (a copy on every node)

``discover=0`` keeps the producer and the worker on one node, as they are with one Redis.
Per row: --tasks tasks published from this process with ``send_task`` (publish tasks/s), then
one ``celery -A benchapp worker --pool solo`` process drains them (no mingle, gossip or
heartbeats; default prefetch, early acks); the task tells this process the times of its first
and last run over a Unix socket: consume tasks/s = (tasks - 1) / (last - first). Rows
interleaved round by round, ``--repeat`` rounds, medians; the nodes run this tree as built
(the machine line says compiled or pure).

  python -m bench celery
  python -m bench celery --tasks 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import socket
import tempfile
import time
from pathlib import Path

from bench.common import HOST, ROOT, celery_solo_worker, log, median
from bench.report import Report, fmt_int, ratio
from bench.servers import RabbitServer, RedisServer
from cluster.lab import Lab

HELP = "Celery on disq (REPLICATE 1, 2, 3) beside Celery on Redis and RabbitMQ: publish, consume"
ROWS = ("rabbitmq", "disq-repl1", "disq-repl2", "disq-repl3")

APP = """
import os
import socket
import time

from celery import Celery

app = Celery("benchapp", broker=os.environ["BROKER_URL"])
app.conf.broker_connection_retry_on_startup = True
N = int(os.environ["BENCH_TASKS"])
_count = 0
_first = 0.0


@app.task
def noop(k):
    global _count, _first
    _count += 1
    if _count == 1:
        _first = time.time()
    if _count == N:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(os.environ["BENCH_SOCKET"])
            s.sendall(f"{_first!r} {time.time()!r}".encode())
"""


def publish(url: str, queue: str, tasks: int) -> float:
    """Tasks per second of ``send_task`` from this process."""
    from celery import Celery

    producer = Celery("producer", broker=url)
    with producer.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        with producer.producer_or_acquire() as p:
            start = time.perf_counter()
            for k in range(tasks):
                producer.send_task("benchapp.noop", args=(k,), queue=queue, producer=p)
            return tasks / (time.perf_counter() - start)


def consume(url: str, queue: str, tasks: int, workdir: Path) -> float:
    """Tasks per second of one solo worker draining ``queue``."""
    sock_path = workdir / f"{queue}.sock"
    env = {
        **os.environ,
        "BROKER_URL": url,
        "BENCH_TASKS": str(tasks),
        "BENCH_SOCKET": str(sock_path),
        "PYTHONPATH": os.pathsep.join([str(workdir), str(ROOT)]),
    }
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(sock_path))
        listener.listen(1)
        with celery_solo_worker("benchapp", queue, env, workdir) as (worker, logfile):
            deadline = time.monotonic() + 600
            while not select.select([listener], [], [], 1.0)[0]:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker for {url} ended:\n{logfile.read_text()[-2000:]}")
            conn, _ = listener.accept()
            with conn:
                first, last = (float(x) for x in conn.recv(256).split())
    return (tasks - 1) / (last - first)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=int, default=5000, help="per row and round")
    p.add_argument("--repeat", type=int, default=3, help="rounds (medians)")
    p.add_argument("--rows", default=",".join(ROWS), help="the rows beside Redis's")
    p.add_argument("--quick", action="store_true", help="500 tasks, one round, disq-repl1")


def run(args: argparse.Namespace, report: Report) -> None:
    tasks, repeat = (500, 1) if args.quick else (args.tasks, args.repeat)
    wanted = ["disq-repl1"] if args.quick else [r.strip() for r in args.rows.split(",") if r]
    unknown = set(wanted) - set(ROWS)
    if unknown:
        raise SystemExit(f"unknown rows {sorted(unknown)}: {', '.join(ROWS)}")
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-celery-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "benchapp.py").write_text(APP)
        with contextlib.ExitStack() as stack:
            redis = stack.enter_context(RedisServer(tmp / "redis"))
            lab = stack.enter_context(Lab(3, tmp / "lab", node_timeout_ms=2000))
            node0 = f"{HOST}:{lab.node(0).bus_port}"
            rows = {"redis": f"redis://{HOST}:{redis.port}/0"}
            if "rabbitmq" in wanted:
                rabbit = stack.enter_context(RabbitServer())
                rows["rabbitmq"] = f"amqp://guest:guest@{HOST}:{rabbit.port}//"
            rows.update(
                (w, f"disq://{node0}?replicate={w[-1]}&discover=0")
                for w in wanted
                if w.startswith("disq")
            )
            for r in range(repeat):
                for name, url in rows.items():
                    queue = f"bench-{name}-{r}"
                    pub = publish(url, queue, tasks)
                    con = consume(url, queue, tasks, tmp)
                    log(f"{name} round {r + 1}: publish {pub:,.0f}/s, consume {con:,.0f}/s")
                    results.setdefault(name, []).append((pub, con))
    med = {n: (median(p for p, _ in rs), median(c for _, c in rs)) for n, rs in results.items()}
    table = report.table(
        f"Celery, {tasks:,} no-op tasks, one --pool solo worker, median of {repeat} rounds",
        [
            "broker",
            "publish tasks/s",
            "x Redis",
            "consume tasks/s",
            "x Redis",
            "rounds (pub / con)",
        ],
    )
    for name, (pub, con) in med.items():
        rounds = ", ".join(f"{p:,.0f} / {c:,.0f}" for p, c in results[name])
        table.add(
            name,
            fmt_int(pub),
            ratio(pub, med["redis"][0]),
            fmt_int(con),
            ratio(con, med["redis"][1]),
            rounds,
        )
    report.raw["rounds"] = results
