"""Install disq as a user does: the sdist and the wheel built by ``python -m build`` in a
fresh virtualenv with pip's defaults (build isolation on: the build environment holds only
``[build-system] requires``), the wheel installed with its ``[celery]`` extra in another
fresh virtualenv, outside the checkout. The compiled modules must be in the wheel and be the
ones that run, ``disq-node`` must answer on each client port, and kombu must find the
``disq://`` transport with no disq import. Then the sdist built where no C compiler is on
the PATH: a pure install that serves the same.

``make test`` builds in place in its own venv, without isolation, so only this test sees
what a user's ``pip install`` sees (a build requirement missing from pyproject.toml failed
every install outside ``make``: mypyc's type check could not find aiohttp).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import free_port
from eventually import eventually

pytestmark = pytest.mark.slow

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path
    log: str


def run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    r = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(argv)} exited with {r.returncode}:\n{out[-6000:]}"
    return out


def user_env(**extra: str) -> dict[str, str]:
    """This machine's environment without what the suite or make set for themselves."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DISQ_", "PYTHON", "PIP_", "VIRTUAL_ENV"))
    }
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    env.update(extra)
    return env


def checkout_copy(dest: Path) -> Path:
    """The files a clone holds (tracked, and new ones git does not ignore): no build output,
    no venv, no compiled modules of the in-place build."""
    if not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files of a clone are not known")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, listed):
        src = PROJECT_ROOT / os.fsdecode(rel)
        if not src.is_file():
            continue  # deleted in the work tree, not yet in git
        target = dest / os.fsdecode(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


def venv(path: Path) -> Path:
    run([sys.executable, "-m", "venv", str(path)], env=user_env())
    return path / "bin"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    base = tmp_path_factory.mktemp("install")
    src = checkout_copy(base / "src")
    frontend = venv(base / "frontend")
    run([str(frontend / "pip"), "install", "-q", "build"], env=user_env())
    log = run(
        [str(frontend / "python"), "-m", "build", "--outdir", str(base / "dist"), str(src)],
        env=user_env(),
        cwd=base,
    )
    (sdist,) = (base / "dist").glob("*.tar.gz")
    (wheel,) = (base / "dist").glob("*.whl")
    return Dist(sdist, wheel, log)


@pytest.fixture(scope="module")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = venv(tmp_path_factory.mktemp("user") / "venv")
    run([str(bin_dir / "pip"), "install", "-q", f"{dist.wheel}[celery]"], env=user_env())
    return bin_dir


def native_modules(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if n.endswith(".so")}


def test_the_wheel_holds_the_compiled_modules_and_no_test_code(dist: Dist) -> None:
    assert "compiling" in dist.log and "modules with mypyc" in dist.log
    names = native_modules(dist.wheel)
    assert any(n.startswith("disq__mypyc.") for n in names)  # the group's shared library
    assert any(n.startswith("disq/core/disque/core.") for n in names)  # a compiled module
    with zipfile.ZipFile(dist.wheel) as z:
        files = set(z.namelist())
    assert "disq/_native_build.json" in files
    assert "disq-kombu.pth" in files
    assert not [n for n in files if "mutants" in n]  # deliberate bugs stay with the tests
    assert not [n for n in files if n.startswith(("tests/", "bench/", "cluster/"))]


def test_the_installed_wheel_runs_compiled_and_serves_every_client_port(
    installed: Path, tmp_path: Path
) -> None:
    python = str(installed / "python")
    said = run(
        [python, "-I", "-c", "import disq._native as n; print(n.describe(), n.COMPILED_IN_USE)"],
        env=user_env(),
        cwd=tmp_path,
    )
    assert "compiled (mypyc)" in said and "True" in said, said
    serve_and_answer(installed, tmp_path, env=user_env())
    # kombu finds the transport through the .pth hook: no disq import in the app.
    said = run(
        [
            python,
            "-I",
            "-c",
            "import kombu; print(kombu.Connection('disq://127.0.0.1:1').transport_cls)",
        ],
        env=user_env(),
        cwd=tmp_path,
    )
    assert said.strip() == "disq", said
    # Celery finds the result backend through the package's entry point.
    said = run(
        [
            python,
            "-I",
            "-c",
            "from celery import Celery; "
            "print(type(Celery('a', backend='disq://127.0.0.1:1').backend).__name__)",
        ],
        env=user_env(),
        cwd=tmp_path,
    )
    assert said.strip() == "DisqBackend", said


def test_without_a_c_compiler_the_sdist_installs_pure_and_serves(
    dist: Dist, installed: Path, tmp_path: Path
) -> None:
    """No compiler on the PATH (the PATH holds the venv alone): setup.py says why, builds
    no extension, and the same node runs from the sources."""
    no_cc = user_env(PATH=str(installed))
    out = run(
        [str(installed / "pip"), "wheel", "--no-deps", "-w", str(tmp_path / "w"), str(dist.sdist)],
        env=no_cc,
        cwd=tmp_path,
    )
    (pure_wheel,) = (tmp_path / "w").glob("*.whl")
    assert not native_modules(pure_wheel), out
    run(
        [
            str(installed / "pip"),
            "install",
            "-q",
            "--force-reinstall",
            "--no-deps",
            str(pure_wheel),
        ],
        env=no_cc,
    )
    said = run(
        [str(installed / "python"), "-I", "-c", "import disq._native as n; print(n.describe())"],
        env=no_cc,
        cwd=tmp_path,
    )
    assert said.startswith("pure Python"), said
    serve_and_answer(installed, tmp_path, env=no_cc)


def serve_and_answer(bin_dir: Path, where: Path, *, env: dict[str, str]) -> None:
    """``disq-node`` from ``bin_dir`` (its own data dir, outside the checkout) answers a
    beanstalk put, a RESP PING and ADDJOB, and the SDK's Hello over gRPC."""
    ports = {"beanstalk": free_port(), "resp": free_port(), "grpc": free_port()}
    data = where / "data"
    with open(where / "node.log", "wb") as log:
        node = subprocess.Popen(
            [
                str(bin_dir / "disq-node"),
                "-l",
                "127.0.0.1",
                "-p",
                str(ports["beanstalk"]),
                "--resp-port",
                str(ports["resp"]),
                "--grpc-port",
                str(ports["grpc"]),
                "--data-dir",
                str(data),
            ],
            cwd=where,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert ask(ports["beanstalk"], b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED ")
        assert ask(ports["resp"], b"PING\r\n") == b"+PONG\r\n"
        reply = ask(ports["resp"], b"ADDJOB q hello 0 REPLICATE 1\r\n")
        assert reply.startswith(b"+D-") and len(reply) == 43, reply  # +<40-char id>\r\n
        connect(ports["grpc"]).close()  # served after RESP and beanstalk (README)
        said = run(
            [
                str(bin_dir / "python"),
                "-I",
                "-c",
                "import sys; from disq.client import Client\n"
                "with Client(sys.argv[1]) as c: print(c.hello().my_id)",
                f"127.0.0.1:{ports['grpc']}",
            ],
            env=env,
            cwd=where,
        )
        assert len(said.strip()) == 40, said
    finally:
        node.terminate()
        node.wait(30)


def ask(port: int, request: bytes) -> bytes:
    """One request, one reply, once the port accepts (the node is starting)."""
    with connect(port) as s:
        s.sendall(request)
        return s.recv(4096)


def connect(port: int) -> socket.socket:
    def attempt() -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            return None
        return s

    return eventually(attempt, f"port {port} accepts", timeout=60)
