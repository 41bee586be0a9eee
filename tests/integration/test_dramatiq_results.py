"""Dramatiq's results on a real 3-node disq cluster: `dramatiq dapp` worker processes whose
app stores its actors' results with ``DisqResultBackend``, read from this process (and from
a fresh one) through Dramatiq's own API: ``message.get_result``, pipelines and groups."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.results import ResultFailure, ResultMissing, Results, ResultTimeout
from eventually import eventually
from task_apps import PROJECT_ROOT, WorkerProcess, app_env, disq_url, dramatiq_worker, write_app

from cluster.lab import Lab
from disq.integrations.dramatiq import DisqBroker
from disq.integrations.dramatiq_results import DisqResultBackend

README = PROJECT_ROOT / "README.md"
README_URL = '"disq://10.0.0.1:7710,10.0.0.2:7710"'


def readme_setup() -> str:
    """The README's set-up block ("Results", "Dramatiq"), as written, on the test's URL."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    block = next(b for b in blocks if "DisqResultBackend(broker=broker)" in b)
    assert README_URL in block
    return block.replace(README_URL, 'os.environ["BROKER_URL"]')


RESULTS_APP = (
    '''"""A Dramatiq app on disq that keeps its actors' results in the cluster: the README's
set-up, then the actors."""
import os

'''
    + readme_setup()
    + """
QUEUE = os.environ.get("QUEUE", "default")


@dramatiq.actor(queue_name=QUEUE, store_results=True, max_retries=0)
def add(x, y=0):
    return x + y


@dramatiq.actor(queue_name=QUEUE, store_results=True, max_retries=0)
def fail(k):
    raise ValueError(f"no good: {k}")


@dramatiq.actor(queue_name=QUEUE, store_results=True, max_retries=0, result_ttl=1000)
def brief(k):
    return k
"""
)

READY = "Worker process is ready for action."
WAIT_MS = 30_000  # a blocking get's timeout: generous, the results come in well under it


class Producer:
    """This process's side of the app: a broker with the Results middleware, and the app's
    actors declared on it (their bodies run only in the worker)."""

    def __init__(self, url: str, queue: str) -> None:
        self.broker = DisqBroker(url)
        self.backend = DisqResultBackend(broker=self.broker)
        self.broker.add_middleware(Results(backend=self.backend))
        opts: dict[str, Any] = {"queue_name": queue, "store_results": True, "max_retries": 0}
        self.add = self._actor(_add, **opts)
        self.fail = self._actor(_fail, **opts)
        self.brief = self._actor(_brief, result_ttl=1000, **opts)

    def _actor(self, fn: Callable[..., Any], **options: Any) -> dramatiq.Actor[Any, Any]:
        return dramatiq.actor(fn, actor_name=fn.__name__[1:], broker=self.broker, **options)

    def close(self) -> None:
        self.broker.close()


def _add(x: int, y: int = 0) -> int:
    return x + y


def _fail(k: int) -> None:
    raise ValueError(f"no good: {k}")


def _brief(k: int) -> int:
    return k


def start_worker(app_dir: Path, url: str, queue: str, name: str) -> WorkerProcess:
    w = dramatiq_worker(app_dir, url, queue, name, threads=4)
    w.wait_for_log(READY)
    return w


