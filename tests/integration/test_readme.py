"""The README's examples run as written against a real node, and the claims the README makes
that no other test checks (docs/readme-claims.md maps every claim to its check)."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, SERVER_KIND, ServerFactory, ServerProcess, free_port
from eventually import eventually

from cluster.lab import Lab
from cluster.nodeproc import tcp_accepts
from cluster.resp_client import RespClient, RespError

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
    worker = _sdk_block("dead_letter=")
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


@dataclass(frozen=True)
class ReadmeNode:
    resp_port: int
    grpc_port: int


@pytest.fixture(scope="module")
def readme_node(module_factory: ServerFactory) -> ReadmeNode:
    """One node with every client port, shared by the checks below (each its own queue)."""
    if SERVER_KIND != "disq":
        pytest.skip("RESP, gRPC and the integrations are disq's")
    resp_port, grpc_port = free_port(), free_port()
    module_factory.new("--resp-port", str(resp_port), "--grpc-port", str(grpc_port))
    return ReadmeNode(resp_port, grpc_port)


def _redis_cli() -> str:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (scripts/ensure_redis_cli.sh installs it)")
    return cli


def test_readme_redis_cli_block_runs(readme_node: ReadmeNode) -> None:
    """The README's "Use it with redis-cli or a Disque client", line by line through
    redis-cli: the add answers an id, GETJOB the queue, that id and the body, ACKJOB 1, and
    the keyed add run twice answers one id for one job, the DELAYMS add is not queued at once
    and is queued once its 300 ms ran out."""
    cli = _redis_cli()
    resp_port = readme_node.resp_port
    text = README.read_text()
    section = text[text.index("## Use it with redis-cli") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = [ln.partition("#")[0] for ln in block.group(1).splitlines() if ln.strip()]
    assert len(lines) == 5

    def run(line: str, job_id: str = "") -> list[str]:
        argv = shlex.split(line.replace("7711", str(resp_port)).replace("D-1f2e3d4c-...", job_id))
        out = subprocess.run(
            [cli, *argv[1:]], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert "ERR" not in out, (line, out)
        return out.split()

    [job_id] = run(lines[0])
    assert job_id.startswith("D-")
    assert run(lines[1]) == ["emails", job_id, "hello"]
    assert run(lines[2], job_id) == ["1"]
    [first] = run(lines[3])
    assert run(lines[3]) == [first] and first.startswith("D-")
    with RespClient("127.0.0.1", resp_port) as c:
        assert c.call("QLEN", "emails") == 1  # hello was acked: the keyed job alone
        [delayed] = run(lines[4])
        assert c.call("QLEN", "emails") == 1  # not queued before its time
        eventually(lambda: c.call("QLEN", "emails") == 2, "the DELAYMS job queued")
        assert c.call("SHOW", delayed) is not None


def test_readme_results_block_runs(readme_node: ReadmeNode) -> None:
    """The README's "Results" block line by line through redis-cli, on a job's id: SET answers
    OK (one node: REPLICATE's default is 1 here), WAIT and GET the value, DEL 1; a GET after
    the DEL finds none."""
    cli = _redis_cli()
    text = README.read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index("### Results") :], re.S)
    assert block is not None
    with RespClient("127.0.0.1", readme_node.resp_port) as c:
        job_id = c.call("ADDJOB", "results", "work", 5000)
        assert isinstance(job_id, str)
        lines = [
            ln.partition("#")[0]
            .replace("7711", str(readme_node.resp_port))
            .replace("D-1f2e3d4c-...", job_id)
            for ln in block.group(1).splitlines()
            if ln.strip()
        ]
        outs = [
            subprocess.run(
                [cli, *shlex.split(ln)[1:]], capture_output=True, text=True, timeout=30, check=True
            ).stdout.split()
            for ln in lines
        ]
        assert outs == [["OK"], ["42"], ["42"], ["1"]]
        assert c.call("RESULT", "GET", job_id) is None


def test_readme_a_node_started_like_beanstalkd_keeps_nothing(server: ServerProcess) -> None:
    """`disq-node -l 127.0.0.1 -p 11300`: "started like beanstalkd: in memory" (the fixture
    starts every node so): a job put, the node restarted, the job is gone, as a fresh
    beanstalkd has none; and nothing was written in its working directory."""

    def entries() -> set[str]:  # the working directory's, caches (dot names) aside
        return {p.name for p in PROJECT_ROOT.iterdir() if not p.name.startswith(".")}

    before = entries()
    c = server.connect()
    c.send(b"put 0 0 60 5\r\nhello\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.close()
    server.restart()
    c = server.connect()
    c.send(b"peek 1\r\n")
    c.expect(b"NOT_FOUND\r\n")
    c.send(b"put 0 0 60 2\r\nhi\r\n")
    c.expect(b"INSERTED 1\r\n")  # ids start again at 1: nothing was replayed
    c.close()
    assert entries() - before == set()


def _listening(ports: set[int]) -> list[str]:
    """The local addresses of the TCP sockets listening on ``ports`` (from /proc/net)."""
    found = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for row in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = row.split()
            address, port = fields[1].split(":")
            if fields[3] != "0A" or int(port, 16) not in ports:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, raw))
    return found


def _accepts(port: int) -> bool:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


def test_readme_make_run_serves_the_embedded_defaults(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """`make run` (`disq-node`, no argument): beanstalk on 127.0.0.1:11300, RESP on 7711, the
    bus (gRPC) on 7710, every port on loopback only, the AOF on, fsynced before every answer, in
    ./disq-data, and SIGTERM stops it with status 0. The ports are fixed: on a machine where
    one is taken the test cannot run there, and says so."""
    ports = {11300: "beanstalk", 7711: "RESP", 7710: "gRPC"}
    for port, role in ports.items():
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                pytest.skip(f"port {port} ({role}) is taken on this machine")
    script = Path(sys.executable).with_name("disq-node")
    node = server_factory.node(
        cmd=[str(script)] if script.exists() else None,
        cwd=tmp_path,
        log_path=tmp_path / "node.log",
        ready=tcp_accepts(11300),  # the beanstalk port
    )
    try:
        with socket.create_connection(("127.0.0.1", 11300), timeout=5) as s:
            s.sendall(b"put 0 0 60 5\r\nhello\r\n")
            assert s.recv(100) == b"INSERTED 1\r\n"
        with RespClient("127.0.0.1", 7711) as c:
            assert c.call("PING") == "PONG"
            assert c.call("CONFIG", "GET", "appendonly") == [b"appendonly", b"yes"]
            assert c.call("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"always"]
        from disq.client import Client

        # A node with no peer serves its client ports first, its gRPC port a moment later.
        eventually(lambda: _accepts(7710), "the gRPC port")
        with Client("127.0.0.1:7710") as client:
            job_id = client.add_job("emails", b"hello", replicate=1)
            assert client.qlen("emails") == 1 and job_id.startswith("D-")
        assert (tmp_path / "disq-data" / "disq.aof").is_file()
        listening = _listening(set(ports))
        assert len(listening) >= 3 and all(
            a in ("127.0.0.1", "::ffff:127.0.0.1") for a in listening
        ), listening
    finally:
        status = node.stop(30)  # SIGTERM
    assert status == 0, (tmp_path / "node.log").read_text()


def test_readme_disque_default_replicate_with_one_node_of_3_down(tmp_path: Path) -> None:
    """The README: "A Disque client's ADDJOB without REPLICATE keeps Disque's min(3, cluster
    size): on 3 nodes with one down it gets NOREPL; pass REPLICATE 2." """
    with Lab(3, tmp_path / "lab", node_timeout_ms=1500) as lab:
        lab.kill9(2)
        with pytest.raises(RespError, match=r"^NOREPL"):
            lab.node(0).call("ADDJOB", "q", "x", 2000, timeout=10)
        job_id = lab.node(0).call("ADDJOB", "q", "x", 2000, "REPLICATE", 2, timeout=10)
        assert isinstance(job_id, str) and job_id.startswith("D-")


