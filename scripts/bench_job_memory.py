"""Bytes per queued job: RSS after ``--jobs`` jobs (1M, 100-byte bodies) added to a server
with no persistence, beside beanstalkd and (if built) Disque, in one run.

Each server starts fresh on an empty dir; its RSS (``/proc/PID/status`` VmRSS) is read once
it answers, then again after the jobs are added (pipelined, every reply read) and the server
has had a moment to settle. Reported: the RSS after, and (after - before) / jobs, per server.

- disq: ``disq-node`` on a Disque-style config file, ``appendonly no``, ``ADDJOB q <body> 0``
  over RESP (a standalone node: REPLICATE 1, the job queued). Which code runs is whatever
  ``disq`` the interpreter imports (set PYTHONPATH to a checkout; compiled if it is built).
- Disque: ``disque-server`` (``--disque``, default /tmp/disque/src/disque-server) on a
  config file, ``appendonly no``, the same ADDJOB. Not built here; skipped when absent.
- beanstalkd: ``beanstalkd -l 127.0.0.1 -p P`` (no ``-b``), ``put 0 0 60 100``.
- ``--beanstalk``: also ``disq-node`` (the same config file) taking the same puts on its
  beanstalk port, beside beanstalkd.
- ``--events-max-bytes N``: the disq nodes' in-memory lifecycle event log bounded at N bytes
  (default: the node's, 32 MiB). At 1M jobs the log is at its bound, so this tells its share
  of the per-job figure apart (``--events-max-bytes 4096``: next to nothing).

Usage: ``python scripts/bench_job_memory.py [--jobs 1000000] [--rounds 1] [--beanstalk]
[--events-max-bytes N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# The script's own directory is on sys.path when it runs: the restart benchmark's helpers.
from bench_restart import DISQ_NODE, _ask_tcp, _bus_pair_port, _fill, _free_port

DISQUE = Path("/tmp/disque/src/disque-server")
BODY = b"x" * 100
SETTLE_S = 1.0  # after the last reply: a server's deferred work (event logs, timers) lands


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _addjob(_i: int) -> bytes:
    return b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$100\r\n" + BODY + b"\r\n$1\r\n0\r\n"


def _put(_i: int) -> bytes:
    return b"put 0 0 60 100\r\n" + BODY + b"\r\n"


def _measure(
    cmd: list[str],
    cwd: Path,
    ready: Callable[[], bool],
    port: int,
    request: Callable[[int], bytes],
    reply: bytes,
    jobs: int,
    stop: signal.Signals,
) -> tuple[int, int]:
    """(RSS once answering, RSS after ``jobs`` adds)."""
    errors = open(cwd / "server.err", "w+")
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        deadline = time.monotonic() + 60
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                errors.seek(0)
                raise RuntimeError(f"{cmd[0]} did not start: {errors.read()[-2000:]}")
            time.sleep(0.01)
        time.sleep(SETTLE_S)
        before = rss_bytes(proc.pid)
        _fill(port, request, reply, jobs)
        time.sleep(SETTLE_S)
        after = rss_bytes(proc.pid)
    finally:
        proc.send_signal(stop)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors.close()
    return before, after


def disq(tmp: Path, jobs: int, events_max_bytes: int | None, beanstalk: bool) -> tuple[int, int]:
    """``beanstalk``: the jobs are puts on the node's beanstalk port, not ADDJOBs."""
    port, bport = _bus_pair_port(), _free_port()
    conf = tmp / "node.conf"
    conf.write_text(
        f"port {port}\nbeanstalk-port {bport}\ndir {tmp}\nappendonly no\n"
        f"cluster-node-timeout 3000\nmetrics-port {_free_port()}\n"
    )
    cmd = [str(DISQ_NODE), str(conf)]
    if events_max_bytes is not None:
        cmd += ["--events-max-bytes", str(events_max_bytes)]
    return _measure(
        cmd,
        tmp,
        lambda: _ask_tcp(port, b"PING\r\n", b"\r\n") and _ask_tcp(bport, b"stats\r\n", b"\r\n"),
        bport if beanstalk else port,
        _put if beanstalk else _addjob,
        b"INSERTED" if beanstalk else b"+D-",
        jobs,
        signal.SIGINT,
    )


def disque(tmp: Path, jobs: int, binary: Path) -> tuple[int, int]:
    port = _bus_pair_port()
    conf = tmp / "disque.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {tmp}\nappendonly no\ncluster-node-timeout 5000\n"
    )
    return _measure(
        [str(binary), str(conf)],
        tmp,
        lambda: _ask_tcp(port, b"PING\r\n", b"\r\n"),
        port,
        _addjob,
        b"+D-",
        jobs,
        signal.SIGTERM,
    )


def beanstalkd(tmp: Path, jobs: int) -> tuple[int, int]:
    port = _free_port()
    return _measure(
        ["beanstalkd", "-l", "127.0.0.1", "-p", str(port)],
        tmp,
        lambda: _ask_tcp(port, b"stats\r\n", b"\r\n"),
        port,
        _put,
        b"INSERTED",
        jobs,
        signal.SIGTERM,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1, help="each server this many times")
    parser.add_argument("--disque", type=Path, default=DISQUE)
    parser.add_argument("--beanstalk", action="store_true", help="also disq's beanstalk door")
    parser.add_argument("--events-max-bytes", type=int, help="the disq nodes' event log bound")
    args = parser.parse_args()
    ev_bytes: int | None = args.events_max_bytes
    if shutil.which("beanstalkd") is None:
        print("beanstalkd not found (scripts/ensure_beanstalkd.sh installs it)", file=sys.stderr)
        return 1
    servers: list[tuple[str, Callable[[Path, int], tuple[int, int]]]] = [
        ("disq-node", lambda tmp, n: disq(tmp, n, ev_bytes, False))
    ]
    if args.disque.exists():
        binary = args.disque
        servers.append(("disque-server", lambda tmp, n: disque(tmp, n, binary)))
    else:
        print(f"{args.disque} not found: Disque skipped", flush=True)
    if args.beanstalk:
        servers.append(("disq beanstalk", lambda tmp, n: disq(tmp, n, ev_bytes, True)))
    servers.append(("beanstalkd", beanstalkd))
    for _ in range(args.rounds):
        for name, run in servers:  # interleaved: the machine's drift hits them alike
            with tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp:
                before, after = run(Path(tmp), args.jobs)
            print(
                f"{name:14s} {args.jobs:,} jobs: RSS {before / 2**20:7.1f} -> "
                f"{after / 2**20:7.1f} MiB, {after / args.jobs:6.0f} B/job after, "
                f"{(after - before) / args.jobs:6.0f} B/job added",
                flush=True,
            )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
