"""disq-node must listen before it imports anything heavy (harnesses connect within 0.1 s)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

from cluster.nodeproc import run_node


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


def test_the_port_is_bound_before_typing_json_or_ast_load() -> None:
    # Issue 31: beanstalkd harnesses connect 0.1 s after spawning the server; what runs
    # before the bind (the package, its compiled-build check, the flags) stays off typing
    # (asyncio imports it after), and the build manifest is read without json or ast.
    code = textwrap.dedent(
        """
        import sys
        import disq.node_main as m
        m.build_parser().parse_args(["-l", "127.0.0.1", "-p", "0"])
        sock = m._bind("127.0.0.1", 0)
        print(",".join(n for n in ("typing", "json", "ast", "pathlib") if n in sys.modules))
        sock.close()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == ""


def test_the_build_manifest_reader_reads_what_setup_writes(tmp_path: Path) -> None:
    from disq import _native

    manifest = {"disq.core": "00000000-0", "disq.core.node_core": "c2c05de6-33831"}
    path = tmp_path / _native.MANIFEST
    path.write_text(json.dumps(manifest, indent=0, sort_keys=True))  # as setup.py writes it
    root = _native._ROOT
    try:
        _native._ROOT = str(tmp_path)
        assert _native._read_manifest() == manifest
        path.write_text('{"disq.core": 1}')  # not setup.py's: every module stale
        assert _native._read_manifest() == {"": ""}
        path.unlink()
        assert _native._read_manifest() == {"": ""}
    finally:
        _native._ROOT = root


def test_version_flag() -> None:
    out = run_node("-v", timeout=30)
    assert out.returncode == 0, out.stderr
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
    deferred += ("structlog",)  # loads in a thread once the ports serve (disq/logging.py)
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
        (*deferred, "hashlib", "secrets", "logging.handlers", "zoneinfo", "shutil"),
    )
    assert standalone == []


def test_a_standalone_node_loads_no_cluster_module_before_it_serves() -> None:
    # Issue 31: a node started with beanstalkd's flags (no RESP door, no bus) builds its
    # runtime and node core without the peer messages, the scheduler, the routes table or
    # the gRPC modules (disq/core/node_cluster.py), and without pathlib (memory only).
    cluster_modules = (
        "disq.core.messages",
        "disq.core.node_cluster",
        "disq.core.schedule.scheduler",
        "disq.core.routes.table",
        "disq.core.disque.core",
        "disq.server.cluster_services",
        "grpc",
        "google.protobuf",
        "pathlib",
        # nor the helpers a start only needs later: dataclasses (with inspect), argparse
        "dataclasses",
        "argparse",
    )
    loaded = _imported_after(
        """
        import asyncio
        import disq.node_main
        disq.node_main._without_rich()
        from disq.core.beanstalk.core import Limits
        from disq.server.node_config import NodeConfig
        from disq.server.runtime import NodeRuntime
        loop = asyncio.new_event_loop()
        node = NodeRuntime(NodeConfig(data_dir=None, limits=Limits()), loop)
        rd = node.core.ready(node.now_ms())
        node.core.advance()
        node.core.tick(node.now_ms())
        loop.close()
        """,
        cluster_modules,
    )
    assert loaded == []