def test_readme_dramatiq_resends_an_add_6_times_then_raises_connection_closed(
    readme_node: ReadmeNode,
) -> None:
    """The README: "The Dramatiq broker re-sends an add up to 6 times, as Dramatiq's RabbitMQ broker
    re-publishes, before it raises ConnectionClosed": an add no node can take (REPLICATE 2 on
    a lone node: NOREPL) reaches the node 6 times, then the send raises."""
    import dramatiq
    from dramatiq.errors import ConnectionClosed

    from disq.integrations.dramatiq import DisqBroker

    grpc_port, resp_port = readme_node.grpc_port, readme_node.resp_port

    def addjob_calls() -> int:
        with RespClient("127.0.0.1", resp_port) as c:
            stats = c.call("INFO", "commandstats")
        assert isinstance(stats, bytes)
        m = re.search(rb"cmdstat_addjob:calls=(\d+)", stats)
        return int(m.group(1)) if m else 0

    broker = DisqBroker(f"disq://127.0.0.1:{grpc_port}", replicate=2)
    try:

        @dramatiq.actor(broker=broker, queue_name="resent", actor_name="resent")
        def resent(x: int) -> None: ...

        before = addjob_calls()
        with pytest.raises(ConnectionClosed):
            resent.send(1)
        assert addjob_calls() - before == 6
    finally:
        broker.close()


