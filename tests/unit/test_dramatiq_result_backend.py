"""disq.integrations.dramatiq_results without a node: what the backend asks of the RESP calls
(the TTL, REPLICATE, one wait and no polling), the errors Dramatiq's callers expect, the keys
it builds and the options it takes. The cluster round trips are
tests/integration/test_dramatiq_results.py."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest
from dramatiq.results import ResultFailure, ResultMissing, ResultTimeout

from disq.integrations.common import OptionError
from disq.integrations.dramatiq import DisqBroker
from disq.integrations.dramatiq_results import DisqResultBackend, valid_key


class FakeCalls:
    """RespCalls' result methods on a dict, every call recorded."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}
        self.sets: list[tuple[str, bytes, dict[str, Any]]] = []
        self.reads: list[tuple[str, float | None]] = []

    def set_result(self, key: str, value: bytes, **options: Any) -> None:
        self.sets.append((key, value, options))
        self.kept[key] = value

    def result(self, key: str, timeout_s: float | None = 0.0) -> bytes | None:
        self.reads.append((key, timeout_s))
        return self.kept.get(key)


class FakeClient:
    def __init__(self, size: int) -> None:
        self.size = size
        self.hellos = 0

    def hello(self) -> None:
        self.hellos += 1

    def cluster_size(self) -> int:
        return self.size if self.hellos else 1  # the one seed until HELLO


def backend_on(
    calls: FakeCalls, client: FakeClient, url: str = "disq://127.0.0.1:1", **options: Any
) -> DisqResultBackend:
    backend = DisqResultBackend(url=url, **options)
    backend._node_calls = lambda: (client, calls)  # type: ignore[assignment,method-assign,return-value]
    return backend


def message(actor: str = "add", queue: str = "default") -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=(1,), kwargs={}, options={})


def test_a_store_is_one_set_with_dramatiqs_ttl_in_seconds_rounded_up() -> None:
    calls, client = FakeCalls(), FakeClient(5)
    backend = backend_on(calls, client, repl_timeout_ms=2500)
    for ttl_ms in (1500, 1, 600_000):
        backend.store_result(message(), {"v": 42}, ttl_ms)
    assert [opts["ttl_s"] for _, _, opts in calls.sets] == [2, 1, 600]
    # The majority of the nodes HELLO lists (3 of 5), asked once; the URL's TIMEOUT.
    assert {opts["replicate"] for _, _, opts in calls.sets} == {3}
    assert client.hellos == 1
    assert {opts["repl_timeout_ms"] for _, _, opts in calls.sets} == {2500}
    assert calls.sets[0][1] == b'{"v":42}'  # Dramatiq's JSON encoder


def test_replicate_given_is_sent_as_it_is_with_no_hello() -> None:
    calls, client = FakeCalls(), FakeClient(3)
    backend_on(calls, client, replicate=3).store_result(message(), 1, 1000)
    assert calls.sets[0][2]["replicate"] == 3 and client.hellos == 0
    calls2, client2 = FakeCalls(), FakeClient(3)
    url = "disq://127.0.0.1:1?replicate=2"  # the URL's option
    backend_on(calls2, client2, url=url).store_result(message(), 1, 1000)
    assert calls2.sets[0][2]["replicate"] == 2 and client2.hellos == 0


def test_a_blocking_get_is_one_wait_and_its_timeout_raises_result_timeout() -> None:
    calls = FakeCalls()
    backend = backend_on(calls, FakeClient(3))
    m = message()
    with pytest.raises(ResultTimeout):
        backend.get_result(m, block=True, timeout=2500)
    assert calls.reads == [(backend.build_message_key(m), 2.5)]  # one RESULT WAIT, no poll
    with pytest.raises(ResultTimeout):
        backend.get_result(m, block=True)  # Dramatiq's default: 10 s
    with pytest.raises(ResultTimeout):
        backend.get_result(m, block=True, timeout=0)  # 0: a look, no wait
    assert [t for _, t in calls.reads] == [2.5, 10.0, 0.0]
    backend.store_result(m, [1, 2], 1000)
    assert backend.get_result(m, block=True, timeout=2500) == [1, 2]


def test_a_get_that_does_not_block_raises_result_missing_and_an_exception_is_a_failure() -> None:
    calls = FakeCalls()
    backend = backend_on(calls, FakeClient(3))
    m = message()
    with pytest.raises(ResultMissing):
        backend.get_result(m)
    assert calls.reads[-1][1] == 0.0  # RESULT GET
    backend.store_exception(m, ValueError("no good"), 1000)
    with pytest.raises(ResultFailure) as failure:
        backend.get_result(m, block=True)
    assert failure.value.orig_exc_type == "ValueError"
    assert failure.value.orig_exc_msg == "no good"


def test_message_keys_are_valid_result_keys() -> None:
    m = message()
    hashed = DisqResultBackend(url="disq://127.0.0.1:1").build_message_key(m)
    assert len(hashed) == 32 and valid_key(hashed)  # Dramatiq's MD5 digest
    readable = DisqResultBackend(url="disq://127.0.0.1:1", use_namespace_prefix_keys=True)
    key = readable.build_message_key(m)
    assert key == f"dramatiq-results:default:add:{m.message_id}"  # valid: kept as it is
    odd = DisqResultBackend(
        url="disq://127.0.0.1:1", namespace="my results é", use_namespace_prefix_keys=True
    )
    odd_key = odd.build_message_key(m)
    assert valid_key(odd_key) and odd_key.startswith("my%20results%20%C3%A9:default:add:")
    assert odd.build_message_key(message("other")) != odd_key
    long = DisqResultBackend(
        url="disq://127.0.0.1:1", namespace="n" * 300, use_namespace_prefix_keys=True
    )
    long_key = long.build_message_key(m)
    assert valid_key(long_key) and len(long_key) == 32
    assert not valid_key("") and not valid_key("a b") and not valid_key("k" * 256)


def test_a_broker_or_a_url_not_both_and_no_connection_before_use() -> None:
    broker = DisqBroker("disq://127.0.0.1:1?replicate=2&repl_timeout_ms=700")
    backend = DisqResultBackend(broker=broker)
    assert backend.settings is broker.settings and backend.replicate == 2
    with pytest.raises(OptionError):
        DisqResultBackend(broker=broker, url="disq://127.0.0.1:1")
    with pytest.raises(OptionError):
        DisqResultBackend(broker=broker, password="x")
    with pytest.raises(OptionError):
        DisqResultBackend(url="disq://127.0.0.1:1", replicate=0)
    with pytest.raises(OptionError):
        DisqResultBackend(url="disq://127.0.0.1:1", no_such_option=1)
    own = DisqResultBackend(url="disq://:pw@127.0.0.1:1", timeout_s=2)
    assert own.settings.client_options == {"password": "pw", "timeout_s": 2.0}
    assert own._client is None  # made on first use, after dramatiq's fork
    own.close()
    broker.close()
