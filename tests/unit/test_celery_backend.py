"""The Celery result backend's parts that need no cluster: how Celery finds it, its URL and
options, its keys and TTLs, and the idempotency key its chord callbacks are published with.
Against a real cluster: tests/integration/test_celery_results.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from disq.integrations import celery_backend
from disq.integrations.celery_backend import (
    MAX_TTL_S,
    DisqBackend,
    _fit,
    _key_chord_callbacks,
    backend_settings,
)
from disq.integrations.common import OptionError
from disq.integrations.kombu_messages import IDEMPOTENCY_PROPERTY, idempotency_key


def test_celery_finds_the_backend_by_its_url_scheme() -> None:
    """Through the ``celery.result_backends`` entry point of the installed package (a venv
    installed before the entry point was added needs ``make build``)."""
    from celery.app.backends import by_url

    cls, url = by_url("disq://127.0.0.1:7710,127.0.0.1:7720?replicate=2")
    assert cls is DisqBackend and url == "disq://127.0.0.1:7710,127.0.0.1:7720?replicate=2"
    app = Celery("t", broker="disq://127.0.0.1:7710", backend="disq://127.0.0.1:7710")
    assert isinstance(app.backend, DisqBackend)


def test_the_url_and_the_transport_options_are_the_brokers() -> None:
    s = backend_settings("disq://:pw@a:1,b?replicate=2&timeout_s=3", {"repl_timeout_ms": 900})
    assert s.addresses == ["a:1", "b:7710"]
    assert s.replicate == 2 and s.repl_timeout_ms == 900
    assert s.client_options == {"password": "pw", "timeout_s": 3.0}
    assert backend_settings(None).addresses == ["127.0.0.1:7710"]
    # Celery's own option and kombu's are not the backend's to refuse.
    backend_settings("disq://a", {"global_keyprefix": "x", "max_retries": 3})
    with pytest.raises(OptionError, match="unknown disq option 'nope'"):
        backend_settings("disq://a?nope=1")


def _backend(**conf: object) -> DisqBackend:
    app = Celery("t", backend="disq://:secret@127.0.0.1:7710,127.0.0.1:7720")
    app.conf.update(conf)
    backend = app.backend
    assert isinstance(backend, DisqBackend)
    return backend


def test_ttls_are_result_expires_in_whole_seconds() -> None:
    assert _backend().expires == 86400  # Celery's default, one day
    assert _backend(result_expires=timedelta(minutes=2)).expires == 120
    b = _backend(result_expires=0.5, result_failure_expires=7)
    assert b.expires == 1 and b.failure_expires == 7  # rounded up: never "no expiry"
    assert b._ttl_s(b.expires) == 1
    assert _backend(result_expires=None)._ttl_s(None) == MAX_TTL_S  # no expiry: the longest


def test_the_password_is_masked_in_the_uri_and_a_pickled_backend_keeps_its_url() -> None:
    import pickle

    b = _backend()
    assert pickle.loads(pickle.dumps(b)).url == b.url
    assert b.as_uri() == "disq://:**@127.0.0.1:7710,127.0.0.1:7720"
    assert b.as_uri(include_password=True) == "disq://:secret@127.0.0.1:7710,127.0.0.1:7720"


def test_final_and_other_states_have_keys_of_their_own() -> None:
    b = _backend()
    assert b.get_key_for_task("t1") == "celery-task-meta-t1"
    assert b.get_key_for_progress("t1") == "celery-task-progress-t1"
    prefixed = _backend(result_backend_transport_options={"global_keyprefix": "app1"})
    assert prefixed.get_key_for_task("t1") == "app1_celery-task-meta-t1"
    assert prefixed.get_key_for_progress("t1") == "app1_celery-task-progress-t1"


@pytest.mark.parametrize(
    "key", ["celery-task-meta-with space", "celery-task-meta-" + "x" * 300, "celery-task-meta-é"]
)
def test_a_key_the_nodes_would_refuse_is_keyed_by_its_digest(key: str) -> None:
    fitted = _fit(key)
    assert fitted.startswith("celery-task-meta-sha256:") and len(fitted) <= 255
    assert all(0x21 <= ord(c) <= 0x7E for c in fitted)
    assert _fit(key) == fitted  # the same key every time
    assert _fit("celery-task-meta-3f2a") == "celery-task-meta-3f2a"


def test_chord_callbacks_are_published_with_a_key_per_chord_and_task() -> None:
    props: dict[str, object] = {}
    _key_chord_callbacks(headers={"id": "cb-1"}, properties=props)
    assert props == {}  # not a chord's callback: no key
    token = celery_backend._CHORD_PUBLISH.set("g-1")
    try:
        _key_chord_callbacks(headers={"id": "cb-1"}, properties=props)
    finally:
        celery_backend._CHORD_PUBLISH.reset(token)
    assert props == {IDEMPOTENCY_PROPERTY: "chord:g-1:cb-1"}
    assert idempotency_key({"properties": props}) == "chord:g-1:cb-1"
    token = celery_backend._CHORD_PUBLISH.set("g-1")
    try:
        bare: dict[str, object] = {}
        _key_chord_callbacks(headers={}, properties=bare)  # task protocol 1: no id, no key
        assert bare == {}
    finally:
        celery_backend._CHORD_PUBLISH.reset(token)
    assert idempotency_key({"properties": {}}) is None
