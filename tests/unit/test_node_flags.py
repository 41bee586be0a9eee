"""disq.node_flags: beanstalkd's flags read without argparse, equal to argparse's reading."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cluster.nodeproc import run_node
from disq.node_flags import DEFAULTS, beanstalkd_args
from disq.node_main import build_parser

# Argvs the fast reader takes: its answer must be argparse's, attribute for attribute.
TAKEN = [
    [],
    ["-l", "127.0.0.1", "-p", "11300"],
    ["-l", "0.0.0.0", "-p", "0", "-b", "/tmp/x", "-f", "0"],
    ["-p", "11300", "-F", "-z", "64k", "-s", "10MB"],
    ["-V", "-V", "-l", "unix:/tmp/b.sock"],
    ["-p", "1", "-p", "2"],  # the last one wins, as in argparse
    ["-c", "-n", "-u", "nobody", "-v"],
    ["-z", " 1g", "-p", " 7 "],
]
# Argvs it leaves to argparse.
LEFT = [
    ["-p11300"],
    ["-VF"],
    ["--in-memory"],
    ["-p", "11300", "--resp-port", "7711"],
    ["-p"],
    ["-p", "-1"],
    ["-l", ""],
    ["-p", "x"],
    ["-z", "12q"],
    ["-h"],
    ["disque.conf"],
    ["-l", "127.0.0.1", "--join", "h:1"],
]


def test_its_defaults_are_argparses() -> None:
    assert DEFAULTS == vars(build_parser().parse_args([]))


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_a_plain_beanstalkd_argv_reads_as_argparse_reads_it(argv: list[str]) -> None:
    fast = beanstalkd_args(argv)
    assert fast is not None
    assert vars(fast) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", LEFT, ids=" ".join)
def test_any_other_argv_is_left_to_argparse(argv: list[str]) -> None:
    assert beanstalkd_args(argv) is None


def test_each_read_has_its_own_join_list() -> None:
    first = beanstalkd_args([])
    assert first is not None
    first.join.append(("h", 1))
    second = beanstalkd_args([])
    assert second is not None and second.join == [] and DEFAULTS["join"] == []


def test_a_beanstalkd_flags_start_never_imports_argparse() -> None:
    # Issue 31: argparse and gettext are ~3 ms of a harness's 0.1 s; main() with beanstalkd's
    # flags reads them itself. Stopped at the first heavy step: _run is replaced.
    code = textwrap.dedent(
        """
        import sys
        import disq.node_main as m
        m._run = lambda *a, **k: print(",".join(
            n for n in ("argparse", "gettext") if n in sys.modules)) or 0
        m.main(["-l", "127.0.0.1", "-p", "0"])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == ""


def test_a_bad_beanstalkd_value_still_gets_argparses_error() -> None:
    out = run_node("-p", "x", timeout=30)
    assert out.returncode == 2
    assert "argument -p: invalid int value: 'x'" in out.stderr