def test_readme_schedule_shortcuts_tick_in_utc_by_default(readme_node: ReadmeNode) -> None:
    """The README's "a shortcut (@hourly, @daily, @weekly, @monthly, @yearly)" and "Cron
    fields are in the zone (an IANA name, UTC by default)": added without TZ, each shows tz
    UTC and its next ticks at midnight UTC of each Sunday, each month's first day, each
    year's first day."""
    first = {"@weekly": lambda d: d.weekday() == 6, "@monthly": lambda d: d.day == 1}
    first["@yearly"] = lambda d: (d.month, d.day) == (1, 1)
    with RespClient("127.0.0.1", readme_node.resp_port) as c:
        for shortcut, due in first.items():
            name = "readme-" + shortcut[1:]
            assert c.call("SCHEDULE", "ADD", name, shortcut, "readme-q", "b") == "OK"
            shown = c.call("SCHEDULE", "SHOW", name)
            assert isinstance(shown, list)
            pairs = dict(zip(shown[::2], shown[1::2], strict=True))
            assert pairs[b"tz"] == b"UTC"
            ticks = [datetime.fromtimestamp(int(t), UTC) for t in pairs[b"next"]]
            assert len(ticks) >= 2 and ticks == sorted(set(ticks))
            assert all(due(t) and (t.hour, t.minute, t.second) == (0, 0, 0) for t in ticks)
            assert c.call("SCHEDULE", "DEL", name) == 1


def test_readme_kombu_refuses_exchange_to_exchange_bindings(readme_node: ReadmeNode) -> None:
    """The README's "Not supported: ... exchange-to-exchange bindings": kombu's bind of one
    exchange to another is refused at once, and the channel keeps serving."""
    import kombu

    with kombu.Connection(f"disq://127.0.0.1:{readme_node.grpc_port}?replicate=1") as conn:
        channel = conn.default_channel
        source = kombu.Exchange("readme-src", "fanout")(channel)
        dest = kombu.Exchange("readme-dst", "fanout")(channel)
        source.declare()
        dest.declare()
        with pytest.raises(NotImplementedError, match="exchange_bind"):
            dest.bind_to(source)
        q = conn.SimpleQueue("readme-e2e")
        q.put("still served")
        message = q.get(timeout=5)
        assert message.payload == "still served"
        message.ack()


