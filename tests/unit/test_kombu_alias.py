"""kombu finds `disq://` with no import in the app: the .pth hook (disq_kombu_alias.py),
checked in a fresh interpreter of this environment (the editable install `make` does), and
in what a wheel is built from (setup.py's build_py output). Plus the URL, option and ETA
parsing both integrations share."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from disq.integrations.common import OptionError, parse_url, settings
from disq.integrations.kombu_messages import eta_delay_ms, message_ttl_s

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str, cwd: Path) -> str:
    """Run ``code`` in a new interpreter of this venv, outside the checkout (so nothing is
    found through the current directory) and with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_kombu_resolves_disq_urls_without_any_import_of_disq(tmp_path: Path) -> None:
    out = _fresh(
        "import sys\n"
        "import kombu\n"
        "before = 'disq' in sys.modules\n"
        "c = kombu.Connection('disq://127.0.0.1:1,127.0.0.1:2')\n"
        "print(before, c.transport_cls, type(c.transport).__module__)\n",
        tmp_path,
    )
    assert out == "False disq disq.integrations.kombu_transport"


def test_an_interpreter_that_never_uses_kombu_does_not_import_it(tmp_path: Path) -> None:
    out = _fresh(
        "import sys\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kombu', 'disq')), "
        "'disq_kombu_alias' in sys.modules)\n",
        tmp_path,
    )
    assert out == "[] True"  # the hook is loaded, waiting for kombu.transport
    # And the hook imports nothing (not even typing): in an interpreter without site, the
    # modules after its import are those before plus itself.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; before = set(sys.modules); sys.path.insert(0, {str(ROOT)!r}); "
            "import disq_kombu_alias; print(sorted(set(sys.modules) - before))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert r.stdout.strip() == "['disq_kombu_alias']"


def test_the_hook_registers_when_kombu_transport_was_imported_first(tmp_path: Path) -> None:
    out = _fresh(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, '__name__', '') != '_Finder']\n"
        "import kombu.transport as t\n"
        "t.TRANSPORT_ALIASES.pop('disq', None)\n"
        "import disq_kombu_alias\n"
        "disq_kombu_alias.install()\n"
        "print(t.TRANSPORT_ALIASES['disq'])\n",
        tmp_path,
    )
    assert out == "disq.integrations.kombu_transport:Transport"


def test_a_wheel_build_puts_the_pth_and_the_hook_at_the_root_of_site_packages(
    tmp_path: Path,
) -> None:
    # bdist_wheel packs build_py's output as the wheel's root (purelib: site-packages).
    env = dict(os.environ, DISQ_PURE="1")
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (tmp_path / "disq-kombu.pth").read_text() == "import disq_kombu_alias\n"
    assert (tmp_path / "disq_kombu_alias.py").is_file()
    assert (tmp_path / "disq" / "integrations" / "kombu_transport.py").is_file()


def test_url_with_nodes_password_and_options() -> None:
    addrs, raw = parse_url("disq://:s3cret@n1:7710,n2,[::1]:7720?replicate=2&retry_s=30")
    assert addrs == ["n1:7710", "n2:7710", "[::1]:7720"]
    s = settings(addrs, {**raw, "ttl_s": "3600", "async": "yes"})
    assert s.client_options == {"password": "s3cret"}
    assert (s.replicate, s.retry_s, s.ttl_s, s.async_) == (2, 30, 3600, True)
    assert s.add_options() == {
        "repl_timeout_ms": 5000,
        "replicate": 2,
        "retry_s": 30,
        "async_": True,
        "ttl_s": 3600,
    }
    # A delayed job lives its TTL after its delay (Disque refuses DELAY >= TTL).
    assert s.add_options(delay_ms=7_200_000)["ttl_s"] == 3600 + 7200
    assert s.add_options(delay_ms=1500)["ttl_s"] == 3600 + 2  # whole seconds, rounded up
    assert settings(addrs, {"visibility_timeout": 60}).retry_s == 60


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("redis://h:1", {}, "not a disq URL"),
        ("disq://h:99999", {}, "bad port"),
        ("disq://h:1/vhost", {}, "no path"),
        ("disq://", {}, "at least one node"),
        ("disq://h:1", {"replicate": "two"}, "replicate: expected int"),
        ("disq://h:1", {"replicate": 0}, "replicate: at least 1"),
        ("disq://h:1", {"retry_s": -1}, "must not be negative"),
        ("disq://h:1", {"colour": "red"}, "unknown disq option 'colour'"),
    ],
)
def test_bad_urls_and_options_are_refused_clearly(url: str, options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        addrs, raw = parse_url(url)
        settings(addrs, {**raw, **options})


def test_eta_header_becomes_milliseconds_of_delay_rounded_up() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    eta = (now + timedelta(seconds=2.2)).isoformat()
    assert eta_delay_ms({"eta": eta}, now.timestamp()) == 2200
    eta = (now + timedelta(microseconds=300_400)).isoformat()
    assert eta_delay_ms({"eta": eta}, now.timestamp()) == 301  # never early
    assert eta_delay_ms({"eta": (now + timedelta(seconds=3)).isoformat()}, now.timestamp()) == 3000
    assert eta_delay_ms({"eta": (now - timedelta(seconds=5)).isoformat()}, now.timestamp()) == 0
    assert eta_delay_ms({"eta": None}, now.timestamp()) == 0
    assert eta_delay_ms({}, now.timestamp()) == 0
    naive = (now + timedelta(seconds=10)).replace(tzinfo=None).isoformat()
    assert eta_delay_ms({"eta": naive}, now.timestamp()) == 10_000


def test_expiration_is_the_ttl_except_for_a_celery_tasks_expires() -> None:
    """kombu's expiration (ms) is the job's TTL, whole seconds rounded up; a Celery task's
    (its ``expires`` header) is not: the worker must receive it to revoke it."""
    assert message_ttl_s({"properties": {"expiration": "1500"}, "headers": {}}) == 2
    assert message_ttl_s({"properties": {}, "headers": {}}) is None
    task = {"task": "capp.add", "id": "t1", "expires": "2026-01-01T00:00:01+00:00"}
    assert message_ttl_s({"properties": {"expiration": "1000"}, "headers": task}) is None
    # A Celery task without expires, or another message with a "task" header: as before.
    no_expires = {"task": "capp.add", "id": "t1", "expires": None}
    assert message_ttl_s({"properties": {"expiration": "1000"}, "headers": no_expires}) == 1
