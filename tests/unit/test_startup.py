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


def _imported_after(code: str, names: tuple[str, ...]) -> list[str]:
    probe = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import sys
        print(",".join(n for n in {names!r} if sys.modules.get(n) is not None))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return [n for n in out.stdout.strip().split(",") if n]


def test_the_serving_path_leaves_the_admin_port_and_slow_helpers_for_later() -> None:
    # What a node imports before its job ports serve (issue 23: a restarted node answers
    # within tens of milliseconds). The admin HTTP app (aiohttp builds TLS contexts at import,
    # prometheus-client, jinja2, the dashboard) loads in a thread once they serve; hashlib,
    # secrets and logging.handlers are not needed for a standalone node's first answer.
    deferred = ("aiohttp", "prometheus_client", "jinja2", "disq.server.admin_http", "rich")
    cluster = _imported_after(
        """
        import disq.node_main
        disq.node_main._without_rich()  # as the node's _run does first
        import disq.logging, disq.config
        import disq.server.runtime, disq.server.cluster_services
        """,
        deferred,
    )
    assert cluster == []
    standalone = _imported_after(
        """
        import disq.node_main
        disq.node_main._without_rich()
        import disq.logging
        import disq.server.runtime
        """,
        (*deferred, "hashlib", "secrets", "logging.handlers"),
    )
    assert standalone == []
