"""The blocking Client's add on the caller's thread (disq.client.blocking_add) against real
nodes: it adds, fails over past a dead node, maps the node's refusals as the async client
does, serves several threads at once, and works in a forked child through a new Client.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import (  # noqa: E402
    AsyncClient,
    AuthError,
    Client,
    IndeterminateError,
    InvalidArgumentError,
    MaxLenError,
    NoReplError,
    PausedError,
    UnavailableError,
)


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


class _SeedOrder(random.Random):
    """Candidates in the order of the addresses given (no shuffle among equals)."""

    def shuffle(self, x: Any) -> None:  # type: ignore[override]
        return None


def test_add_is_answered_and_the_job_is_there(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as c:
        job_id = c.add_job("blocking-add", b"payload", replicate=2, ttl_s=600, retry_s=30)
        assert c.last_node == addr(lab3, 0)
        shown = c.show(job_id)
        assert shown is not None and shown["queue"] == "blocking-add"
        assert (
            shown["body"] == b"payload"
            and shown["repl"] == 2
            and 598 <= shown["ttl_s"] <= 600
            and shown["retry_s"] == 30
        )
        [job] = c.get_jobs("blocking-add", timeout_s=1)
        assert (job.id, job.body) == (job_id, b"payload")
        c.ack(job.id)


def test_a_lone_producer_adds_on_its_thread_and_overlapping_adds_are_batched(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as c:
        adder = c._adder
        on_loop = adder._add_on_loop
        hops: list[str] = []

        def counted(queue: str, body: bytes | str, **options: Any) -> str:
            hops.append(queue)
            return on_loop(queue, body, **options)

        adder._add_on_loop = counted
        ids = [c.add_job("blocking-lone", f"{k}", replicate=1) for k in range(20)]
        assert hops == [] and len(set(ids)) == 20
        # An add that finds another on its way joins the loop's batch, and so do the adds
        # right after it.
        with adder._alone:
            assert c.add_job("blocking-overlap", "x", replicate=1).startswith("D-")
        assert c.add_job("blocking-overlap", "y", replicate=1).startswith("D-")
        assert hops == ["blocking-overlap", "blocking-overlap"]
        assert c.qlen("blocking-overlap") == 2


def test_add_fails_over_past_a_dead_node(tmp_path: Path) -> None:
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        lab.kill9(0)
        dead, alive = addr(lab, 0), addr(lab, 1)
        with Client(
            f"{dead},{alive}", discover=False, connect_timeout_s=0.5, rng=_SeedOrder()
        ) as c:
            ids = [c.add_job("failover", f"job {k}", replicate=2) for k in range(5)]
            # The dead seed came first and was set aside; the live one took every add.
            [dead_view] = [n for n in c.nodes() if n.addr == dead]
            assert dead_view.down_until > 0
            assert c.last_node == alive
            assert len(set(ids)) == 5 and c.qlen("failover", node=alive) == 5


def test_refusals_are_mapped_as_before(lab3: Lab) -> None:
    with Client(addr(lab3, 0), discover=False) as c:
        with pytest.raises(NoReplError) as norepl:
            c.add_job("blocking-errs", "x", replicate=5)
        assert norepl.value.node == addr(lab3, 0) and "NOREPL" in norepl.value.message
        with pytest.raises(InvalidArgumentError):
            c.add_job("blocking-errs", "x", ttl_s=0)
        with pytest.raises(InvalidArgumentError):
            c.add_job("", "x")
        with pytest.raises(TypeError):
            c.add_job("blocking-errs", "x", no_such_option=1)
        c.add_job("blocking-errs-max", "x", replicate=1)
        with pytest.raises(MaxLenError):
            c.add_job("blocking-errs-max", "y", maxlen=1)
        c.pause("blocking-errs-paused", "in")
        try:
            with pytest.raises(PausedError):
                c.add_job("blocking-errs-paused", "x")
        finally:
            c.pause("blocking-errs-paused", "none")
        # The node keeps serving, and the client with it.
        assert c.add_job("blocking-errs", "ok", replicate=1).startswith("D-")
    with pytest.raises(UnavailableError):
        c.add_job("blocking-errs", "after close")


def test_a_refused_password_is_an_auth_error(server_factory: ServerFactory) -> None:
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port), "--requirepass", "s3cret")
    target = f"127.0.0.1:{grpc_port}"
    for password in (None, "wrong"):
        with Client(target, discover=False, password=password) as c:
            with pytest.raises(AuthError):
                c.add_job("q", "x", replicate=1)
    with Client(target, password="s3cret") as c:
        assert c.add_job("q", "x", replicate=1).startswith("D-")
        assert c.qlen("q") == 1


def test_several_threads_add_at_once(lab3: Lab) -> None:
    threads, per_thread = 8, 40
    ids: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)
    with Client(addr(lab3, 1), discover=False) as c:

        def produce(t: int) -> None:
            start.wait()
            try:
                mine = [
                    c.add_job("blocking-threads", f"{t}-{k}", replicate=1)
                    for k in range(per_thread)
                ]
            except BaseException as exc:
                errors.append(exc)
                return
            with lock:
                ids.extend(mine)

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert not errors
        assert len(ids) == len(set(ids)) == threads * per_thread
        assert c.qlen("blocking-threads") == threads * per_thread


def test_close_while_threads_add_ends_every_add(lab3: Lab) -> None:
    """Adds racing a close end with an id, or with the client's own error (UnavailableError
    once closed, IndeterminateError for one in flight when its channel closed), never hang
    and never leak grpc's ValueError."""
    c = Client(addr(lab3, 0), discover=False)
    started = threading.Barrier(5)
    outcomes: list[list[object]] = [[] for _ in range(4)]

    def produce(mine: list[object]) -> None:
        started.wait()
        while True:
            try:
                mine.append(c.add_job("blocking-close", "x", replicate=1))
            except (UnavailableError, IndeterminateError) as exc:
                mine.append(exc)
                if isinstance(exc, UnavailableError):
                    return
            except BaseException as exc:
                mine.append(exc)
                return

    workers = [threading.Thread(target=produce, args=(o,)) for o in outcomes]
    for w in workers:
        w.start()
    started.wait()
    eventually(lambda: all(o for o in outcomes), "every thread to have added once")
    c.close()
    for w in workers:
        w.join(30)
    assert not any(w.is_alive() for w in workers), "an add hung across the close"
    for mine in outcomes:
        assert isinstance(mine[-1], UnavailableError), mine[-1]
        assert all(isinstance(o, str | UnavailableError | IndeterminateError) for o in mine)


