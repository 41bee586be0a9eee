"""Restart to first answer: disq-node on its config file and data dir against beanstalkd -b.

A node is stopped and started again on its data dir; the time from spawning it to the first
reply on each of its ports is what a client (or an orchestrator's probe) waits. Two data
dirs: empty, and holding ``--jobs`` jobs (1M by default) that the restart replays. disq is
timed on its three ports at once (RESP PING, beanstalk ``stats``, gRPC health Check), each
polled by its own thread; beanstalkd on its one port (``stats``). Disque is not built here:
the issue's own measurement of disque-server 1.0-rc1 (PING 0.01-0.05 s after a restart, an
almost empty dir) is the comparison docs/benchmarks.md quotes.

Each server has its own dir of each size (the large one filled once); the runs go run by
run, each server in turn, so the machine's drift hits them alike. Each run also reads the
server's RSS and CPU time (user + system) once every port answered; for the large dir, the
RSS over the empty dir's per job is what the replayed jobs cost in memory, and the CPU time
is what a loaded machine's scheduling does not change.

Each empty-dir run also measures the floor: the same interpreter importing asyncio and
exiting. An empty dir is a lone node: no peer in its view, so (issue 31) its RESP and
beanstalk ports serve before its bus loads. ``--with-peer`` gives each disq node a peer
first (a second node, met once and kept running): its view then holds that peer, and a
restart takes the other path, dialling the peer before it answers a client
(ARCHITECTURE.md, "Restarts"); with ``--before``, each build's node has its own peer, of its
own build.

Usage: ``python scripts/bench_restart.py [--runs 5] [--jobs 1000000] [--skip-large]
[--with-peer]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
DISQ_NODE = ROOT / ".venv" / "bin" / "disq-node"
POLL_S = 0.001
RSS_KEY = "rss"  # in a run's results: the server's RSS once every port answered, bytes
# ... and the CPU it had used by then (user + system, s): on a loaded machine a run's time is
# mostly the CPU share it got, which this does not depend on.
CPU_KEY = "cpu"
# ... and the CPU it had used when its first port answered (all its threads, from the
# scheduler's nanosecond counters: /proc/PID/stat's ticks are 10 ms, a tenth of a start).
FIRST_CPU_KEY = "cpu_first"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask_tcp(port: int, request: bytes, until: bytes) -> bool:
    """One connect, one request, the whole reply; False if refused or cut."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(request)
            got = b""
            while until not in got:
                data = s.recv(65536)
                if not data:
                    return False
                got += data
            return True
    except OSError:
        return False


def _grpc_probe(port: int) -> Callable[[], bool]:
    """A health Check on a fresh channel per attempt: an answer (even NOT_SERVING) counts.
    A channel kept across attempts would wait out gRPC's reconnect backoff instead."""

    def probe() -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            try:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
            except grpc.RpcError as exc:
                return bool(exc.code() != grpc.StatusCode.UNAVAILABLE)
            return True

    return probe


