"""Send the same byte stream to beanstalkd and to disq-node and show both replies.

Dev tool for byte-exactness: ``python scripts/wire_diff.py 'put 0 0 1 3\\r\\nabc\\r\\n' ...``.
Each argument is one send (escape sequences allowed); replies are read until quiet.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*cmd, "-l", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"{cmd} did not start")


def _talk(port: int, sends: list[bytes], quiet_s: float) -> bytes:
    s = socket.create_connection(("127.0.0.1", port))
    out = b""
    for data in sends:
        s.sendall(data)
        s.settimeout(quiet_s)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except TimeoutError:
            pass
    s.close()
    return out


def main() -> int:
    sends = [a.encode().decode("unicode_escape").encode("latin-1") for a in sys.argv[1:]]
    results = []
    for cmd in (["beanstalkd"], [sys.executable, "-m", "disq.node_main"]):
        port = _free_port()
        proc = _start(cmd, port)
        try:
            results.append(_talk(port, sends, 0.2))
        finally:
            proc.terminate()
            proc.wait()
    print("beanstalkd:", results[0])
    print("disq:      ", results[1])
    print("SAME" if results[0] == results[1] else "DIFFERENT")
    return 0 if results[0] == results[1] else 1


if __name__ == "__main__":
    sys.exit(main())
