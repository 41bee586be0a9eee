"""Time from spawning a server to its first accepted connection: disq-node vs beanstalkd.

Harnesses written for beanstalkd connect almost at once, so disq-node must listen within 0.1 s.
Usage: ``python scripts/bench_startup.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import socket
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for name, cmd in (
        ("disq-node", [str(ROOT / ".venv" / "bin" / "disq-node")]),
        ("beanstalkd", ["beanstalkd"]),
    ):
        times = [time_to_listen(cmd) for _ in range(args.runs)]
        shown = ", ".join(f"{t * 1000:.1f}" for t in times)
        print(f"{name:10s} spawn -> listening (ms): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
