"""Real Celery and Dramatiq worker processes for the integration tests: the apps' sources
(written into the test's directory), a worker process handle, and the run records the
tasks leave behind.

Every task run appends one line ``<event> <k> <pid> <unix time> <attempt>`` to a file of its
own process (``runs/<pid>.log``, O_APPEND, one write per line): the test reads what ran,
where, when and how often, whatever process ran it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from eventually import eventually

from cluster.lab import Lab
from disq.client import Client

BIN = Path(sys.executable).parent
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def send_while_a_node_dies(
    lab: Lab, queue: str, send_one: Callable[[int], object], n: int = 300, kill_at: int = 100
) -> float:
    """Send messages 0..n-1 from a thread with ``send_one``; once ``kill_at`` are sent, the
    node holding most of the queue dies (kill -9) while adds and gets flow. Every send must
    succeed: the client sends again to the next node, it does not give up. Returns the
    slowest send's seconds (reported by the tests, not asserted: a timing)."""
    sent: list[int] = []
    errors: list[BaseException] = []
    half = threading.Event()
    slowest_s = 0.0

    def produce() -> None:
        nonlocal slowest_s
        try:
            for k in range(n):
                started = time.monotonic()
                send_one(k)
                slowest_s = max(slowest_s, time.monotonic() - started)
                sent.append(k)
                if k == kill_at:
                    half.set()
        except BaseException as exc:  # reported below
            errors.append(exc)
            half.set()

    t = threading.Thread(target=produce)
    t.start()
    assert half.wait(60)
    with Client(disq_url(lab).removeprefix("disq://")) as c:
        lens = {i: c.qlen(queue, node=f"127.0.0.1:{lab.node(i).bus_port}") for i in range(lab.n)}
    lab.kill9(max(lens, key=lambda i: lens[i]))
    t.join(120)
    assert not errors, errors
    assert sent == list(range(n))
    return slowest_s


def disq_url(lab: Lab, **options: object) -> str:
    """``disq://`` with every node of the lab, and ``options`` as the URL's query."""
    nodes = ",".join(f"127.0.0.1:{lab.node(i).bus_port}" for i in range(lab.n))
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"disq://{nodes}" + (f"?{query}" if query else "")


_RECORD = """
def record(event, k, attempt=0):
    line = f"{event} {k} {os.getpid()} {time.time():.6f} {attempt}\\n".encode()
    fd = os.open(os.path.join(OUT, f"{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
"""

CELERY_APP = (
    '''"""A Celery app on disq, configured from the environment; no import of disq."""
import os
import time

from celery import Celery

OUT = os.environ["RUNS_DIR"]
app = Celery("capp", broker=os.environ["BROKER_URL"])
app.conf.task_acks_late = os.environ.get("ACKS_LATE") == "1"
app.conf.worker_prefetch_multiplier = int(os.environ.get("PREFETCH_MULTIPLIER", "4"))
app.conf.broker_connection_retry_on_startup = True
'''
    + _RECORD
    + """

@app.task(bind=True, max_retries=5)
def rec(self, k, sleep_s=0.0, fail_times=0):
    record("start", k, self.request.retries)
    if self.request.retries < fail_times:
        raise self.retry(countdown=0)
    if sleep_s:
        time.sleep(sleep_s)
    record("done", k, self.request.retries)
"""
)

DRAMATIQ_APP = (
    '''"""A Dramatiq app on disq."""
import os
import time

import dramatiq

from disq.integrations.dramatiq import DisqBroker

OUT = os.environ["RUNS_DIR"]
dramatiq.set_broker(DisqBroker(os.environ["BROKER_URL"]))
'''
    + _RECORD
    + """

@dramatiq.actor(queue_name=os.environ.get("QUEUE", "default"), max_retries=1,
                min_backoff=100, max_backoff=200)
def rec(k, sleep_s=0.0, fail=False):
    record("start", k)
    if fail:
        raise RuntimeError(f"task {k} fails for good")
    if sleep_s:
        time.sleep(sleep_s)
    record("done", k)
"""
)


@dataclass(frozen=True)
class Run:
    event: str
    k: int
    pid: int
    at: float
    attempt: int


