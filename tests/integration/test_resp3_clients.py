"""RESP3 and Redis 6's HELLO handshake on a live node, with the clients people use today.

redis-py 8 (its default RESP3, and ``protocol=2``), redis-py 7 (from ``.venv/redis7``, run in a
subprocess since the venv holds redis-py 8) and redis-cli in both protocols run ADDJOB, GETJOB,
ACKJOB, SHOW, QSTAT, INFO and HELLO against a real node over TCP. The wire tests check the
bytes themselves: HELLO 3 / HELLO 2, a RESP3 SHOW, RESP3's null, and HELLO's errors.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory, free_port

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cluster.nodeproc import resp_pong  # noqa: E402

redis = pytest.importorskip("redis")

PASSWORD = "s3cret"
REDIS7 = ROOT / ".venv" / "redis7"
ID = rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"


def _start(factory: ServerFactory, *extra: str) -> Iterator[int]:
    port = free_port()
    node = factory.node(
        "-l", "127.0.0.1", "-p", str(free_port()),
        "--resp-port", str(port), "--grpc-port", str(free_port()), *extra,
        ready=resp_pong(port, password=PASSWORD if extra else None),
    )  # fmt: skip
    yield port
    assert node.is_running(), "the node died"
    node.terminate()
    node.wait(15)
    assert "Traceback" not in node.log_text()


@pytest.fixture(scope="module")
def port(module_factory: ServerFactory) -> Iterator[int]:
    yield from _start(module_factory)


@pytest.fixture(scope="module")
def auth_port(module_factory: ServerFactory) -> Iterator[int]:
    yield from _start(module_factory, "--requirepass", PASSWORD)


# ------------------------------------------------------------------ the wire
class Wire:
    """A raw connection: send bytes, read exactly what is expected (or fail on a timeout)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def call(self, *args: str | int) -> None:
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(parts))

    def expect(self, want: bytes) -> None:
        while len(self.buf) < len(want):
            chunk = self.sock.recv(65536)
            assert chunk, f"closed after {self.buf!r}"
            self.buf += chunk
        got, self.buf = self.buf[: len(want)], self.buf[len(want) :]
        assert got == want

    def expect_match(self, pattern: bytes) -> re.Match[bytes]:
        """Read until the buffer is one whole reply matching ``pattern`` (a live node's SHOW
        has times in it); ``eventually`` fails on the timeout with what was read."""
        rx = re.compile(pattern, re.S)
        while (m := rx.fullmatch(self.buf)) is None:
            chunk = self.sock.recv(65536)
            assert chunk, f"closed after {self.buf!r}"
            self.buf += chunk
        self.buf = b""
        return m


def hello_bytes(proto: int, cid: bytes) -> bytes:
    head = b"%7\r\n" if proto == 3 else b"*14\r\n"
    return (
        head + b"$6\r\nserver\r\n$6\r\ndisque\r\n$7\r\nversion\r\n$7\r\n1.0-rc1\r\n"
        b"$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%s\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
        b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n" % (proto, cid)
    )


def test_wire_hello_3_then_hello_2(port: int) -> None:
    with Wire(port) as w:
        w.call("HELLO", 3)
        m = w.expect_match(re.escape(hello_bytes(3, b"@")).replace(b"@", rb"(\d+)"))
        cid = m.group(1)
        w.call("HELLO", 2)
        w.expect(hello_bytes(2, cid))