def test_readme_dashboard_actions_do_what_they_say(server_factory: ServerFactory) -> None:
    """The Dashboard section: logged-in users (here: loopback with --dashboard-actions) may
    "pause and resume a queue, requeue, delete, kick buried tubes, CLUSTER LEAVING a node",
    and Dead letters "requeue or delete one job or all". Each action, confirmed, changes what
    it says; test_dashboard_http.py checks the refusals, test_dashboard_browser.py pause,
    resume and a requeue in a browser."""
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    from dashboard_cluster import start_cluster
    from test_dashboard_http import Browser

    from disq.client import Client

    n0, n1 = start_cluster(server_factory, 2, "--dashboard-actions")
    b = Browser()
    token = b.csrf(b.req(n0.url + "/login")[1])

    def act(**form: str) -> str:
        status, html = b.req(n0.url + "/action", {**form, "csrf": token, "confirm": "yes"})
        assert status == 200, (form, html)
        return html

    addrs = [n0.grpc_addr, n1.grpc_addr]
    with Client(addrs) as c:

        def qlen(queue: str) -> int:
            return sum(c.qlen(queue, node=a) for a in addrs)

        # One job deleted; then a dead-letter queue requeued whole, another deleted whole.
        one = c.add_job("readme-dead", b"one", replicate=1)
        act(action="delete", job=one)
        assert c.show(one) is None
        for k in range(3):
            c.add_job("orders-dead", f"o{k}".encode(), replicate=1)
            c.add_job("spam-dead", f"s{k}".encode(), replicate=1)
        assert "3 job(s)" in act(action="requeue_all", queue="orders-dead", to="orders")
        assert (qlen("orders-dead"), qlen("orders")) == (0, 3)
        assert "3 job(s)" in act(action="delete_all", queue="spam-dead")
        assert qlen("spam-dead") == 0
        # One requeued into another queue.
        again = c.add_job("readme-dead", b"again", replicate=1)
        act(action="requeue", job=again, to="readme-back")
        [job] = c.get_jobs("readme-back", count=1, timeout_s=5)
        assert job.body == b"again" and c.show(again) is None

    # A buried beanstalk job of this node's tube, kicked.
    conn = n0.srv.connect()
    conn.send(b"put 0 0 60 4\r\nbury\r\nreserve\r\n")
    conn.expect(b"INSERTED 1\r\nRESERVED 1 4\r\nbury\r\n")
    conn.send(b"bury 1 0\r\n")
    conn.expect(b"BURIED\r\n")
    assert "1 job(s) kicked" in act(action="kick", tube="default")
    conn.send(b"peek-ready\r\n")
    conn.expect(b"FOUND 1 4\r\nbury\r\n")
    conn.close()

    # CLUSTER LEAVING on the other node, through this node's page.
    with RespClient("127.0.0.1", n1.resp) as r:
        n1_id = r.call("CLUSTER", "MYID")
        assert isinstance(n1_id, str | bytes)
        n1_id = n1_id.decode() if isinstance(n1_id, bytes) else n1_id
        assert r.call("CLUSTER", "LEAVING") == "no"
        act(action="leaving", node=n1_id, value="yes")
        assert r.call("CLUSTER", "LEAVING") == "yes"
        with pytest.raises(RespError, match=r"^LEAVING"):
            r.call("GETJOB", "TIMEOUT", 100, "FROM", "readme-q")  # it refuses consumers
        act(action="leaving", node=n1_id, value="no")
        assert r.call("CLUSTER", "LEAVING") == "no"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_readme_sigterm_and_sigint_flush_the_aof_and_exit(
    server_factory: ServerFactory, signum: int
) -> None:
    """The README's "SIGTERM/SIGINT flush the AOF and exit": status 0 (a Ctrl-C is no
    traceback), and the job put before it is there after a restart on the same data dir.
    (What the flush adds over a kill, the fsync, only a power cut would show: the AOF's own
    tests cover the fsync policies.)"""
    if server_factory.kind != "disq":
        pytest.skip("beanstalkd exits on SIGINT without a word; this is disq's promise")
    srv = server_factory.new(binlog=True)
    c = srv.connect()
    c.send(b"put 0 0 60 4\r\nkept\r\n")
    c.expect(b"INSERTED 1\r\n")
    c.close()
    srv.signal(signum)
    assert srv.proc is not None and srv.proc.wait(30) == 0, srv.log_text()
    assert "Traceback" not in srv.log_text()
    srv.stop()  # reaps
    srv.start()
    c = srv.connect()
    c.send(b"peek 1\r\n")
    c.expect(b"FOUND 1 4\r\nkept\r\n")
    c.close()