def write_app(where: Path, name: str, source: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.py").write_text(source)
    (where / "runs").mkdir(exist_ok=True)
    return where


def runs(app_dir: Path) -> list[Run]:
    out: list[Run] = []
    for f in sorted((app_dir / "runs").glob("*.log")):
        for line in f.read_text().splitlines():
            event, k, pid, at, attempt = line.split()
            out.append(Run(event, int(k), int(pid), float(at), int(attempt)))
    return out


def done_counts(app_dir: Path) -> Counter[int]:
    return Counter(r.k for r in runs(app_dir) if r.event == "done")


def wait_all_done(app_dir: Path, keys: set[int], timeout: float = 120.0) -> Counter[int]:
    def all_done() -> Counter[int] | None:
        counts = done_counts(app_dir)
        return counts if keys <= set(counts) else None

    return eventually(all_done, f"all {len(keys)} tasks done", timeout=timeout)


def app_env(app_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment of a process of the app: ``env`` over this one's."""
    full_env = dict(os.environ)
    # gRPC's fork support as users have it (on by default): the suite turns it off for its
    # own process only (tests/conftest.py), and a worker's pool forks.
    full_env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    full_env.update(env)
    full_env["RUNS_DIR"] = str(app_dir / "runs")
    # The app imports this checkout's disq like the nodes do; no disq import in the app
    # is needed for Celery (the .pth hook registers the transport).
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(app_dir), str(PROJECT_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    full_env["PYTHONUNBUFFERED"] = "1"
    return full_env


def celery_command(
    app_dir: Path, broker_url: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``celery -A capp <args>`` run to its end (inspect, control, purge...)."""
    return subprocess.run(
        [str(BIN / "celery"), "-A", "capp", *args],
        cwd=app_dir,
        env=app_env(app_dir, {"BROKER_URL": broker_url}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class WorkerProcess:
    """One worker command (``celery -A app worker`` or ``dramatiq app``) in its own
    session, so that a kill reaches the pool's processes too."""

    def __init__(self, app_dir: Path, argv: list[str], env: dict[str, str], name: str) -> None:
        self.app_dir = app_dir
        self.log_path = app_dir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            # A worker started again under the same name appends to the same file: this
            # process's output starts here (a "ready." of the last one is not this one's).
            self.log_start = log.tell()
            self.proc = subprocess.Popen(
                argv,
                cwd=app_dir,
                env=app_env(app_dir, env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_text(self) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(self.log_start)
            return log.read().decode(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.proc.returncode}:\n" + self.log_text()[-3000:]
                )
            return text in self.log_text()

        eventually(seen, f"worker log to show {text!r}", timeout=timeout)

    def kill9(self) -> None:
        """SIGKILL the worker and every process of its session (the pool's children)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> None:
        stop_all([self], timeout)

    def _terminate(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _finish(self, deadline: float) -> None:
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        self.kill9()


def stop_all(workers: Iterable[WorkerProcess], timeout: float = 20.0) -> None:
    """Stop workers as :meth:`WorkerProcess.stop` does, all at once: each warm shutdown takes
    seconds (a Celery worker's about 7 s here), so SIGTERM goes to every one before the wait."""
    procs = list(workers)
    for w in procs:
        w._terminate()
    deadline = time.monotonic() + timeout
    for w in procs:
        w._finish(deadline)


def prefork_worker_argv(
    app: str, queue: str, name: str, concurrency: int, *extra_args: str
) -> list[str]:
    """``celery -A <app> worker`` on ``queue``: a prefork pool of ``concurrency``, named
    ``<name>@<host>``, logging at INFO (the tests read its log)."""
    return [
        str(BIN / "celery"), "-A", app, "worker", "-P", "prefork", "-c", str(concurrency),
        "-Q", queue, "-n", f"{name}@%h", "--loglevel=INFO", *extra_args,
    ]  # fmt: skip


def celery_worker(
    app_dir: Path,
    broker_url: str,
    queue: str,
    name: str,
    *,
    acks_late: bool = False,
    concurrency: int = 2,
    prefetch_multiplier: int = 4,
    extra_args: tuple[str, ...] = (),
) -> WorkerProcess:
    return WorkerProcess(
        app_dir,
        prefork_worker_argv("capp", queue, name, concurrency, *extra_args),
        {
            "BROKER_URL": broker_url,
            "ACKS_LATE": "1" if acks_late else "0",
            "PREFETCH_MULTIPLIER": str(prefetch_multiplier),
        },
        name,
    )


def dramatiq_worker(
    app_dir: Path,
    broker_url: str,
    queue: str,
    name: str,
    *,
    threads: int = 4,
    processes: int = 1,
) -> WorkerProcess:
    return WorkerProcess(
        app_dir,
        [str(BIN / "dramatiq"), "dapp", "-p", str(processes), "-t", str(threads), "-Q", queue],
        {"BROKER_URL": broker_url, "QUEUE": queue},
        name,
    )
