"""Processes that fork after using disq: Celery's prefork pool replacing its children, the
SDK's Client in a process that forks (gunicorn's --preload), an AsyncClient left open across
a fork (a clear error in the child, never a hang).

gRPC's fork support is left as users have it (on by default since grpcio 1.81): the suite's
own setting (tests/conftest.py turns it off) is taken out of these processes' environment
(task_apps.app_env does the same for every worker).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from celery import Celery
from task_apps import (
    CELERY_APP,
    celery_worker,
    disq_url,
    done_counts,
    runs,
    wait_all_done,
    write_app,
)

from cluster.lab import Lab

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FORK_WARNING = "skipping fork() handlers"


def users_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    return env


def run_forking_worker(
    lab: Lab, tmp_path: Path, queue: str, pool_args: tuple[str, ...], tasks: int, sleep_s: float
) -> tuple[str, set[int]]:
    """A Celery prefork worker with ``pool_args`` runs ``tasks`` tasks, each once; its log
    (no fork warning, no child lost to a signal but the stop's SIGTERM) and its pids."""
    app_dir = write_app(tmp_path, "capp", CELERY_APP)
    broker = disq_url(lab)
    w = celery_worker(app_dir, broker, queue, "wf", extra_args=pool_args)
    try:
        w.wait_for_log("ready.")
        p = Celery("producer", broker=broker)
        for k in range(tasks):
            p.send_task("capp.rec", args=(k,), kwargs={"sleep_s": sleep_s}, queue=queue)
        assert wait_all_done(app_dir, set(range(tasks))) == {k: 1 for k in range(tasks)}
    finally:
        w.stop()
    log = w.log_text()
    assert FORK_WARNING not in log and "crashed" not in log
    # Only the stop's SIGTERM may end a child by a signal (billiard logs each one).
    assert "SIGSEGV" not in log and "signal 11" not in log
    assert done_counts(app_dir) == {k: 1 for k in range(tasks)}
    return log, {r.pid for r in runs(app_dir)}


def test_prefork_children_replaced_every_five_tasks_run_every_task_once(
    lab3: Lab, tmp_path: Path
) -> None:
    _, pids = run_forking_worker(lab3, tmp_path, "forks", ("--max-tasks-per-child", "5"), 200, 0)
    assert len(pids) >= 40  # children replaced: 200 tasks at 5 a child is 40 of them


def test_autoscale_forks_from_its_own_thread_while_the_parent_consumes(
    lab3: Lab, tmp_path: Path
) -> None:
    """--autoscale forks children from the autoscaler's thread while the main thread waits
    for jobs. The wait is on the RESP port, so a fork finds no gRPC call to wait for, and
    the parent's idle client has its channels closed already."""
    log, pids = run_forking_worker(lab3, tmp_path, "autoscaled", ("--autoscale", "4,1"), 120, 0.05)
    assert "Scaling up" in log
    assert len(pids) > 1  # the grown pool ran tasks


PRELOAD_SCRIPT = """
import os, sys
from disq.client import Client

client = Client(sys.argv[1])            # made at import, as an app preloaded by gunicorn
client.add_job("preload", b"parent", replicate=1)
children = []
for i in range(4):                      # the workers, forked by the master
    pid = os.fork()
    if pid == 0:
        job_id = client.add_job("preload", b"child %d" % i, replicate=1)
        got = client.get_jobs("preload-%d" % i, timeout_s=0.05)
        client.ack(job_id)
        os._exit(0 if got == [] else 3)
    children.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
client.add_job("preload", b"parent again", replicate=1)
print("codes", codes)
client.close()
"""


def run_script(source: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), *args],
        cwd=PROJECT_ROOT,
        env=users_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_client_made_before_fork_works_in_the_parent_and_every_child(lab3: Lab) -> None:
    r = run_script(PRELOAD_SCRIPT, f"127.0.0.1:{lab3.node(0).bus_port}")
    assert r.returncode == 0, r.stderr
    assert "codes [0, 0, 0, 0]" in r.stdout
    assert FORK_WARNING not in r.stderr


def test_a_fork_waits_for_the_call_in_flight_then_both_sides_go_on(lab3: Lab) -> None:
    """A thread blocked in GETJOB while another forks (Celery's pool supervisor): the fork
    waits for it, and the consumer keeps consuming after."""
    script = """
    import os, sys, threading
    from disq.client import Client

    client = Client(sys.argv[1])
    got = []
    stop = threading.Event()
    def consume():
        while not stop.is_set():
            got.extend(client.get_jobs("inflight", timeout_s=0.2))
    t = threading.Thread(target=consume)
    t.start()
    codes = []
    for i in range(3):
        pid = os.fork()
        if pid == 0:
            client.add_job("inflight", b"from child %d" % i, replicate=1)
            os._exit(0)
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    while len(got) < 3:
        got.extend(client.get_jobs("inflight", timeout_s=1))
    stop.set()
    t.join()
    client.ack(*[j.id for j in got])
    print("codes", codes, "bodies", sorted(j.body.decode() for j in got))
    client.close()
    """
    r = run_script(script, f"127.0.0.1:{lab3.node(0).bus_port}")
    assert r.returncode == 0, r.stderr
    assert "codes [0, 0, 0] bodies ['from child 0', 'from child 1', 'from child 2']" in r.stdout
    assert FORK_WARNING not in r.stderr


def test_a_process_that_forked_closes_idle_channels_so_gRPCs_poller_is_gone(lab3: Lab) -> None:
    """After its first fork a process's clients close their channels once idle: no gRPC
    thread is left for the next fork to find, and the next call connects again."""
    script = """
    import os, sys, threading, time
    from disq.client import Client

    def grpc_threads():
        return sorted(t.name for t in threading.enumerate() if "_poll_wrapper" in t.name)

    client = Client(sys.argv[1])
    client.hello()
    before = grpc_threads()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    client.hello()                      # channels open again
    during = grpc_threads()
    deadline = time.monotonic() + 10
    while grpc_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    after = grpc_threads()
    print("threads", bool(before), bool(during), bool(after), "hello", bool(client.hello().my_id))
    client.close()
    """
    r = run_script(script, f"127.0.0.1:{lab3.node(0).bus_port}")
    assert r.returncode == 0, r.stderr
    assert "threads True True False hello True" in r.stdout, r.stdout + r.stderr


def test_an_async_client_open_across_fork_raises_a_clear_error_in_the_child(lab3: Lab) -> None:
    script = """
    import asyncio, os, sys
    from disq.client import AsyncClient, Client, ForkError

    async def main():
        c = AsyncClient(sys.argv[1])
        await c.hello()                 # a channel open, grpc.aio's poller running
        pid = os.fork()
        if pid == 0:
            out = []
            for make in (lambda: Client(sys.argv[1]), lambda: AsyncClient(sys.argv[1])):
                try:
                    make()
                except ForkError as exc:
                    out.append("post_fork" in str(exc) and "fork" in str(exc))
            os._exit(0 if out == [True, True] else 3)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        await c.hello()                 # the parent's client is untouched
        await c.close()
        print("child", code)

    asyncio.run(main())
    """
    r = run_script(script, f"127.0.0.1:{lab3.node(0).bus_port}")
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout
