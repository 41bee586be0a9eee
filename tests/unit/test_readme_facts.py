"""README claims that are facts of the tree, the build or a default: checked where they live
(docs/readme-claims.md maps each README claim to its check)."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _target(makefile: str, name: str) -> tuple[list[str], str]:
    """A make target's prerequisites and its recipe."""
    m = re.search(rf"^{re.escape(name)}:([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, re.M)
    assert m, f"no target {name} in the Makefile"
    return m.group(1).split(), m.group(2)


def test_make_run_and_make_test_do_what_the_readme_says() -> None:
    """The README's "The two commands": both build the compiled modules in a venv they
    create; run starts a node with no argument (the embedded defaults, which
    tests/integration/test_readme.py::test_readme_make_run_serves_the_embedded_defaults
    checks); test lints, type-checks, runs every test against the compiled build, the unit
    tests that are not slow against the sources, and the wire tests against beanstalkd, as
    CI does."""
    makefile = (ROOT / "Makefile").read_text()
    deps, recipe = _target(makefile, "run")
    assert deps == ["$(COMPILED)"] and recipe.strip() == "$(BIN)/disq-node"
    deps, recipe = _target(makefile, "test")
    assert deps == ["$(COMPILED)", "lint", "typecheck"]
    recipe = re.sub(r"\\\n\s*", " ", recipe)  # continued lines as one
    assert re.search(r"pytest .*\btests$", recipe, re.M)  # the whole suite, compiled
    pure_unit = r"^\tDISQ_PURE=1 .*\$\(BIN\)/pytest .*-m \"not slow\" tests/unit$"
    assert re.search(pure_unit, recipe, re.M)
    assert "DISQ_TEST_SERVER=beanstalkd" in recipe
    # "Java 17 for Spark and Debian's Chromium for the dashboard's browser tests too"
    assert "scripts/ensure_java.sh" in recipe and "scripts/ensure_chromium.sh" in recipe
    _, lint = _target(makefile, "lint")
    assert "ruff check" in lint and "lint-imports" in lint
    _, typecheck = _target(makefile, "typecheck")
    assert "mypy" in typecheck
    deps, recipe = _target(makefile, "$(STAMP)")
    assert "-m venv $(VENV)" in recipe and "pip install" in recipe
    deps, recipe = _target(makefile, "$(COMPILED)")
    assert "scripts/ensure_compiler.sh" in recipe and "build_ext --inplace" in recipe
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()[-1]


def test_the_option_table_defaults_are_the_settings_defaults() -> None:
    """The Celery/Dramatiq option table's defaults column, against the settings a URL with
    no option gives; where the table defers to the node (RETRY, TTL), the node's defaults:
    TTL 1 day, RETRY min(TTL/10, 300 s)."""
    from disq.integrations.common import parse_url, settings
    from disq.testing.mesh import Mesh

    addrs, raw = parse_url("disq://10.0.0.1:7710,10.0.0.2:7710")
    s = settings(addrs, raw)
    assert s.retry_s is None and s.ttl_s is None  # the node's
    assert s.replicate is None  # the majority, per add (test_integration_options checks it)
    assert (s.async_, s.repl_timeout_ms) == (False, 5000)
    assert s.priority_steps == (0, 3, 6, 9)
    assert s.max_message_bytes == 16 << 20
    assert s.publish_over == "resp"
    assert s.transient_lease_s == 60
    assert s.add_options() == {"repl_timeout_ms": 5000}  # nothing else sent: the node decides

    from disq.core.disque.api import AddOptions

    mesh = Mesh(1)
    core = mesh.disque(0)
    plain = core.jobs[core.add_job(mesh.now, 1, "q", b"x", AddOptions(timeout_ms=0))]
    assert (plain.retry_s, plain.etime_ms - mesh.now) == (300, 86_400_000)
    short = core.jobs[core.add_job(mesh.now, 2, "q", b"x", AddOptions(timeout_ms=0, ttl_s=600))]
    assert short.retry_s == 60


def test_the_node_timeout_defaults_to_15_s() -> None:
    """In flag mode; a config file's `cluster-node-timeout` default is
    tests/unit/test_config_file.py::test_defaults's."""
    from disq.node_main import build_parser

    assert build_parser().parse_args([]).node_timeout_ms == 15_000


def test_the_event_log_bound_defaults_to_256_mib_on_disk(tmp_path: Path) -> None:
    """256 MiB on disk, 32 MiB for a node that keeps its events in memory."""
    from disq.persistence.event_log import EventLog

    assert EventLog(tmp_path / "events").max_bytes == 256 << 20
    assert EventLog(None).max_bytes == 32 << 20
    assert EventLog(None, max_bytes=64_000_000).max_bytes == 64_000_000


def test_the_layout_s_pure_layers_are_import_contracts() -> None:
    """The Layout's "disq/core pure state machines, disq/protocol sans-IO codecs, disq/doors
    sans-IO doors": import-linter's contract (run by `make lint`) forbids them every IO module."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [pure] = [c for c in config["contracts"] if c["id"] == "pure-cores"]
    assert pure["type"] == "forbidden"
    assert set(pure["source_modules"]) == {"disq.core", "disq.protocol", "disq.doors"}
    assert {"asyncio", "socket", "os", "grpc", "disq.server"} <= set(pure["forbidden_modules"])


PATH = re.compile(
    r"(?<![\w/.:$-])((?:disq|tests|scripts|docs|k8s|cluster|proto|bench)/(?:[\w./-]*\w)?"
    r"|[A-Z][\w-]*\.md|Containerfile|setup\.py)"
)


def _named_paths(text: str) -> set[str]:
    return {p.rstrip("/") for p in PATH.findall(text)}


def _layout() -> str:
    [section] = re.findall(r"^## Layout\n(.*?)(?=^## )", README, re.M | re.S)
    return section


def _layout_scripts() -> list[str]:
    """The files the Layout names after `scripts/`, by name (`ensure_*.sh` a pattern)."""
    after = _layout().split("`scripts/`", 1)[1]
    return re.findall(r"`([\w*]+\.(?:sh|py))`", after)


def test_every_path_the_readme_names_exists() -> None:
    named = _named_paths(README)
    # The Layout names the files it keeps in scripts/ by name, after `scripts/`.
    named |= {f"scripts/{name}" for name in _layout_scripts() if "*" not in name}
    assert {"disq/core", "bench", "scripts/gen_proto.sh", "k8s/statefulset.yaml"} <= named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"README names paths that do not exist: {missing}"


def test_scripts_holds_what_the_layout_says_and_nothing_else() -> None:
    """The Layout's "scripts/ keeps the installers (ensure_*.sh), gen_proto.sh, tree_state.sh
    and the runners of third-party test suites": every name (or pattern) it gives matches a
    file there, and every file there matches one of them (benchmarks and probes are bench/'s)."""
    patterns = _layout_scripts()
    assert {"ensure_*.sh", "gen_proto.sh", "tree_state.sh", "run_disque_suite.sh"} <= set(patterns)
    files = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())
    unmatched = [pat for pat in patterns if not fnmatch.filter(files, pat)]
    assert not unmatched, f"the Layout names scripts that do not exist: {unmatched}"
    unnamed = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not unnamed, f"scripts/ holds files the Layout does not name: {unnamed}"


def test_the_layout_names_every_bench_subcommand_and_no_other() -> None:
    """The Layout's ``python -m bench a|b|...`` is the harness's own list of subcommands."""
    from bench.__main__ import SUBCOMMANDS

    [listed] = re.findall(r"`python -m bench\s+([\w|]+)`", _layout())
    assert sorted(listed.split("|")) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("`disq/spark/analytics.py` and ARCHITECTURE.md", {"disq/spark/analytics.py"}),
        ("disq://10.0.0.1:7710 /var/lib/disq /tmp/disq-events", set()),
        ("(`scripts/ensure_compiler.sh`); k8s/ is", {"scripts/ensure_compiler.sh", "k8s"}),
        ("`bench/` holds, `python -m bench cluster|beanstalk`", {"bench"}),
    ],
)
def test_the_path_pattern_finds_repository_paths_only(text: str, paths: set[str]) -> None:
    assert _named_paths(text) - {"ARCHITECTURE.md"} == paths


def test_the_package_its_extras_and_commands_are_the_readme_s() -> None:
    """`pip install 'disq-server[celery]'` (or `[dramatiq]`, `[spark]`), `disq-node`, `disq`;
    "mypy is a build requirement" (setup.py compiles with mypyc, which is mypy's)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["name"] == "disq-server"
    assert {"celery", "dramatiq", "spark", "otel"} <= set(project["optional-dependencies"])
    assert project["scripts"] == {"disq-node": "disq.node_main:main", "disq": "disq.cli:main"}
    assert any(r.startswith("mypy") for r in pyproject["build-system"]["requires"])


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"DISQ_PURE": "1"}, "DISQ_PURE is set"),
        ({"CC": "/nonexistent/cc"}, "no C compiler (/nonexistent/cc not found)"),
    ],
)
def test_a_build_with_disq_pure_or_without_a_compiler_is_pure(
    tmp_path: Path, env: dict[str, str], reason: str
) -> None:
    """The README: "DISQ_PURE=1 at install or build time gives a pure Python install, and so
    does a machine without a C compiler": setup.py's build says so and compiles nothing (into
    a scratch directory: the tree's own build is left alone)."""
    base = {k: v for k, v in os.environ.items() if k not in ("DISQ_PURE", "CC")}
    build = ["build_ext", "--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", *build],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"pure Python install (no compiled modules): {reason}" in out.stderr
    assert not list(tmp_path.rglob("*.so"))


def test_celery_keeps_mingle_and_gossip_off_on_disq() -> None:
    """The README: "Mingle and gossip stay off: Celery runs them only on the transports it lists": a
    worker's two steps ask the app's transport, and a disq:// broker is not on their lists
    (redis:// is, the control)."""
    from celery import Celery
    from celery.worker.consumer.gossip import Gossip
    from celery.worker.consumer.mingle import Mingle

    disq_app = Celery("readme", broker="disq://127.0.0.1:1", set_as_current=False)
    redis_app = Celery("control", broker="redis://127.0.0.1:1", set_as_current=False)
    for step in (Mingle, Gossip):
        unbound = object.__new__(step)  # compatible_transport reads nothing of the step
        assert not step.compatible_transport(unbound, disq_app)
        assert step.compatible_transport(unbound, redis_app)


def test_the_roll_the_readme_describes_is_the_manifest_s() -> None:
    """The README's "kubectl rollout restart statefulset/disq restarts one pod at a time,
    highest ordinal first, each after the previous one is ready": what Kubernetes does for a
    StatefulSet whose update strategy is RollingUpdate with no partition and no
    maxUnavailable over 1 (podManagementPolicy Parallel changes scaling only, not updates)."""
    import yaml

    docs = [d for d in yaml.safe_load_all((ROOT / "k8s" / "statefulset.yaml").read_text()) if d]
    [sts] = [d for d in docs if d["kind"] == "StatefulSet"]
    strategy = sts["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    rolling = strategy.get("rollingUpdate", {})
    assert rolling.get("partition", 0) == 0 and rolling.get("maxUnavailable", 1) == 1


def test_every_section_the_readme_cites_exists() -> None:
    """`(docs/benchmarks.md, "Start at the floor")`, `(ARCHITECTURE.md, "A dead holder's
    jobs")`: the cited document has a heading, or a bold entry, that starts with the cited
    words."""
    text = " ".join(README.split())
    cited = re.findall(r"((?:docs/[\w-]+|ARCHITECTURE)\.md), \"([^\"]+)\"", text)
    assert ("ARCHITECTURE.md", "A dead holder's jobs") in cited and len(cited) >= 4
    missing = []
    for doc, section in cited:
        lines = (ROOT / doc).read_text().splitlines()
        titles = [ln.lstrip("#").strip() for ln in lines if ln.startswith("#")]
        titles += [ln.split("**")[1] for ln in lines if ln.lstrip("- ").startswith("**")]
        if not any(t.startswith(section) for t in titles):
            missing.append(f"{doc}: {section!r}")
    assert not missing, f"README cites sections that do not exist: {missing}"


def test_the_docs_name_no_issue_numbers() -> None:
    """README.md, ARCHITECTURE.md and docs/ describe the code as it is: a decision keeps its
    reason, not the issue it came from (history is in git). docs/benchmarks.md, a record of
    measurements, is left out."""
    docs = [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    docs += [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "benchmarks.md"]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in docs
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"issue ?#?[0-9]", line, re.I)
    ]
    assert not found, "\n".join(found)


class _NobodysGather:
    """A node with one queue, read in the process; counts the reads."""

    def __init__(self) -> None:
        self.me = type("Me", (), {"short": "aaaaaaaa", "is_self": True})()
        self.reads = 0

    def local_node(self) -> object:
        return self.me

    def reachable(self) -> list[object]:
        return [self.me]

    def local_queues(self, cap: int) -> tuple[list[dict[str, object]], int]:
        self.reads += 1
        q = {"name": "q", "len": 1, "blocked": 0, "pause": "none", "jobs_in": 1, "jobs_out": 0}
        return [{**q, "oldest_s": 0.0}], 1

    def tubes(self) -> list[dict[str, object]]:
        return []


def test_the_dashboard_samples_only_while_someone_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's "it samples only while someone looks": no sampling until a page wants
    it; sampling while wanted; none once the last viewer has been gone for the idle time."""
    import asyncio
    import time

    from disq.dashboard import sampler

    monkeypatch.setattr(sampler, "IDLE_STOP_S", 0.5)

    async def run() -> None:
        gather = _NobodysGather()
        s = sampler.Sampler(gather, interval_s=0.05)  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        assert not s.running and gather.reads == 0  # nobody looked
        s.want()
        assert await s.wait_next(10.0) and s.running and gather.reads >= 1
        deadline = time.monotonic() + 10.0
        while s.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not s.running  # the viewer left: it stopped
        reads = gather.reads
        await asyncio.sleep(0.2)
        assert gather.reads == reads
        await s.close()

    asyncio.run(run())