@pytest.mark.slow
def test_readme_analytics_command_writes_the_report_it_names(tmp_path: Path) -> None:
    """The README's `spark-submit disq/spark/analytics.py --events ... --out ... --window 1h
    --dead-letter-queues emails-dead`: "its unacked jobs count as dead", and "/tmp/report:
    summary.txt (printed too), summary.parquet/, summary.json/, chart.png"."""
    pytest.importorskip("pyspark")
    submit = Path(sys.executable).with_name("spark-submit")
    if shutil.which("java") is None or not submit.exists():
        pytest.skip("Java and pyspark's spark-submit are needed (make test installs them)")
    from disq.testing.events import seeded_events

    events, _ = seeded_events(7)
    t0 = min(e["time_ms"] for e in events)
    for k in range(3):  # moved to the dead-letter queue, never handled
        job = f"D-00000007-dead{k:020d}-05a1"
        events.append({"node": "n9", "seq": 1 + k, "time_ms": t0 + k, "kind": "enqueued",
                       "queue": "emails-dead", "job_id": job, "attempt": 1, "size": 1})  # fmt: skip
    (tmp_path / "events").mkdir()
    with open(tmp_path / "events" / "events-n.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    # The README's command as written (its two lines joined), on this export.
    lines = README.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("spark-submit "))
    command = " ".join(ln.partition("#")[0].rstrip().rstrip("\\") for ln in lines[at : at + 2])
    argv = shlex.split(command)
    assert argv[:2] == ["spark-submit", "disq/spark/analytics.py"] and "emails-dead" in argv
    report = tmp_path / "report"
    paths = {"/tmp/events": str(tmp_path / "events"), "/tmp/report": str(report)}
    out = subprocess.run(
        [str(submit), *(paths.get(a, a) for a in argv[1:])],
        cwd=PROJECT_ROOT,
        # The venv's bin first: spark-submit finds Spark's home and its Python there.
        env={
            **os.environ,
            "PYTHONPATH": str(PROJECT_ROOT),
            "PATH": f"{submit.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    summary = (report / "summary.txt").read_text()
    assert out.stdout == summary  # printed too
    assert (report / "summary.parquet" / "_SUCCESS").exists()
    assert (report / "summary.json" / "_SUCCESS").exists()
    assert (report / "chart.png").stat().st_size > 1000
    [dead_row] = [ln for ln in summary.splitlines() if ln.startswith("emails-dead ")]
    assert dead_row.split()[-1] == "3"  # DEAD: the dead-letter queue's unacked jobs


def test_readme_aof_group_commit(server_factory: ServerFactory) -> None:
    """The README's "an append-only file with group commit": with `-f 0` (fsync before every
    reply) a pipeline of 200 puts is answered in full, each after an fsync that covers it,
    with far fewer fsyncs than writes: the puts of one read share one."""
    if server_factory.kind != "disq":
        pytest.skip("the metrics port is disq's")
    metrics = free_port()
    srv = server_factory.new("-f", "0", "--metrics-port", str(metrics), binlog=True)

    def fsyncs() -> float:
        url = f"http://127.0.0.1:{metrics}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        [line] = [ln for ln in text.splitlines() if ln.startswith("disq_aof_fsync_seconds_count")]
        return float(line.split()[-1])

    before = fsyncs()
    c = srv.connect()
    c.send(b"".join(b"put 0 0 60 1\r\nx\r\n" for _ in range(200)))
    c.expect(b"".join(b"INSERTED %d\r\n" % i for i in range(1, 201)))
    c.close()
    synced = fsyncs() - before
    assert 1 <= synced < 100, synced


def test_readme_the_advertised_address_travels_and_is_dialled(
    server_factory: ServerFactory,
) -> None:
    """The README's "Gossip carries it to every node, and HELLO (RESP and gRPC), CLUSTER NODES
    and the SDK's node list show it; the peers and the job lanes dial it": node A listens on
    127.0.0.1 and advertises `localhost`; B, joined through A's IP, shows A as `localhost` and
    replicates to it there."""
    if server_factory.kind != "disq":
        pytest.skip("the cluster is disq's")
    from disq.client import Client

    ports = [(free_port(), free_port()) for _ in range(2)]
    (resp_a, grpc_a), (resp_b, grpc_b) = ports
    common = ("--in-memory", "--node-timeout-ms", "1500")
    server_factory.new(
        "--resp-port", str(resp_a), "--grpc-port", str(grpc_a), *common,
        "--advertise-host", "localhost",
    )  # fmt: skip
    server_factory.new(
        "--resp-port", str(resp_b), "--grpc-port", str(grpc_b), *common,
        "--join", f"127.0.0.1:{grpc_a}",
    )  # fmt: skip

    def a_as_seen_by_b() -> str:
        with RespClient("127.0.0.1", resp_b) as c:
            nodes = c.call("CLUSTER", "NODES")
        assert isinstance(nodes, bytes | str)
        text = nodes.decode() if isinstance(nodes, bytes) else nodes
        rows = [r for r in text.splitlines() if "myself" not in r and r.strip()]
        return rows[0] if rows and " connected" in rows[0] else ""

    row = eventually(a_as_seen_by_b, "B's CLUSTER NODES listing A, connected")
    assert row.split()[1].startswith(f"localhost:{resp_a}"), row
    with RespClient("127.0.0.1", resp_b) as c:
        hello = c.call("HELLO")
        assert isinstance(hello, list)
        hosts = {bytes(n[1]).decode() if isinstance(n[1], bytes) else n[1] for n in hello[2:]}
        assert "localhost" in hosts, hello
        job_id = c.call("ADDJOB", "readme-adv", "x", 5000, "REPLICATE", 2)  # a copy on A
        assert isinstance(job_id, str) and job_id.startswith("D-")
    with Client(f"127.0.0.1:{grpc_b}") as sdk:
        assert "localhost" in {n.host for n in sdk.hello().nodes}


def test_readme_sdk_results_blocks_run(server_factory: ServerFactory) -> None:
    """The README's Results > The SDK: the worker block stores its handler's value, the
    producer block prints it once the worker has run the job."""
    if server_factory.kind != "disq":
        pytest.skip("the gRPC SDK is disq's")
    grpc_port = free_port()
    server_factory.new("--grpc-port", str(grpc_port))
    worker = _sdk_block("store_results=True").replace("7710", str(grpc_port))
    producer = _sdk_block("c.result(job_id").replace("7710", str(grpc_port))
    proc = subprocess.Popen([sys.executable, "-c", worker])
    try:
        out = subprocess.run(
            [sys.executable, "-c", producer],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.strip() == "b'thumb of cat.jpg'"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
