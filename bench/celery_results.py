"""Celery's result backend on disq beside Celery's Redis backend: a result's round trip, and
tasks with results end to end.

redis-server (Debian's; scripts/ensure_redis_server.sh) with an AOF fsynced every second, and
3 disq nodes (cluster/lab.py: AOF, fsync everysec). Each row uses one system for both the
broker and the backend, as an app moved to disq does:

  redis   broker and backend redis://127.0.0.1:PORT/0 (every ratio is to it)
  disq    broker and backend disq://node0?discover=0 (the backend's default REPLICATE: the
          majority of 3; the store answers once 2 nodes hold the result)

Two measures per row, rounds interleaved, ``--repeat`` rounds, medians:

- round trip: in this process, ``backend.store_result(id, value, SUCCESS)`` then
  ``AsyncResult(id).get()``, one after the other, ``--results`` times (round trips/s);
- tasks with results: ``--tasks`` ``add`` tasks published, one ``--pool solo`` worker runs
  them, this process ``get()``s each result in order (tasks/s from the first publish to the
  last result).

  python -m bench results
  python -m bench results --results 2000 --tasks 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import HOST, ROOT, celery_solo_worker, log, median
from bench.report import Report, fmt_int, ratio
from bench.servers import RedisServer
from cluster.lab import Lab

HELP = "Celery's result backend on disq beside Redis's: a result's round trip, tasks with results"

APP = """
import os

from celery import Celery

app = Celery("resultsapp", broker=os.environ["BROKER_URL"], backend=os.environ["BACKEND_URL"])
app.conf.broker_connection_retry_on_startup = True


@app.task
def add(x, y):
    return x + y
"""


def round_trips(url: str, results: int) -> float:
    """Round trips per second: store a SUCCESS result, then get it, one after the other."""
    from celery import Celery, states
    from celery.result import AsyncResult

    app = Celery("rt", broker=url, backend=url)
    backend = app.backend
    ids = [str(uuid.uuid4()) for _ in range(results)]
    backend.store_result(ids[0], 0, states.SUCCESS)  # connect outside the timing
    start = time.perf_counter()
    for k, task_id in enumerate(ids):
        backend.store_result(task_id, k, states.SUCCESS)
        if AsyncResult(task_id, app=app).get(timeout=10) != k:
            raise RuntimeError(f"{url}: result {task_id} is not {k}")
    return results / (time.perf_counter() - start)


def tasks_with_results(url: str, queue: str, tasks: int, workdir: Path) -> float:
    """Tasks per second from the first publish to the last result, one solo worker."""
    from celery import Celery

    env = {
        **os.environ,
        "BROKER_URL": url,
        "BACKEND_URL": url,
        "PYTHONPATH": os.pathsep.join([str(workdir), str(ROOT)]),
    }
    with celery_solo_worker("resultsapp", queue, env, workdir) as (_worker, logfile):
        try:
            app = Celery("producer", broker=url, backend=url)
            app.send_task("resultsapp.add", args=(0, 0), queue=queue).get(timeout=120)  # warm
            start = time.perf_counter()
            pending = [
                app.send_task("resultsapp.add", args=(k, 1), queue=queue) for k in range(tasks)
            ]
            for k, r in enumerate(pending):
                if r.get(timeout=120) != k + 1:
                    raise RuntimeError(f"{url}: task {k} answered {r.result!r}")
            return tasks / (time.perf_counter() - start)
        except Exception:
            log(f"worker log ({url}):\n{logfile.read_text()[-2000:]}")
            raise


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=int, default=2000, help="round trips per row and round")
    p.add_argument("--tasks", type=int, default=1000, help="tasks with results per row and round")
    p.add_argument("--repeat", type=int, default=3, help="rounds (medians)")


def run(args: argparse.Namespace, report: Report) -> None:
    figures: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-celery-results-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "resultsapp.py").write_text(APP)
        with contextlib.ExitStack() as stack:
            redis = stack.enter_context(RedisServer(tmp / "redis"))
            lab = stack.enter_context(Lab(3, tmp / "lab", node_timeout_ms=2000))
            rows = {
                "redis": f"redis://{HOST}:{redis.port}/0",
                "disq": f"disq://{HOST}:{lab.node(0).bus_port}?discover=0",
            }
            for r in range(args.repeat):
                for name, url in rows.items():
                    rt = round_trips(url, args.results)
                    tw = tasks_with_results(url, f"bench-results-{name}-{r}", args.tasks, tmp)
                    log(f"{name} round {r + 1}: round trip {rt:,.0f}/s, tasks {tw:,.0f}/s")
                    figures.setdefault(name, []).append((rt, tw))
    med = {n: (median(a for a, _ in fs), median(b for _, b in fs)) for n, fs in figures.items()}
    table = report.table(
        f"Celery results: {args.results:,} round trips (store, then get) and {args.tasks:,} "
        f"tasks with results (publish, run, get), median of {args.repeat} rounds",
        ["broker and backend", "round trips/s", "x Redis", "tasks/s", "x Redis", "rounds"],
    )
    for name, (rt, tw) in med.items():
        rounds = ", ".join(f"{a:,.0f} / {b:,.0f}" for a, b in figures[name])
        table.add(
            name,
            fmt_int(rt),
            ratio(rt, med["redis"][0]),
            fmt_int(tw),
            ratio(tw, med["redis"][1]),
            rounds,
        )
    report.raw["rounds"] = figures