def test_wire_resp3_show_null_and_map(port: int) -> None:
    with Wire(port) as w:
        w.call("HELLO", 3)
        w.expect_match(rb"%7\r\n.*\$7\r\nmodules\r\n\*0\r\n")
        w.call("GETJOB", "NOHANG", "FROM", "wire3-empty")
        w.expect(b"_\r\n")
        w.call("SHOW", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000")
        w.expect(b"_\r\n")
        w.call("QSTAT", "wire3-none")
        w.expect(b"_\r\n")
        w.call("ADDJOB", "wire3", "body", 0, "RETRY", 0)
        job_id = w.expect_match(b"\\+(" + ID + b")\r\n").group(1)
        w.call("SHOW", job_id.decode())
        w.expect_match(
            b"%15\r\n"
            b"\\$2\r\nid\r\n\\$40\r\n" + re.escape(job_id) + b"\r\n"
            b"\\$5\r\nqueue\r\n\\$5\r\nwire3\r\n"
            b"\\$5\r\nstate\r\n\\$6\r\nqueued\r\n"
            b"\\$4\r\nrepl\r\n:1\r\n"
            b"\\$3\r\nttl\r\n:\\d+\r\n"
            b"\\$5\r\nctime\r\n:\\d+\r\n"
            b"\\$5\r\ndelay\r\n:0\r\n"
            b"\\$5\r\nretry\r\n:0\r\n"
            b"\\$5\r\nnacks\r\n:0\r\n"
            b"\\$21\r\nadditional-deliveries\r\n:0\r\n"
            b"\\$15\r\nnodes-delivered\r\n\\*1\r\n\\$40\r\n[0-9a-f]{40}\r\n"
            b"\\$15\r\nnodes-confirmed\r\n\\*0\r\n"
            b"\\$19\r\nnext-requeue-within\r\n_\r\n"
            b"\\$17\r\nnext-awake-within\r\n:\\d+\r\n"
            b"\\$4\r\nbody\r\n\\$4\r\nbody\r\n"
        )
        w.call("ACKJOB", job_id.decode())
        w.expect(b":1\r\n")


def test_wire_resp2_connection_keeps_resp2_nulls(port: int) -> None:
    with Wire(port) as w:
        w.call("GETJOB", "NOHANG", "FROM", "wire2-empty")
        w.expect(b"*-1\r\n")
        w.call("SHOW", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000")
        w.expect(b"$-1\r\n")


def test_wire_hello_errors_and_setname(port: int) -> None:
    with Wire(port) as w:
        w.call("HELLO", 4)
        w.expect(b"-NOPROTO unsupported protocol version\r\n")
        w.call("HELLO", "three")
        w.expect(b"-ERR Protocol version is not an integer or out of range\r\n")
        w.call("HELLO", 3, "FOO")
        w.expect(b"-ERR Syntax error in HELLO option 'FOO'\r\n")
        w.call("HELLO", 3, "AUTH", "someone", "pw")
        w.expect(WRONGPASS)
        w.call("CLIENT", "GETNAME")
        w.expect(b"$-1\r\n")  # nothing above switched the protocol
        w.call("HELLO", 3, "AUTH", "default", "any", "SETNAME", "r3")
        w.expect_match(rb"%7\r\n.*\$5\r\nproto\r\n:3\r\n.*")
        w.call("CLIENT", "GETNAME")
        w.expect(b"$2\r\nr3\r\n")


def test_wire_hello_auth_with_requirepass(auth_port: int) -> None:
    with Wire(auth_port) as w:
        w.call("QLEN", "q")
        w.expect(b"-NOAUTH Authentication required.\r\n")
        w.call("HELLO", 3)
        w.expect(
            b"-NOAUTH HELLO must be called with the client already authenticated, otherwise "
            b"the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
            b"client and select the RESP protocol version at the same time\r\n"
        )
        w.call("HELLO", 3, "AUTH", "default", "wrong")
        w.expect(WRONGPASS)
        w.call("HELLO", 3, "AUTH", "default", PASSWORD)
        w.expect_match(rb"%7\r\n.*\$7\r\nmodules\r\n\*0\r\n")
        w.call("QLEN", "q")
        w.expect(b":0\r\n")


# ------------------------------------------------------------------ redis-py
def _round_trip(r: object, queue: str) -> dict[str, object]:
    """The commands every client must run; returns the replies as redis-py gives them."""
    call = r.execute_command  # type: ignore[attr-defined]
    job_id = call("ADDJOB", queue, "payload", 0)
    out: dict[str, object] = {"id": job_id}
    out["show"] = call("SHOW", job_id)
    out["qstat"] = call("QSTAT", queue)
    out["getjob"] = call("GETJOB", "FROM", queue)
    out["ackjob"] = call("ACKJOB", job_id)
    out["nohang"] = call("GETJOB", "NOHANG", "FROM", queue)
    out["info"] = r.info()  # type: ignore[attr-defined]
    out["disque_hello"] = call("HELLO")
    return out


def _check_common(out: dict[str, object], queue: str) -> bytes:
    job_id = out["id"]
    assert isinstance(job_id, bytes) and re.fullmatch(ID, job_id)
    assert out["getjob"] == [[queue.encode(), job_id, b"payload"]]
    assert out["ackjob"] == 1
    assert out["nohang"] is None
    info = out["info"]
    assert isinstance(info, dict) and info["disque_version"] == "1.0-rc1"
    hello = out["disque_hello"]
    assert isinstance(hello, list) and hello[0] == 1 and len(hello[1]) == 40
    return job_id


def test_redis_py_8_defaults_speak_resp3(port: int) -> None:
    assert redis.__version__.startswith("8.")
    r = redis.Redis("127.0.0.1", port)
    out = _round_trip(r, "py8")
    job_id = _check_common(out, "py8")
    show = out["show"]
    assert isinstance(show, dict)
    assert show[b"id"] == job_id and show[b"queue"] == b"py8" and show[b"body"] == b"payload"
    assert show[b"state"] == b"queued" and show[b"nacks"] == 0
    qstat = out["qstat"]
    assert isinstance(qstat, dict)
    assert qstat[b"name"] == b"py8" and qstat[b"len"] == 1 and qstat[b"pause"] == b"none"
    assert r.execute_command("SHOW", job_id) is None  # acked on a single node: gone
    hello = r.execute_command("HELLO", 3)
    assert {k: v for k, v in hello.items() if k != b"id"} == {
        b"server": b"disque",
        b"version": b"1.0-rc1",
        b"proto": 3,
        b"mode": b"standalone",
        b"role": b"master",
        b"modules": [],
    }
    assert isinstance(hello[b"id"], int)


def test_redis_py_8_protocol_3_with_a_password(auth_port: int) -> None:
    r = redis.Redis("127.0.0.1", auth_port, protocol=3, password=PASSWORD)
    out = _round_trip(r, "py8auth")
    _check_common(out, "py8auth")
    assert isinstance(out["show"], dict) and isinstance(out["qstat"], dict)
    bad = redis.Redis("127.0.0.1", auth_port, protocol=3, password="nope")
    with pytest.raises(redis.exceptions.AuthenticationError):
        bad.ping()


def test_redis_py_8_protocol_2(port: int) -> None:
    r = redis.Redis("127.0.0.1", port, protocol=2)
    out = _round_trip(r, "py2")
    job_id = _check_common(out, "py2")
    show = out["show"]
    assert isinstance(show, list) and show[:6] == [
        b"id",
        job_id,
        b"queue",
        b"py2",
        b"state",
        b"queued",
    ]
    assert out["qstat"] == [
        b"name", b"py2", b"len", 1, b"age", 0, b"idle", 0, b"blocked", 0,
        b"import-from", [], b"import-rate", 0, b"jobs-in", 1, b"jobs-out", 0,
        b"pause", b"none", b"jobs", 1, b"active", 0, b"delayed", 0,
    ]  # fmt: skip
    hello = r.execute_command("HELLO", 2)
    assert hello[:6] == [b"server", b"disque", b"version", b"1.0-rc1", b"proto", 2]
    assert hello[8:] == [b"mode", b"standalone", b"role", b"master", b"modules", []]


_REDIS7_PROGRAM = """
import json, sys
import redis
r = redis.Redis("127.0.0.1", int(sys.argv[1]))
call = r.execute_command
job_id = call("ADDJOB", "py7", "payload", 0)
out = {
    "version": redis.__version__,
    "id": job_id.decode(),
    "show": [x.decode() if isinstance(x, bytes) else x for x in call("SHOW", job_id)[:6]],
    "qstat": [x.decode() if isinstance(x, bytes) else x for x in call("QSTAT", "py7")[:4]],
    "getjob": [[x.decode() for x in j] for j in call("GETJOB", "FROM", "py7")],
    "ackjob": call("ACKJOB", job_id),
    "nohang": call("GETJOB", "NOHANG", "FROM", "py7"),
    "info": r.info()["disque_version"],
    "hello2": [x.decode() if isinstance(x, bytes) else x for x in call("HELLO", 2)[:6]],
    "disque_hello": call("HELLO")[0],
}
# protocol=3: redis-py 7 opens with HELLO 3 and parses RESP3 (it cannot read a map on a
# RESP2 connection, so HELLO 3 is only sent this way, as with Redis).
r3 = redis.Redis("127.0.0.1", int(sys.argv[1]), protocol=3)
out["hello3"] = {k.decode(): v.decode() if isinstance(v, bytes) else v
                 for k, v in r3.execute_command("HELLO", 3).items() if k != b"id"}
out["qstat3"] = {k.decode(): v for k, v in r3.execute_command("QSTAT", "py7").items()
                 if k == b"len"}
out["nohang3"] = r3.execute_command("GETJOB", "NOHANG", "FROM", "py7")
print(json.dumps(out))
"""


def test_redis_py_7(port: int) -> None:
    if not (REDIS7 / "redis").is_dir():
        pytest.skip("redis-py 7 not in .venv/redis7 (scripts/ensure_redis_py7.sh installs it)")
    done = subprocess.run(
        [sys.executable, "-c", _REDIS7_PROGRAM, str(port)],
        env={"PYTHONPATH": str(REDIS7), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["version"].startswith("7.")
    job_id = out["id"]
    assert out["show"] == ["id", job_id, "queue", "py7", "state", "queued"]  # RESP2: a list
    assert out["qstat"] == ["name", "py7", "len", 1]
    assert out["getjob"] == [["py7", job_id, "payload"]]
    assert out["ackjob"] == 1 and out["nohang"] is None
    assert out["info"] == "1.0-rc1"
    assert out["hello2"] == ["server", "disque", "version", "1.0-rc1", "proto", 2]
    assert out["qstat3"] == {"len": 0} and out["nohang3"] is None
    assert out["hello3"] == {
        "server": "disque",
        "version": "1.0-rc1",
        "proto": 3,
        "mode": "standalone",
        "role": "master",
        "modules": [],
    }
    assert out["disque_hello"] == 1


# ------------------------------------------------------------------ redis-cli
def _cli(port: int, proto: str, *args: str) -> str:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (scripts/ensure_redis_cli.sh installs it)")
    done = subprocess.run(
        [cli, "-p", str(port), proto, "--no-raw", *args],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


@pytest.mark.parametrize("proto", ["-2", "-3"])
def test_redis_cli(port: int, proto: str) -> None:
    queue = f"cli{proto}"
    job_id = _cli(port, proto, "ADDJOB", queue, "hi there", "0").strip()
    assert re.fullmatch(ID.decode(), job_id)
    show = _cli(port, proto, "SHOW", job_id)
    qstat = _cli(port, proto, "QSTAT", queue)
    if proto == "-3":
        # redis-cli prints a RESP3 map as numbered "key" => value lines.
        assert show.startswith(f' 1# "id" => "{job_id}"\n 2# "queue" => "{queue}"\n')
        assert ' 4# "repl" => (integer) 1\n' in show
        assert qstat.startswith(f' 1# "name" => "{queue}"\n 2# "len" => (integer) 1\n')
        assert _cli(port, proto, "GETJOB", "NOHANG", "FROM", "cli-none") == "(nil)\n"
    else:
        assert show.startswith(f' 1) "id"\n 2) "{job_id}"\n 3) "queue"\n 4) "{queue}"\n')
        assert qstat.startswith(f' 1) "name"\n 2) "{queue}"\n 3) "len"\n 4) (integer) 1\n')
        assert _cli(port, proto, "GETJOB", "NOHANG", "FROM", "cli-none") == "(nil)\n"
    got = _cli(port, proto, "GETJOB", "FROM", queue)
    assert got == f'1) 1) "{queue}"\n   2) "{job_id}"\n   3) "hi there"\n'
    assert _cli(port, proto, "ACKJOB", job_id) == "(integer) 1\n"
    assert "disque_version:1.0-rc1" in _cli(port, proto, "INFO", "server")
    hello = _cli(port, proto, "HELLO", proto[1:])
    if proto == "-3":
        assert hello.startswith('1# "server" => "disque"\n2# "version" => "1.0-rc1"\n')
        assert '3# "proto" => (integer) 3\n' in hello and '7# "modules" => (empty array)' in hello
    else:
        assert hello.startswith(' 1) "server"\n 2) "disque"\n 3) "version"\n 4) "1.0-rc1"\n')
        assert " 6) (integer) 2\n" in hello and "14) (empty array)" in hello
    assert _cli(port, proto, "HELLO").startswith("1) (integer) 1\n")
