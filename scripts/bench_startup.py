"""A fresh server's start, disq-node (beanstalkd's flags, memory only) against beanstalkd:
spawn -> its first accepted connection, spawn -> its first answer, and greenstalk's own test
harness (sleep 0.1 s after spawning, then a 1 s delay timed by the client).

Beside them, the floor: the same interpreter running ``python -c "import asyncio"`` and
exiting, what any asyncio server written in Python pays before it can answer. Each run
measures the floor and every server in turn (the machine's drift hits them alike), and disq's
"after floor" is the median of each run's difference (issue 31: at most 15 ms).

Harnesses written for beanstalkd connect almost at once, so disq-node must listen within 0.1 s.
Usage: ``python scripts/bench_startup.py [--runs 5] [--before OTHER/.venv/bin/disq-node]
[--before-path OTHER_CHECKOUT] [--cpu]``; run it with ``PYTHONPATH`` at the checkout to measure (its
compiled build, when built: no ``DISQ_PURE``).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"  # disq-node's interpreter (its #! line)
FLOOR_CODE = "import asyncio"
REFUSED = float("nan")  # greenstalk's harness found nothing listening after its 0.1 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Server = tuple[str, list[str], dict[str, str] | None]  # name, command, environment


def time_to_exit(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Spawn -> exit: the floor's measure."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - start


def time_to_listen(cmd: list[str], env: dict[str, str] | None = None) -> float:
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
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


def time_to_answer(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Spawn -> the first reply to ``stats`` (connecting as soon as the port accepts)."""
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
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


def greenstalk_delay(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """greenstalk's own test harness: spawn the server, sleep 0.1 s, connect, then time a
    ``put`` with delay 1 and the ``reserve`` that gets it (its test_delays wants 1.000 to
    1.050 s): what a fresh server's start-up adds to a client's first timer."""
    port = _free_port()
    proc = subprocess.Popen(
        [*cmd, "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        time.sleep(0.1)  # the harness's fixed wait, reproduced on purpose
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            return REFUSED  # not listening 0.1 s after spawning: the harness fails here
        with s:
            start = time.monotonic()
            _reply(s, b"put 0 1 60 7\r\ndelayed\r\n")
            _reply(s, b"reserve\r\n")
            return time.monotonic() - start
    finally:
        proc.terminate()
        proc.wait()


# ``--cpu``: the node under a wrapper that writes its CPU time (all threads) when the
# beanstalk door reads its first bytes; the floor writes its own at the end of its import.
CPU_NODE = """
import os, sys, time
import disq.server.beanstalk_tcp as bt
first = bt.BeanstalkProtocol.data_received
def data_received(self, data, _told=[]):
    if not _told:
        _told.append(1)
        os.write(int(os.environ["CPU_FD"]), b"%.3f\\n" % (time.process_time() * 1000))
    return first(self, data)
bt.BeanstalkProtocol.data_received = data_received
from disq.node_main import main
sys.argv[0] = "disq-node"
sys.exit(main())
"""
CPU_FLOOR = "import asyncio, time; print(time.process_time() * 1000)"


def cpu_floor() -> float:
    out = subprocess.run([str(PYTHON), "-c", CPU_FLOOR], capture_output=True, text=True, cwd="/")
    return float(out.stdout)


def cpu_to_answer(env: dict[str, str] | None) -> float:
    """CPU ms of a standalone node when it reads its first command (``stats``)."""
    port = _free_port()
    r, w = os.pipe()
    child_env = dict(env if env is not None else os.environ, CPU_FD=str(w))
    proc = subprocess.Popen(
        [str(PYTHON), "-c", CPU_NODE, "-l", "127.0.0.1", "-p", str(port)],
        env=child_env,
        pass_fds=(w,),
        cwd="/",  # -c puts the working directory first on sys.path: not this checkout
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(w)
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    _reply(s, b"stats\r\n")
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("disq-node exited") from None
                time.sleep(0.0005)
        return float(os.read(r, 64).split()[0])
    finally:
        os.close(r)
        proc.terminate()
        proc.wait()


def cpu_runs(runs: int, servers: list[Server]) -> None:
    floor: list[float] = []
    times: dict[str, list[float]] = {name: [] for name, _, _ in servers}
    for _ in range(runs):
        floor.append(cpu_floor())
        for name, _, env in servers:
            times[name].append(cpu_to_answer(env))
    _show("floor", "CPU to the end of import asyncio", floor)
    for name, _, _ in servers:
        _show(name, "CPU to reading its first command", times[name])
        after = statistics.median(times[name]) - statistics.median(floor)
        print(f"{name:10s} CPU after the floor (medians) (ms): {after:.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--before", help="another build's disq-node, measured in the same runs (interleaved)"
    )
    parser.add_argument(
        "--before-path",
        help="another checkout whose disq this disq-node runs (PYTHONPATH), measured in the "
        "same runs: main's compiled build against this one's",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="CPU time (process_time) to the first command instead of wall times: what the "
        "load of a shared machine moves least (disq-node builds only)",
    )
    args = parser.parse_args()
    node = [str(PYTHON), str(ROOT / ".venv" / "bin" / "disq-node")]
    servers: list[Server] = [("disq-node", node, None)]
    if args.before:
        servers.append(("before", [args.before], None))
    if args.before_path:
        env = dict(os.environ, PYTHONPATH=args.before_path)
        servers.append(("before", node, env))
    if args.cpu:
        cpu_runs(args.runs, servers)
        return 0
    servers.append(("beanstalkd", ["beanstalkd"], None))
    floor_cmd = [str(PYTHON), "-c", FLOOR_CODE]
    for what, measure in (
        ("spawn -> listening", time_to_listen),
        ("spawn -> first answer", time_to_answer),
        ("greenstalk harness: put delay 1 -> reserve", greenstalk_delay),
    ):
        # Run by run, the floor and each server in turn: the machine's drift hits them alike.
        floor: list[float] = []
        times: dict[str, list[float]] = {name: [] for name, _, _ in servers}
        for _ in range(args.runs):
            floor.append(time_to_exit(floor_cmd) * 1000)
            for name, cmd, env in servers:
                times[name].append(measure(cmd, env) * 1000)
        with_floor = measure is not greenstalk_delay
        if with_floor:
            _show("floor", f"{what} (python -c {FLOOR_CODE!r}: spawn -> exit)", floor)
        for name, _, _ in servers:
            _show(name, what, times[name])
            if with_floor and name != "beanstalkd":
                after = [t - f for t, f in zip(times[name], floor, strict=True)]
                _show(name, f"{what}, after the floor (run by run)", after)
                print(
                    f"{name:10s} {what}, fastest run after the fastest floor (ms): "
                    f"{min(times[name]) - min(floor):.1f}",
                    flush=True,
                )
    return 0


def _show(name: str, what: str, times: list[float]) -> None:
    shown = ", ".join("refused" if t != t else f"{t:.1f}" for t in times)
    answered = [t for t in times if t == t]  # NaN: refused
    med = f"{statistics.median(answered):.1f}" if answered else "-"
    refused = len(times) - len(answered)
    also = f", {refused} refused" if refused else ""
    low = f", min {min(answered):.1f}" if answered else ""
    print(f"{name:10s} {what} (ms): median {med}{low}{also} ({shown})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
