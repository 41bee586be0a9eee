"""The kombu channel's transient queues (disq.integrations.transient): which queue is a
lease of how long, when each is renewed, which ones the channel deletes itself."""

from __future__ import annotations

import pytest

from disq.integrations.transient import (
    TRANSIENT_LEASE_MS,
    QueueArgumentError,
    TransientQueues,
    queue_lease,
)


def test_a_plain_queue_is_no_lease() -> None:
    assert queue_lease(None, auto_delete=False, exclusive=False) == (0, 0)
    assert queue_lease({"x-max-priority": 9}, auto_delete=False, exclusive=False) == (0, 0)


def test_x_message_ttl_alone_is_kept_without_a_lease() -> None:
    assert queue_lease({"x-message-ttl": 5000}, auto_delete=False, exclusive=False) == (0, 5000)


def test_x_expires_is_the_lease_whatever_the_flags() -> None:
    # Celery's pidbox reply queue: auto_delete, exclusive, x-expires 10 s.
    args = {"x-expires": 10_000, "x-message-ttl": 300_000}
    assert queue_lease(args, auto_delete=True, exclusive=True) == (10_000, 300_000)
    assert queue_lease({"x-expires": 1500}, auto_delete=False, exclusive=False) == (1500, 0)


@pytest.mark.parametrize(("auto_delete", "exclusive"), [(True, False), (False, True)])
def test_auto_delete_or_exclusive_without_x_expires_gets_the_default_lease(
    auto_delete: bool, exclusive: bool
) -> None:
    lease = queue_lease(None, auto_delete=auto_delete, exclusive=exclusive)
    assert lease == (TRANSIENT_LEASE_MS, 0)
    assert TRANSIENT_LEASE_MS == 60_000  # RabbitMQ's default heartbeat, the README's 60 s
    # The connection's transient_lease_s replaces the default; x-expires still wins.
    assert queue_lease(None, auto_delete=auto_delete, exclusive=exclusive, default_ms=6000) == (
        6000,
        0,
    )
    assert queue_lease(
        {"x-expires": 10_000}, auto_delete=auto_delete, exclusive=exclusive, default_ms=6000
    ) == (10_000, 0)


def test_the_lease_option_is_seconds_in_a_sane_range() -> None:
    from disq.integrations.common import OptionError, parse_url, settings

    addresses, raw = parse_url("disq://h:1?transient_lease_s=6")
    assert settings(addresses, raw).transient_lease_s == 6.0
    assert settings(addresses, {}).transient_lease_s == 60.0
    for bad in ("0", "-1", "100000"):
        with pytest.raises(OptionError, match="transient_lease_s"):
            settings(*parse_url(f"disq://h:1?transient_lease_s={bad}"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"x-expires": 0}, "x-expires must be at least 1 ms"),
        ({"x-expires": -5}, "x-expires must be at least 1 ms"),
        ({"x-expires": "soon"}, "x-expires must be whole milliseconds"),
        ({"x-message-ttl": -1}, "x-message-ttl must be at least 0 ms"),
    ],
)
def test_bad_arguments_are_refused_with_their_name(args: dict[str, object], message: str) -> None:
    with pytest.raises(QueueArgumentError, match=message):
        queue_lease(args, auto_delete=False, exclusive=False)


def _declare(t: TransientQueues, name: str, now: float, **flags: bool) -> None:
    t.declared(
        name,
        expires_ms=9000,
        message_ttl_ms=0,
        auto_delete=flags.get("auto_delete", False),
        exclusive=flags.get("exclusive", False),
        now=now,
    )


def test_renewed_at_a_third_of_the_lease_while_consumed() -> None:
    t = TransientQueues()
    _declare(t, "q", now=100.0)
    assert t.due(102.9, consumed=["q"]) == []
    assert t.next_due(consumed=["q"]) == pytest.approx(103.0)
    due = t.due(103.0, consumed=["q"])
    assert [q.name for q in due] == ["q"]


def test_an_x_expires_queue_not_consumed_is_left_to_expire() -> None:
    t = TransientQueues()
    _declare(t, "q", now=100.0)
    assert t.due(1000.0, consumed=[]) == []
    assert t.next_due(consumed=[]) is None


def test_an_exclusive_queue_is_renewed_consumed_or_not_and_deleted_by_the_channel() -> None:
    t = TransientQueues()
    _declare(t, "auto", now=0.0, auto_delete=True)  # other processes may consume it
    _declare(t, "excl", now=0.0, exclusive=True)
    _declare(t, "leased", now=0.0)
    assert [q.name for q in t.due(3.0, consumed=[])] == ["excl"]
    assert sorted(q.name for q in t.due(3.0, consumed=["auto"])) == ["auto", "excl"]
    assert t.owned() == ["excl"]


def test_bindings_survive_a_redeclare_and_a_late_renewal_is_told_apart() -> None:
    t = TransientQueues()
    _declare(t, "q", now=0.0)
    t.bound("q", "ex", "a.#")
    t.bound("q", "ex", "b")
    t.unbound("q", "ex", "b")
    _declare(t, "q", now=3.0)  # the renewal
    q = t.get("q")
    assert q is not None and q.bindings == {("ex", "a.#")}
    assert not q.may_have_lapsed(6.0)
    assert q.may_have_lapsed(3.0 + 8.0)  # past 80 % of 9 s: the node may have deleted it
    assert t.forget("q") is q and "q" not in t and t.forget("q") is None


def test_bindings_of_a_queue_that_is_not_transient_are_not_tracked() -> None:
    t = TransientQueues()
    t.bound("plain", "ex", "k")
    assert t.get("plain") is None
