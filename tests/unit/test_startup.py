"""disq-node must listen before it imports anything heavy (harnesses connect within 0.1 s)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_bind_happens_before_heavy_imports() -> None:
    # A fresh interpreter: import the entry module and bind, then list what got imported.
    code = textwrap.dedent(
        """
        import sys
        import disq.node_main as m
        sock = m._bind("127.0.0.1", 0)
        names = ("asyncio", "uvloop", "structlog", "sortedcontainers",
                 "disq.core.beanstalk.core", "disq.server.runtime")
        heavy = [n for n in names if n in sys.modules]
        print(",".join(heavy))
        sock.close()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == ""


def test_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "disq.node_main", "-v"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.startswith("disq-node ")
