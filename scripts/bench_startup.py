"""A fresh server's start, disq-node (beanstalkd's flags, memory only) against beanstalkd:
spawn -> its first accepted connection, spawn -> its first answer, and greenstalk's own test
harness (sleep 0.1 s after spawning, then a 1 s delay timed by the client).

Harnesses written for beanstalkd connect almost at once, so disq-node must listen within 0.1 s.
Usage: ``python scripts/bench_startup.py [--runs 5] [--before OTHER/.venv/bin/disq-node]``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_to_listen(cmd: list[str]) -> float:
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited") from None
                time.sleep(0.0005)
    finally:
        proc.terminate()
        proc.wait()


def _reply(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    got = b""
    while b"\r\n" not in got:
        data = sock.recv(4096)
        if not data:
            raise RuntimeError("connection closed")
        got += data
    return got


def time_to_answer(cmd: list[str]) -> float:
    """Spawn -> the first reply to ``stats`` (connecting as soon as the port accepts)."""
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    _reply(s, b"stats\r\n")
                    return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited") from None
                time.sleep(0.0005)
    finally:
        proc.terminate()
        proc.wait()


def greenstalk_delay(cmd: list[str]) -> float:
    """greenstalk's own test harness: spawn the server, sleep 0.1 s, connect, then time a
    ``put`` with delay 1 and the ``reserve`` that gets it (its test_delays wants 1.000 to
    1.050 s): what a fresh server's start-up adds to a client's first timer."""
    port = _free_port()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.1)  # the harness's fixed wait, reproduced on purpose
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            start = time.monotonic()
            _reply(s, b"put 0 1 60 7\r\ndelayed\r\n")
            _reply(s, b"reserve\r\n")
            return time.monotonic() - start
    finally:
        proc.terminate()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--before", help="another build's disq-node, measured in the same runs (interleaved)"
    )
    args = parser.parse_args()
    servers = [("disq-node", [str(ROOT / ".venv" / "bin" / "disq-node")])]
    if args.before:
        servers.append(("before", [args.before]))
    servers.append(("beanstalkd", ["beanstalkd"]))
    for what, measure in (
        ("spawn -> listening", time_to_listen),
        ("spawn -> first answer", time_to_answer),
        ("greenstalk harness: put delay 1 -> reserve", greenstalk_delay),
    ):
        # Run by run, each server in turn: the machine's drift hits them alike.
        times: dict[str, list[float]] = {name: [] for name, _ in servers}
        for _ in range(args.runs):
            for name, cmd in servers:
                times[name].append(measure(cmd) * 1000)
        for name, _ in servers:
            shown = ", ".join(f"{t:.1f}" for t in times[name])
            med = statistics.median(times[name])
            print(f"{name:10s} {what} (ms): median {med:.1f} ({shown})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