@pytest.fixture(scope="module")
def app(lab3: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    """One worker on queue ``dres`` for the module, and the producer in this process."""
    app_dir = write_app(tmp_path_factory.mktemp("dres"), "dapp", RESULTS_APP)
    url = disq_url(lab3)
    w = start_worker(app_dir, url, "dres", "w1")
    producer = Producer(url, "dres")
    try:
        yield producer
    finally:
        w.stop()
        producer.close()


def test_an_actors_return_value_comes_back_to_the_producer(app: Producer) -> None:
    message = app.add.send(40, 2)
    assert message.get_result(backend=app.backend, block=True, timeout=WAIT_MS) == 42
    assert message.get_result(backend=app.backend) == 42  # kept: read again at once
    texts = [app.add.send(k, k) for k in range(20)]
    assert [m.get_result(backend=app.backend, block=True, timeout=WAIT_MS) for m in texts] == [
        2 * k for k in range(20)
    ]


def test_no_result_yet_is_missing_and_a_blocking_get_is_one_wait(
    app: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message delayed 2 s: ``block=False`` raises ResultMissing at once; ``block=True`` is
    one call, a RESULT WAIT on a node (no polling), answered with the value once the worker
    stores it."""
    calls = app.broker._adds_of(app.broker.client)  # the RESP calls the backend shares
    asked: list[float | None] = []
    result = calls.result

    def counted(key: str, timeout_s: float | None = 0.0) -> bytes | None:
        asked.append(timeout_s)
        return result(key, timeout_s)

    monkeypatch.setattr(calls, "result", counted)
    sent_at = time.monotonic()
    message = app.add.send_with_options(args=(1, 2), delay=2000)
    with pytest.raises(ResultMissing):
        message.get_result(backend=app.backend)
    assert message.get_result(backend=app.backend, block=True, timeout=WAIT_MS) == 3
    assert time.monotonic() - sent_at >= 2.0  # it waited for the delayed run
    assert asked == [0.0, WAIT_MS / 1000]  # a RESULT GET, then one RESULT WAIT


def test_a_wait_with_no_result_raises_result_timeout_at_its_timeout(app: Producer) -> None:
    message = dramatiq.Message(
        queue_name="dres-nobody", actor_name="add", args=(1,), kwargs={}, options={}
    )  # never sent: no result comes
    started = time.monotonic()
    with pytest.raises(ResultTimeout):
        message.get_result(backend=app.backend, block=True, timeout=400)
    assert 0.4 <= time.monotonic() - started < 5


def test_a_failing_actors_exception_comes_back_as_result_failure(app: Producer) -> None:
    message = app.fail.send(7)
    with pytest.raises(ResultFailure) as failure:
        message.get_result(backend=app.backend, block=True, timeout=WAIT_MS)
    assert failure.value.orig_exc_type == "ValueError"
    assert failure.value.orig_exc_msg == "no good: 7"
    assert str(failure.value) == "actor raised ValueError: no good: 7"


def test_pipelines_and_groups_get_their_results(app: Producer) -> None:
    pipe = dramatiq.pipeline([app.add.message(1, 2), app.add.message(10)], broker=app.broker)
    pipe.run()
    assert pipe.get_result(block=True, timeout=WAIT_MS) == 13  # (1 + 2) + 10
    group = dramatiq.group([app.add.message(k, 1) for k in range(6)], broker=app.broker)
    group.run()
    assert list(group.get_results(block=True, timeout=WAIT_MS)) == [1, 2, 3, 4, 5, 6]
    group.wait(timeout=WAIT_MS)  # every result there: returns


def test_a_result_expires_at_the_actors_result_ttl(app: Producer) -> None:
    """``result_ttl=1000`` (ms): the result's TTL is 1 s, on every node that holds it."""
    message = app.brief.send(5)
    assert message.get_result(backend=app.backend, block=True, timeout=WAIT_MS) == 5

    def expired() -> bool:
        try:
            message.get_result(backend=app.backend)
        except ResultMissing:
            return True
        return False

    eventually(expired, "the result to expire after its 1 s TTL", timeout=15)


READER = """
import sys

import dramatiq

from disq.integrations.dramatiq_results import DisqResultBackend

backend = DisqResultBackend(url=sys.argv[1])
message = dramatiq.Message.decode(sys.argv[2].encode())
print(message.get_result(backend=backend))
backend.close()
"""


def test_a_fresh_process_reads_a_result_after_the_worker_exited(lab3: Lab, tmp_path: Path) -> None:
    """The worker stores the result and exits; a new process with a backend of its own
    (``DisqResultBackend(url=...)``, no broker) reads it."""
    app_dir = write_app(tmp_path, "dapp", RESULTS_APP)
    url = disq_url(lab3)
    w = start_worker(app_dir, url, "dres-exit", "w-exit")
    producer = Producer(url, "dres-exit")
    try:
        message = producer.add.send(20, 22)
        assert message.get_result(backend=producer.backend, block=True, timeout=WAIT_MS) == 42
    finally:
        w.stop()
        producer.close()
    assert w.proc.returncode is not None
    out = subprocess.run(
        [sys.executable, "-c", READER, url, message.encode().decode()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT_ROOT,
        env=app_env(app_dir, {}),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42"


def test_a_result_is_served_after_the_node_that_stored_it_is_killed(tmp_path: Path) -> None:
    """The worker knows node 0 only (``discover=false``): it stores there with REPLICATE 2,
    so another node holds it too before the store returns. Node 0 is SIGKILLed; the result
    is read from the other nodes."""
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        app_dir = write_app(tmp_path / "app", "dapp", RESULTS_APP)
        node0 = f"disq://127.0.0.1:{lab.node(0).bus_port}?discover=false&replicate=2"
        w = start_worker(app_dir, node0, "dres-kill", "w-kill")
        producer = Producer(node0, "dres-kill")
        try:
            message = producer.add.send(6, 7)
            assert message.get_result(backend=producer.backend, block=True, timeout=WAIT_MS) == 13
        finally:
            w.stop()
            producer.close()
        lab.kill9(0)
        others = ",".join(f"127.0.0.1:{lab.node(i).bus_port}" for i in (1, 2))
        survivors = DisqResultBackend(url=f"disq://{others}?discover=false")
        try:
            assert message.get_result(backend=survivors) == 13
            assert message.get_result(backend=survivors, block=True, timeout=WAIT_MS) == 13
        finally:
            survivors.close()
