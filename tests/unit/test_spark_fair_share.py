"""The events stream's read limit, shared among the nodes (disq/spark/events_source.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from disq.spark.events_source import fair_share


def test_every_node_with_events_advances_in_every_batch() -> None:
    # The case: 10,000 per batch, three nodes far behind. Sorted node order spent
    # the whole budget on the first node.
    assert fair_share({"a": 80_000, "b": 80_000, "c": 80_000}, 10_000) == {
        "a": 3334,
        "b": 3333,
        "c": 3333,
    }


def test_a_node_needing_less_leaves_its_part_to_the_others() -> None:
    assert fair_share({"a": 2, "b": 100, "c": 100, "d": 0}, 60) == {
        "a": 2,
        "b": 29,
        "c": 29,
        "d": 0,
    }


def test_never_more_than_the_limit_nor_than_waits() -> None:
    for waiting in ({"a": 5, "b": 7}, {"a": 1, "b": 1, "c": 1}, {"a": 1000}):
        for budget in range(1, 20):
            take = fair_share(waiting, budget)
            assert sum(take.values()) == min(budget, sum(waiting.values()))
            assert all(0 <= take[n] <= waiting[n] for n in waiting)


def test_fewer_rows_than_nodes_go_to_those_furthest_behind() -> None:
    assert fair_share({"a": 5, "b": 50, "c": 9}, 2) == {"a": 0, "b": 1, "c": 1}
