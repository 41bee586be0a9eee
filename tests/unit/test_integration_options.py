"""disq/integrations/common.py: priority steps, message TTLs and the default REPLICATE the
kombu transport and the Dramatiq broker share."""

from __future__ import annotations

import pytest

from disq.integrations.common import (
    PRIORITY_SEP,
    OptionError,
    Settings,
    base_queue,
    majority_of,
    parse_url,
    settings,
    ttl_from_ms,
)


def _settings(url: str = "disq://127.0.0.1:7710", **options: object) -> Settings:
    addresses, query = parse_url(url)
    return settings(addresses, {**query, **options})


@pytest.mark.parametrize(
    ("priority", "step"),
    [(None, 0), ("x", 0), (-3, 0), (0, 0), (2, 0), (3, 3), (5, 3), (6, 6), (8, 6), (9, 9), (42, 9)],
)
def test_a_priority_falls_to_the_highest_step_not_above_it(priority: object, step: int) -> None:
    assert _settings().priority_step(priority) == step


def test_sub_queues_are_the_steps_highest_first_and_step_0_is_the_queue() -> None:
    s = _settings()
    assert s.sub_queues("celery") == [
        f"celery{PRIORITY_SEP}9",
        f"celery{PRIORITY_SEP}6",
        f"celery{PRIORITY_SEP}3",
        "celery",
    ]
    assert all(base_queue(q) == "celery" for q in s.sub_queues("celery"))


def test_priority_steps_option_from_url_and_keywords() -> None:
    assert _settings("disq://h:1?priority_steps=5,1").priority_steps == (0, 1, 5)
    s = _settings(priority_steps=[0, 9])
    assert s.priority_steps == (0, 9) and s.priority_step(8) == 0 and s.priority_step(9) == 9
    with pytest.raises(OptionError, match="priority_steps"):
        _settings(priority_steps="1,10")
    with pytest.raises(OptionError, match="priority_steps"):
        _settings(priority_steps="a,b")


@pytest.mark.parametrize(
    ("ms", "ttl_s"),
    [
        ("2000", 2),
        ("2001", 3),
        (1, 1),
        (0, 1),
        ("1500.5", 2),
        (None, None),
        ("x", None),
        (-5, None),
    ],
)
def test_a_ttl_in_ms_is_whole_seconds_rounded_up_at_least_1(ms: object, ttl_s: int | None) -> None:
    assert ttl_from_ms(ms) == ttl_s


def test_the_lower_ttl_applies_and_a_delayed_ones_counts_from_the_end_of_its_delay() -> None:
    assert _settings().add_options(ttl_s=2)["ttl_s"] == 2
    assert _settings(ttl_s=60).add_options(ttl_s=2)["ttl_s"] == 2
    assert _settings(ttl_s=1).add_options(ttl_s=2)["ttl_s"] == 1
    assert _settings().add_options(5000, ttl_s=2)["ttl_s"] == 7
    assert _settings().add_options(300, ttl_s=2) == {
        "repl_timeout_ms": 5000,
        "delay_ms": 300,
        "ttl_s": 3,
    }
    assert "ttl_s" not in _settings().add_options()


@pytest.mark.parametrize(("n", "copies"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_the_default_replicate_is_the_majority_of_the_known_nodes(n: int, copies: int) -> None:
    assert majority_of(n) == copies
    assert _settings().add_options(cluster_size=n)["replicate"] == copies


def test_an_explicit_replicate_wins_and_no_view_leaves_it_to_the_node() -> None:
    assert _settings(replicate=3).add_options(cluster_size=3)["replicate"] == 3
    assert _settings("disq://h:1?replicate=1").add_options(cluster_size=5)["replicate"] == 1
    assert "replicate" not in _settings().add_options()


def test_the_dramatiq_broker_has_one_import_path() -> None:
    """``disq.dramatiq`` (its home before the 0.1.0 release) is gone: the broker is
    ``disq.integrations.dramatiq.DisqBroker``, as the README says."""
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("disq.dramatiq")
    from disq.integrations.dramatiq import DisqBroker

    assert DisqBroker.__module__ == "disq.integrations.dramatiq"
