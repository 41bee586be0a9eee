"""The README's examples run as written against a real node."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServerFactory, ServerProcess, free_port

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs(server: ServerProcess) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "greenstalk" in b)
    assert len(example.strip().splitlines()) <= 5
    code = example.replace("11300", str(server.port))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == "1 hello"


def _sdk_block(word: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return next(b for b in blocks if word in b)


def test_readme_sdk_producer_and_worker_run(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the gRPC SDK is disq's")
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    producer = _sdk_block("add_jobs")
    worker = _sdk_block("disq.Worker")
    assert len(producer.strip().splitlines()) <= 10 and len(worker.strip().splitlines()) <= 10
    out = subprocess.run(
        [sys.executable, "-c", producer.replace("7710", str(grpc_port))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    assert out[0].startswith("D-") and out[0].endswith(" 1") and out[1] == "100"
    proc = subprocess.Popen(
        [sys.executable, "-c", worker.replace("7710", str(grpc_port))],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # print() to a pipe: line by line
    )
    try:
        assert proc.stdout is not None
        # Handlers run in 8 threads and print() writes word by word, so lines may interleave:
        # count a word each print writes whole, once.
        text = ""
        while text.count("attempt") < 101:
            line = proc.stdout.readline()
            assert line, f"the worker exited early: {text!r}"
            text += line
        assert "b'hello'" in text and text.count("b'm") == 100
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_readme_celery_line_switches_an_app_to_disq(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the kombu transport is disq's")
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    line = _sdk_block("app.conf.broker_url").strip()
    addresses = f"127.0.0.1:{grpc_port},127.0.0.1:{free_port()}"  # a live seed, a dead one
    line = line.replace("10.0.0.1:7710,10.0.0.2:7710", addresses)
    # An app that never imports disq: the line alone routes its tasks through the cluster.
    code = (
        "import sys\nfrom celery import Celery\napp = Celery('readme')\n"
        + line
        + "\napp.send_task('readme.add', args=(2, 3))\n"
        "print('disq' in sys.modules and 'kombu' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "True"
    from disq.client import Client

    with Client(f"127.0.0.1:{grpc_port}") as c:
        jobs = c.get_jobs("celery", count=10, timeout_s=5)
        assert len(jobs) == 1
        message = json.loads(jobs[0].body)  # kombu's message, kept whole
        assert message["headers"]["task"] == "readme.add"
        assert json.loads(base64.b64decode(message["body"]))[0] == [2, 3]
        c.ack(jobs[0].id)


def test_readme_recurring_jobs_commands_run(server_factory: ServerFactory) -> None:
    """The "Recurring jobs" block, line by line through redis-cli against a real node: each
    answer is the one its comment gives (where it gives one)."""
    if server_factory.kind != "disq":
        pytest.skip("SCHEDULE is disq's")
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (scripts/ensure_redis_cli.sh installs it)")
    resp_port = free_port()
    server_factory.new("--resp-port", str(resp_port))
    text = README.read_text()
    section = text[text.index("## Recurring jobs") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith("redis-cli")]
    assert len(lines) == 5
    outputs = []
    for line in lines:
        command = line.partition("#")[0]
        argv = shlex.split(command.replace("7711", str(resp_port)))
        out = subprocess.run(
            [cli, *argv[1:]], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert "ERR" not in out, (line, out)
        outputs.append(out.split())
    assert outputs[0] == ["OK"] and outputs[1] == ["OK"]
    assert outputs[2] == ["heartbeat", "nightly"]
    shown = dict(zip(outputs[3][::2], outputs[3][1::2], strict=False))
    assert shown["queue"] == "reports" and shown["tz"] == "Europe/Berlin"
    assert outputs[4] == ["(integer)", "1"] or outputs[4] == ["1"]
