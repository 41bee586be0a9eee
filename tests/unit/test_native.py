"""The compiled build (mypyc, disq/_native.py): it loads when built, the stale guard refuses an
edited tree, DISQ_PURE runs the sources, and a node started as a subprocess gets what the
test process got.

``make test`` runs the whole suite with DISQ_EXPECT_COMPILED=1: then
:func:`test_the_compiled_modules_loaded` fails unless the compiled modules are the ones in use.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import disq.core.disque.core
import disq.doors.resp_door
import disq.persistence.framing
import disq.protocol.resp
from disq import _native

EXT = importlib.machinery.EXTENSION_SUFFIXES[0]
EXPECT_COMPILED = os.environ.get("DISQ_EXPECT_COMPILED", "") not in ("", "0")
PURE = os.environ.get("DISQ_PURE", "") not in ("", "0")
ROOT = Path(_native.__file__).resolve().parent.parent  # the directory holding disq/
BUILT = (ROOT / (_native.LIB_NAME + EXT)).exists()
HOT = [disq.core.disque.core, disq.doors.resp_door, disq.protocol.resp, disq.persistence.framing]

PROBE = (
    "import disq._native as n, disq.core.disque.core as c; "
    "print(n.STATE, c.__file__.endswith('.py'))"
)


def _run(
    code: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISQ_PURE", "DISQ_EXPECT_COMPILED")}
    env.update(extra)
    return env


@pytest.mark.skipif(not EXPECT_COMPILED, reason="DISQ_EXPECT_COMPILED is not set")
def test_the_compiled_modules_loaded() -> None:
    assert _native.COMPILED_IN_USE, _native.describe()
    for mod in HOT:
        assert mod.__file__ is not None and mod.__file__.endswith(EXT), mod.__file__
    assert len(_native.compiled_modules()) >= 50
    # A node the integration tests start is a new interpreter with this environment.
    r = _run(PROBE, _env())
    assert r.stdout.split() == ["compiled", "False"], r.stdout + r.stderr


def test_what_runs_matches_the_decision() -> None:
    for mod in HOT:
        assert mod.__file__ is not None
        assert mod.__file__.endswith(EXT) == _native.COMPILED_IN_USE
    if PURE:
        assert _native.STATE == "disabled" and not _native.COMPILED_IN_USE


@pytest.mark.skipif(not BUILT, reason="no compiled build here")
def test_disq_pure_runs_the_sources() -> None:
    r = _run(PROBE, _env(DISQ_PURE="1"))
    assert r.stdout.split() == ["disabled", "True"], r.stdout + r.stderr


@pytest.mark.skipif(not BUILT, reason="no compiled build here")
def test_an_edited_source_is_not_shadowed_by_its_stale_extension(tmp_path: Path) -> None:
    # A copy of the built tree; one compiled module edited after the build.
    shutil.copytree(ROOT / "disq", tmp_path / "disq", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / (_native.LIB_NAME + EXT), tmp_path)
    edited = tmp_path / "disq" / "core" / "ids.py"
    edited.write_text(edited.read_text() + "\nEDITED = True\n")
    # Older than its extension (edited while the build ran, or copied keeping times): the
    # digest, not the time, tells it from the compiled one.
    ext_time = next((tmp_path / "disq" / "core").glob("ids*" + EXT)).stat().st_mtime
    os.utime(edited, (ext_time - 3600, ext_time - 3600))
    code = PROBE + "; import disq.core.ids as i; print(i.EDITED)"
    r = _run(code, _env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert r.stdout.split() == ["stale", "True", "True"], r.stdout + r.stderr
    assert "compiled modules not used" in r.stderr and "disq.core.ids" in r.stderr
    # Touched but unchanged (a checkout, a wheel's file times): its digest matches the build's.
    edited.write_text(edited.read_text().replace("\nEDITED = True\n", ""))
    os.utime(edited, (edited.stat().st_atime + 5, edited.stat().st_mtime + 5))
    r = _run(PROBE, _env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert r.stdout.split() == ["compiled", "False"], r.stdout + r.stderr
    # A module missing its extension (added to the list, not built yet): all or nothing.
    next((tmp_path / "disq" / "protocol").glob("beanstalk*" + EXT)).unlink()
    r = _run(PROBE, _env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert r.stdout.split() == ["stale", "True"], r.stdout + r.stderr
