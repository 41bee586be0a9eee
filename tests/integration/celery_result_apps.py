"""The Celery app of the result backend's tests (tests/integration/test_celery_results.py):
broker and backend both ``disq://``, no disq import in the app (the kombu transport's alias
and the backend's entry point find them). Its worker processes are task_apps.py's; each
task run appends a line to the runs directory as there (``record``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from task_apps import _RECORD, BIN, WorkerProcess, app_env, prefork_worker_argv, write_app

RESULT_APP = (
    '''"""A Celery app whose broker and result backend are disq."""
import os
import time

from celery import Celery

OUT = os.environ["RUNS_DIR"]
app = Celery("rapp", broker=os.environ["BROKER_URL"], backend=os.environ["BACKEND_URL"])
app.conf.task_default_queue = os.environ.get("QUEUE", "celery")
app.conf.task_acks_late = os.environ.get("ACKS_LATE") == "1"
app.conf.worker_prefetch_multiplier = 1
app.conf.broker_connection_retry_on_startup = True
app.conf.task_track_started = True
if os.environ.get("RESULT_EXPIRES"):
    app.conf.result_expires = float(os.environ["RESULT_EXPIRES"])
'''
    + _RECORD
    + """

@app.task
def add(x, y):
    return x + y


@app.task
def mul(x, y):
    return x * y


@app.task
def tsum(values):
    return sum(values)


@app.task(bind=True)
def collect(self, values, k=0):
    record("callback", k)
    return values


@app.task
def boom(message):
    raise ValueError(message)


@app.task(bind=True, max_retries=5)
def flaky(self, k, fail_times=1, countdown=0):
    record("start", k, self.request.retries)
    if self.request.retries < fail_times:
        raise self.retry(countdown=countdown)
    record("done", k, self.request.retries)
    return k


@app.task(bind=True)
def slow(self, k, sleep_s=0.5):
    record("start", k, self.request.retries)
    time.sleep(sleep_s)
    record("done", k, self.request.retries)
    return k * k
"""
)


def write_result_app(where: Path) -> Path:
    return write_app(where, "rapp", RESULT_APP)


def result_worker(
    app_dir: Path,
    url: str,
    queue: str,
    name: str,
    *,
    acks_late: bool = False,
    concurrency: int = 2,
    result_expires: float | None = None,
) -> WorkerProcess:
    """``celery -A rapp worker`` on ``queue``, broker and backend ``url``."""
    env = {
        "BROKER_URL": url,
        "BACKEND_URL": url,
        "QUEUE": queue,
        "ACKS_LATE": "1" if acks_late else "0",
        "RESULT_EXPIRES": "" if result_expires is None else str(result_expires),
    }
    return WorkerProcess(app_dir, prefork_worker_argv("rapp", queue, name, concurrency), env, name)


def rapp_command(
    app_dir: Path, url: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``celery -A rapp <args>`` run to its end (result, purge...), in a process of its own."""
    return _run_in_app(app_dir, url, [str(BIN / "celery"), "-A", "rapp", *args], timeout)


def python_in_app(
    app_dir: Path, url: str, code: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in the app's directory and environment (``import rapp`` works)."""
    return _run_in_app(app_dir, url, [str(BIN / "python"), "-c", code], timeout)


def _run_in_app(
    app_dir: Path, url: str, argv: list[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=app_dir,
        env=app_env(app_dir, {"BROKER_URL": url, "BACKEND_URL": url}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
