"""Bad input on a live node's RESP port: random and mutated streams next to a healthy client.

Every connection here sends garbage (random bytes, commands with flipped bytes, cut or
absurd lengths, wrong arities, bad job ids) and then hangs up or is reset. A health client
keeps doing ADDJOB/GETJOB/ACKJOB round trips on its own queue the whole time; at the end the
node is alive, answers PING, and its log has no traceback. ``DISQ_FUZZ_SEED`` replays a run.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory, free_port

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cluster.nodeproc import resp_pong  # noqa: E402
from cluster.resp_client import RespClient, encode_command  # noqa: E402

BASE_SEED = int(os.environ.get("DISQ_FUZZ_SEED", random.randrange(1 << 32)))
VALID = [
    ["ADDJOB", "fq", "body", "0"],
    ["ADDJOB", "fq", "body", "100", "REPLICATE", "1", "RETRY", "5", "TTL", "60", "MAXLEN", "9"],
    ["GETJOB", "NOHANG", "COUNT", "3", "FROM", "fq", "other"],
    ["ACKJOB", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"],
    ["QLEN", "fq"],
    ["QSTAT", "fq"],
    ["QPEEK", "fq", "-2"],
    ["QSCAN", "COUNT", "2"],
    ["JSCAN", "0", "STATE", "queued", "REPLY", "all"],
    ["SHOW", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"],
    ["PAUSE", "fq", "state"],
    ["INFO"],
    ["HELLO"],
    ["CLUSTER", "INFO"],
    ["COMMAND", "COUNT"],
    ["WORKING", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"],
    ["NACK", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"],
]


def _stream(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 4096))
    if kind == 1:  # valid commands with some bytes flipped
        data = bytearray(b"".join(encode_command(rng.choice(VALID)) for _ in range(20)))
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 2:  # absurd or negative lengths
        n = rng.choice([b"-5", b"99999999999", b"x", b"", b"4294967296", b"1048577"])
        return b"*" + n + b"\r\n$" + n + b"\r\nPING\r\n"
    if kind == 3:  # wrong arities and bad arguments, inline too
        parts = [rng.choice(["ADDJOB", "GETJOB", "ACKJOB", "QPEEK", "PAUSE", "CONFIG", "DEBUG"])]
        parts += [rng.choice(["", "-1", "FROM", "x" * 300, "NOHANG", "D-bad"]) for _ in range(4)]
        return " ".join(parts).encode() + b"\r\n"
    if kind == 4:  # a command cut in the middle
        whole = encode_command(rng.choice(VALID))
        return whole[: rng.randrange(1, len(whole))]
    return b"\r\n" * rng.randrange(1, 50) + b"\x00\xff" * rng.randrange(1, 50)


@pytest.fixture
def node(server_factory: ServerFactory, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port, gport = free_port(), free_port()
    log = tmp_path / "node.log"
    proc = server_factory.node(
        "-l", "127.0.0.1", "-p", str(free_port()), "--resp-port", str(port),
        "--grpc-port", str(gport), ready=resp_pong(port), log_path=log,
    )  # fmt: skip
    yield port, log
    assert proc.is_running(), "the node died"


@pytest.mark.slow
def test_fuzzed_clients_do_not_hurt_a_healthy_one(node: tuple[int, Path]) -> None:
    port, log = node
    stop = threading.Event()
    health_errors: list[str] = []
    rounds = [0]

    def health() -> None:
        # Any exception (a timeout, a closed connection, a wrong reply type) is recorded:
        # a health thread that dies silently would leave only the final PING checked.
        try:
            with RespClient("127.0.0.1", port, timeout=5) as c:
                while not stop.is_set():
                    job_id = c.call("ADDJOB", "health", f"h{rounds[0]}", 0)
                    got = c.call("GETJOB", "NOHANG", "FROM", "health")
                    if got != [[b"health", job_id.encode(), f"h{rounds[0]}".encode()]]:
                        health_errors.append(f"round {rounds[0]}: GETJOB {got!r}")
                    acked = c.call("ACKJOB", job_id)
                    if acked != 1:
                        health_errors.append(f"round {rounds[0]}: ACKJOB {acked!r}")
                    rounds[0] += 1
        except BaseException as exc:  # every failure must reach the test
            health_errors.append(f"round {rounds[0]}: {type(exc).__name__}: {exc}")

    t = threading.Thread(target=health)
    t.start()
    try:
        rng = random.Random(BASE_SEED)
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            with contextlib.suppress(OSError):
                s.sendall(_stream(rng))
                s.settimeout(0.05)
                with contextlib.suppress(TimeoutError, OSError):
                    s.recv(65536)
            if rng.random() < 0.5:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        fuzzed_rounds = rounds[0]
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive(), "the health client hung"
    assert not health_errors, f"seed {BASE_SEED}: {health_errors[:3]}"
    assert fuzzed_rounds > 0, "the health client made no round while the fuzzers ran"
    c = RespClient("127.0.0.1", port)
    assert c.call("PING") == "PONG"
    assert c.call("QLEN", "health") == 0
    assert b"Traceback" not in log.read_bytes(), f"seed {BASE_SEED}"