def test_the_async_client_is_unchanged(lab3: Lab) -> None:
    import asyncio

    async def run() -> list[str]:
        async with AsyncClient(addr(lab3, 2), discover=False) as c:
            return list(await asyncio.gather(*(c.add_job("blocking-aio", "x") for _ in range(5))))

    assert len(set(asyncio.run(run()))) == 5


FORK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from disq.client import Client, UnavailableError

    target = sys.argv[1]
    parent = Client(target, discover=False)
    out = {"before": parent.add_job("forked", "parent before", replicate=1)}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child_out = {}
        try:
            child_out["inherited"] = parent.add_job("forked", "inherited", replicate=1)
        except UnavailableError as exc:
            child_out["inherited"] = "refused: " + exc.message
        with Client(target, discover=False) as own:
            child_out["own"] = own.add_job("forked", "child", replicate=1)
        os.write(w, json.dumps(child_out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out["child"] = json.loads(f.read() or "{}")
    _, status = os.waitpid(pid, 0)
    out["child_status"] = status
    out["after"] = parent.add_job("forked", "parent after", replicate=1)
    out["qlen"] = parent.qlen("forked")
    parent.close()
    print(json.dumps(out))
    """
)


def test_a_forked_child_adds_through_the_inherited_client_and_a_new_one(lab3: Lab) -> None:
    """In a child process with grpc's default fork support (the suite turns it off for
    itself, see tests/conftest.py): the client closed its channels before the fork
    (disq/client/forking.py), so the child adds through it, and through a client of its own,
    and the parent goes on adding."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), DISQ_PURE="1")
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    queue_before = Client(addr(lab3, 0), discover=False)
    try:
        base = queue_before.qlen("forked")
    finally:
        queue_before.close()
    # Its own session: a child hung in grpc is killed with the script, not left behind.
    proc = subprocess.Popen(
        [sys.executable, "-c", FORK_SCRIPT, addr(lab3, 0)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"the fork script hung:\n{stderr[-2000:]}") from None
    assert proc.returncode == 0, stderr[-2000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["child_status"] == 0
    assert out["child"]["inherited"].startswith("D-")
    assert out["child"]["own"].startswith("D-")
    assert out["before"].startswith("D-") and out["after"].startswith("D-")
    assert out["qlen"] == base + 4