def _run(code: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Run ``code`` in a fresh interpreter after a node's logging start (structlog deferred,
    JSON lines to a log file, ``dl`` the module); the lines the file holds at its end."""
    log = tmp_path / "node.log"
    prelude = "import sys\nfrom disq import logging as dl\ndl.defer()\n"
    prelude += "dl.configure_logging(logfile=sys.argv[1])\n"
    script = prelude + textwrap.dedent(code)
    subprocess.run([sys.executable, "-c", script, str(log)], check=True, timeout=60)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_json_lines_before_structlog_loads_are_written_at_once_as_structlog_would(
    tmp_path: Path,
) -> None:
    lines = _run(
        """
        log = dl.get_logger("disq.test").bind(node="n1")
        log.info("first", n=1, path=sys)  # a value json cannot encode: its repr
        dl.get_logger("disq.other").warning("second")
        log.debug("filtered")  # below the level in force: never written
        dl.set_level("warning")  # CONFIG SET loglevel before structlog loads
        log.info("dropped")
        dl.set_level("notice")
        assert "structlog" not in sys.modules
        early = open(sys.argv[1]).read().splitlines()
        assert [l.split('"event": ')[1].split(",")[0] for l in early] == ['"first"', '"second"']
        dl.load()
        assert "structlog" in sys.modules
        log.info("third", n=3, path=sys)
        """,
        tmp_path,
    )
    assert [line["event"] for line in lines] == ["first", "second", "third"]
    assert lines[0]["node"] == "n1" and lines[0]["n"] == 1 and lines[0]["level"] == "info"
    assert lines[1]["level"] == "warning" and "node" not in lines[1]
    # The same shape before and after structlog: keys in the same order, the same renderings.
    assert list(lines[0]) == list(lines[2]) == ["node", "n", "path", "event", "level", "timestamp"]
    assert lines[0]["path"] == lines[2]["path"] == "<module 'sys' (built-in)>"
    stamps = [datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")) for line in lines]
    assert stamps == sorted(stamps) and all(line["timestamp"].endswith("Z") for line in lines)


def test_console_lines_are_kept_until_structlog_loads_with_the_times_they_were_logged() -> None:
    code = textwrap.dedent(
        """
        import sys, time
        from disq import logging as dl
        dl.defer()
        dl.configure_logging()  # stderr, a terminal here
        dl.get_logger("disq.test").info("first", n=1)
        print("structlog" in sys.modules, time.time(), flush=True)
        dl.load()
        dl.get_logger("disq.test").info("second")
        """
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=slave, text=True
    )
    os.close(slave)
    console = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        console += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    imported, loaded_at = out.split()
    assert imported == "False"
    lines = console.decode().splitlines()
    assert [line.split("] ")[1].split()[0] for line in lines] == ["first", "second"], lines
    assert "n=1" in lines[0]
    # A kept line carries the time it was logged at, not the time it was written.
    first = datetime.fromisoformat(lines[0].split()[0].replace("Z", "+00:00"))
    assert first.timestamp() < float(loaded_at)


def test_an_exception_loads_structlog_for_its_traceback(
    tmp_path: Path,
) -> None:
    lines = _run(
        """
        log = dl.get_logger("disq.test")
        log.info("before")
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("failed")  # its traceback is now's: structlog loads for it
        log.info("after")
        """,
        tmp_path,
    )
    assert [line["event"] for line in lines] == ["before", "failed", "after"]
    assert "ZeroDivisionError" in lines[1]["exception"]


def test_a_kept_exception_logged_later_carries_its_class_and_traceback(
    tmp_path: Path,
) -> None:
    """What the runtime logs of an input the core contained (core_input_failed): the
    exception was caught in the core and is logged after the Ready was applied, outside its
    except block; the line still has its traceback, down to the raising frame."""
    lines = _run(
        """
        log = dl.get_logger("disq.test")
        def core_input():
            return {}["missing"]
        try:
            core_input()
        except KeyError as exc:
            kept = exc
        log.error("core_input_failed", error_class=type(kept).__qualname__, exc_info=kept)
        """,
        tmp_path,
    )
    (line,) = lines
    assert line["error_class"] == "KeyError"
    assert "Traceback" in line["exception"] and "in core_input" in line["exception"]


def test_early_json_lines_are_json_dumps_byte_for_byte() -> None:
    """The early writer's fast path (strings, ints, bools, None, lists of strings through
    json's C string encoder) and its fallback give exactly json.dumps(line, default=repr)."""
    from disq.logging import _json_line

    lines: list[dict[str, Any]] = [
        {},
        {"event": "open_files_limit", "soft": 524288, "hard": -1, "was": 1024, "wanted": 11024},
        {"q": 'quote " back\\slash \n\t\x00 \x7f é 测试 \U0001f600', "n": None, "t": True},
        {"f": False, "big": 10**30, "neg": -7, "empty": ""},
        {"float": 1.5, "s": "x"},  # a float: the fallback
        {"path": sys, "n": 1},  # json cannot encode it: its repr
        {"nested": {"a": [1, 2]}, "b": (1, "2")},
        {"surrogate": "\ud800"},
        {"addresses": ["('127.0.0.1', 11300)", 'a"b'], "tls_addresses": [], "t": ("x",)},
        {"mixed": ["a", 1]},  # not all strings: the fallback
    ]
    for line in lines:
        assert _json_line(line) == json.dumps(line, default=repr), line