def _first_answers(
    cmd: list[str], probes: dict[str, Callable[[], bool]], cwd: Path
) -> dict[str, float]:
    """Spawn ``cmd`` and return, per probe, the seconds until it first answered."""
    out: dict[str, float] = {}
    start = time.perf_counter()
    errors = open(cwd / "node.err", "w+")  # read back if the node fails
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)

    def poll(name: str, probe: Callable[[], bool]) -> None:
        while proc.poll() is None:
            if probe():
                out[name] = time.perf_counter() - start
                out.setdefault(FIRST_CPU_KEY, _cpu_ns_s(proc.pid))
                return
            time.sleep(POLL_S)

    threads = [threading.Thread(target=poll, args=item) for item in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if proc.poll() is None:
        out[RSS_KEY] = _rss_bytes(proc.pid)  # what the replay left (not a time)
        out[CPU_KEY] = _cpu_s(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    errors.seek(0)
    tail = errors.read()[-2000:]
    errors.close()
    if not set(probes) <= set(out):
        missing = sorted(set(probes) - set(out))
        raise RuntimeError(f"{cmd[0]}: no answer on {missing}; its stderr ends:\n{tail}")
    return out


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu_ns_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` so far, at the scheduler's resolution."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fill(port: int, request: Callable[[int], bytes], reply_line: bytes, jobs: int) -> None:
    """Pipeline ``jobs`` adds in batches and read every reply."""
    batch = 10_000
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        done = 0
        while done < jobs:
            n = min(batch, jobs - done)
            s.sendall(b"".join(request(done + i) for i in range(n)))
            seen = 0
            buf = b""
            while seen < n:
                data = s.recv(1 << 20)
                if not data:
                    raise RuntimeError("connection closed while filling")
                buf += data
                seen += buf.count(reply_line)
                buf = buf[buf.rfind(b"\n") + 1 :]
            done += n


def _bus_pair_port() -> int:
    """A free client port whose bus port (port + 10000, Disque's rule) is free too."""
    for _ in range(100):
        port = random.randint(20000, 50000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


def _conf(data_dir: Path) -> tuple[Path, int, int]:
    """A node's config in ``data_dir`` (kept: a restart reads the same ports and dir)."""
    conf = data_dir / "node.conf"
    if not conf.exists():
        port, bport = _bus_pair_port(), _free_port()
        conf.write_text(
            f"port {port}\nbeanstalk-port {bport}\ndir {data_dir}\nappendonly yes\n"
            f"cluster-node-timeout 3000\nmetrics-port {_free_port()}\n"
        )
    text = dict(line.split(" ", 1) for line in conf.read_text().splitlines())
    return conf, int(text["port"]), int(text["beanstalk-port"])


def _resp(port: int, *args: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args)
        )
        got = b""
        while not got.endswith(b"\r\n") or (got.startswith(b"$") and got.count(b"\r\n") < 2):
            data = s.recv(65536)
            if not data:
                break
            got += data
        return got


def _meet_once(node: Path, data_dir: Path, peer_port: int) -> None:
    """Start the node on its dir, MEET the peer, wait until both know each other, stop it:
    its saved view now holds the peer."""
    conf, port, _ = _conf(data_dir)
    proc = subprocess.Popen(
        [str(node), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while not _ask_tcp(port, b"PING\r\n", b"\r\n"):
            time.sleep(0.01)
        _resp(port, "CLUSTER", "MEET", "127.0.0.1", str(peer_port))
        deadline = time.monotonic() + 30
        while b"cluster_known_nodes:2" not in _resp(port, "CLUSTER", "INFO"):
            if time.monotonic() > deadline:
                raise RuntimeError("the node did not meet its peer")
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def _disq(data_dir: Path, jobs: int, runs: int, node: Path = DISQ_NODE) -> list[dict[str, float]]:
    conf, port, bport = _conf(data_dir)
    grpc_port = port + 10000
    cmd = [str(node), str(conf)]
    probes: dict[str, Callable[[], bool]] = {
        "resp": lambda: _ask_tcp(port, b"PING\r\n", b"\r\n"),
        "beanstalk": lambda: _ask_tcp(bport, b"stats\r\n", b"\r\n"),
        "grpc": _grpc_probe(grpc_port),
    }
    if jobs:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not _ask_tcp(port, b"PING\r\n", b"\r\n"):
                time.sleep(0.01)
            body = b"x" * 100
            _fill(
                port,
                lambda i: b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$100\r\n" + body + b"\r\n$1\r\n0\r\n",
                b"+D-",
                jobs,
            )
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
    return [_first_answers(cmd, probes, data_dir) for _ in range(runs)]


def _beanstalkd(data_dir: Path, jobs: int, runs: int) -> list[dict[str, float]]:
    port = _free_port()
    cmd = ["beanstalkd", "-l", "127.0.0.1", "-p", str(port), "-b", str(data_dir)]
    if jobs:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not _ask_tcp(port, b"stats\r\n", b"\r\n"):
                time.sleep(0.01)
            body = b"x" * 100
            _fill(port, lambda i: b"put 0 0 60 100\r\n" + body + b"\r\n", b"INSERTED", jobs)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    probes: dict[str, Callable[[], bool]] = {
        "beanstalk": lambda: _ask_tcp(port, b"stats\r\n", b"\r\n")
    }
    return [_first_answers(cmd, probes, data_dir) for _ in range(runs)]


def _floor() -> float:
    """The floor, measured in the same runs: disq-node's interpreter spawned, importing
    asyncio and exiting (what any asyncio server in Python pays before it can answer)."""
    python = DISQ_NODE.parent / "python"
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "import asyncio"], check=True, cwd="/")
    return time.perf_counter() - start


def _report(
    name: str, results: list[dict[str, float]], jobs: int = 0, empty_rss: float = 0.0
) -> float:
    """Print the runs' times per port and their median RSS and CPU time (when the results
    have them: not the floor's); return that RSS (bytes)."""
    for port_name in results[0]:
        if port_name in (RSS_KEY, CPU_KEY, FIRST_CPU_KEY):
            continue
        times = [r[port_name] * 1000 for r in results]
        shown = ", ".join(f"{t:.0f}" for t in times)
        print(
            f"{name:28s} {port_name:9s} median {statistics.median(times):7.0f} ms  ({shown})",
            flush=True,
        )
    if RSS_KEY not in results[0]:
        return 0.0
    rss = statistics.median(r.get(RSS_KEY, 0.0) for r in results)
    cpu = [r.get(CPU_KEY, 0.0) for r in results]
    shown = ", ".join(f"{c:.2f}" for c in cpu)
    print(f"{name:28s} CPU to every answer median {statistics.median(cpu):.2f} s  ({shown})")
    first = [r.get(FIRST_CPU_KEY, 0.0) * 1000 for r in results]
    shown = ", ".join(f"{c:.0f}" for c in first)
    print(f"{name:28s} CPU to first answer median {statistics.median(first):.1f} ms  ({shown})")
    line = f"{name:28s} RSS once answering {rss / 2**20:.1f} MiB"
    if jobs and empty_rss:
        line += f", {(rss - empty_rss) / jobs:.0f} B/job over the empty dir's"
    print(line, flush=True)
    return rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--skip-large", action="store_true", help="only the empty data dir")
    parser.add_argument(
        "--with-peer",
        action="store_true",
        help="the empty-dir disq nodes restart with a peer in their view (a second node)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout's disq-node (e.g. ../wt-before/.venv/bin/disq-node), timed too",
    )
    args = parser.parse_args()
    if shutil.which("beanstalkd") is None:
        print("beanstalkd not found (scripts/ensure_beanstalkd.sh installs it)", file=sys.stderr)
        return 1
    sizes = [0] if args.skip_large else [0, args.jobs]
    empty_rss: dict[str, float] = {}
    each: list[list[dict[str, float]]]
    for jobs in sizes:
        runs: list[tuple[str, Callable[[Path, int, int], list[dict[str, float]]]]] = [
            ("disq-node", _disq),
            ("beanstalkd", _beanstalkd),
        ]
        if args.before is not None:
            runs.insert(1, ("disq-node before", functools.partial(_disq, node=args.before)))
        if jobs:
            # Each server's dir filled once (a run of 0 restarts), then restarted run by run,
            # each server in turn, as for the empty dir below.
            with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
                dirs = [Path(tmp) / str(i) for i in range(len(runs))]
                for d, (_name, run) in zip(dirs, runs, strict=True):
                    d.mkdir()
                    run(d, jobs, 0)
                each = [[] for _ in runs]
                for _ in range(args.runs):
                    for i, (_name, run) in enumerate(runs):
                        each[i] += run(dirs[i], 0, 1)
            for (name, _run), results in zip(runs, each, strict=True):
                _report(f"{name} ({jobs:,} jobs)", results, jobs, empty_rss.get(name, 0.0))
            continue
        # An empty dir: run by run, each server in turn (the machine's drift hits them
        # alike), each restarted on its own dir.
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
            dirs = [Path(tmp) / str(i) for i in range(len(runs))]
            for d in dirs:
                d.mkdir()
            peers: list[subprocess.Popen[bytes]] = []
            try:
                if args.with_peer:
                    # Each disq node its own peer, of its own build: one peer shared by
                    # two nodes would introduce them to each other (a view of two peers).
                    for i, (name, _run) in enumerate(runs):
                        if name == "beanstalkd":
                            continue
                        node = args.before if "before" in name else DISQ_NODE
                        peer_dir = Path(tmp) / f"peer{i}"
                        peer_dir.mkdir()
                        peer_conf, peer_port, _ = _conf(peer_dir)
                        peers.append(
                            subprocess.Popen(
                                [str(node), str(peer_conf)],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                            )
                        )
                        while not _ask_tcp(peer_port, b"PING\r\n", b"\r\n"):
                            time.sleep(0.01)
                        _meet_once(node, dirs[i], peer_port)
                each = [[] for _ in runs]
                floor: list[dict[str, float]] = []
                for _ in range(args.runs):
                    floor.append({"exit": _floor()})
                    for i, (_name, run) in enumerate(runs):
                        each[i] += run(dirs[i], 0, 1)
            finally:
                for peer in peers:
                    peer.send_signal(signal.SIGINT)
                    peer.wait(30)
        _report('floor: python -c "import asyncio"', floor)
        label = "0 jobs, a peer in its view" if args.with_peer else "0 jobs"
        for (name, _run), results in zip(runs, each, strict=True):
            label_of = label if name != "beanstalkd" else "0 jobs"
            empty_rss[name] = _report(f"{name} ({label_of})", results)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
