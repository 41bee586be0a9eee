"""The total-queue checker of the cluster lab (cluster/checker.py): pure history cases."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

# ``cluster/`` is a top-level directory of the checkout, not part of the installed package.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from cluster.checker import Event, check  # noqa: E402


def add(value: int, outcome: str | None = "ok", **kv: Any) -> list[dict[str, Any]]:
    """An add-invoke followed by its completion (``None``: never completed)."""
    evs: list[dict[str, Any]] = [{"type": "add-invoke", "value": value}]
    if outcome is not None:
        evs.append({"type": f"add-{outcome}", "value": value, **kv})
    return evs


def deq(value: int | str) -> dict[str, Any]:
    return {"type": "dequeue-ok", "value": value}


def test_empty_history_is_valid() -> None:
    r = check([])
    assert r.valid
    assert (r.attempted, r.acknowledged, r.delivered, r.lost) == (0, 0, 0, 0)


def test_every_acknowledged_value_delivered_once() -> None:
    h = [*add(1, id="D-1"), *add(2, id="D-2"), deq(2), deq(1)]
    r = check(h)
    assert r.valid
    assert r.attempted == r.acknowledged == r.delivered == r.deliveries == 2
    assert r.lost == r.duplicated == r.unexpected == r.indeterminate == 0


def test_lost_acknowledged_value_makes_the_history_invalid() -> None:
    h = [*add(1), *add(2), *add(3), deq(1)]
    r = check(h)
    assert not r.valid
    assert r.lost == 2
    assert r.lost_values == [2, 3]
    assert "lost" in r.summary() and "INVALID" in r.summary()


def test_duplicates_are_counted_but_allowed() -> None:
    h = [*add(1), *add(2), deq(1), deq(1), deq(1), deq(2)]
    r = check(h)
    assert r.valid
    assert r.delivered == 2
    assert r.deliveries == 4
    assert r.duplicated == 1
    assert r.duplicate_deliveries == 2
    assert r.duplicated_sample == {"1": 3}


def test_unexpected_value_makes_the_history_invalid() -> None:
    h = [*add(1), deq(1), deq(99), deq("garbage")]
    r = check(h)
    assert not r.valid
    assert r.lost == 0
    assert r.unexpected == 2
    assert r.unexpected_values == [99, "garbage"]  # ints first, then the rest


def test_indeterminate_values_may_or_may_not_be_delivered() -> None:
    h = [
        *add(1, "info", error="NOREPL Timeout reached"),  # delivered: recovered
        *add(2, "info", error="TimeoutError"),  # never delivered: fine, not lost
        *add(3, None),  # invoked, no completion at all: indeterminate too
        deq(1),
    ]
    r = check(h)
    assert r.valid
    assert r.attempted == 3
    assert r.acknowledged == 0
    assert r.indeterminate == 3
    assert r.recovered == 1
    assert r.lost == 0


def test_failed_adds_are_not_lost_and_a_delivered_one_is_flagged() -> None:
    h = [*add(1, "fail", error="connect refused"), *add(2, "fail"), deq(2)]
    r = check(h)
    assert r.valid
    assert r.failed == 2
    assert r.lost == 0
    assert r.recovered == 0
    assert r.failed_but_delivered == 1
    assert r.failed_but_delivered_values == [2]
    assert "WARNING" in r.summary()


def test_completion_without_invoke_still_counts_as_attempted() -> None:
    # A history cut at the front (or recorded by another tool) may lack invokes.
    r = check([{"type": "add-ok", "value": 5}, deq(5)])
    assert r.valid and r.attempted == 1 and r.acknowledged == 1


def test_other_event_types_are_ignored() -> None:
    h = [
        {"type": "nemesis", "f": "kill", "node": 2},
        *add(1),
        {"type": "dequeue-error", "error": "refused"},
        deq(1),
        {"type": "ack-fail", "ids": ["D-1"]},
    ]
    assert check(h).valid


def test_event_objects_and_dicts_are_equivalent() -> None:
    evs = [Event("add-invoke", 1), Event("add-ok", 1, id="D-x", node=0), Event("dequeue-ok", 7)]
    r = check(evs)
    assert (r.lost, r.unexpected) == (1, 1)
    assert check([e.to_dict() for e in evs]).to_dict() == r.to_dict()


def test_event_without_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="without a value"):
        check([{"type": "dequeue-ok"}])


def test_report_is_json_serialisable() -> None:
    h = [*add(1), *add(2, "info"), deq(1), deq(1), deq(2), deq(42)]
    r = check(h)
    back = json.loads(json.dumps(r.to_dict()))
    assert back["duplicated"] == 1
    assert back["recovered"] == 1
    assert back["unexpected_values"] == [42]
    assert back["valid"] is False


def test_the_jepsen_mix() -> None:
    """A realistic blend: ok / NOREPL / refused adds, duplicates, one loss."""
    h: list[dict[str, Any]] = []
    for v in range(1, 101):
        outcome = "ok" if v % 10 else "info"
        if v % 25 == 0:
            outcome = "fail"
        h += add(v, outcome)
    for v in range(1, 101):
        if v in (37,):  # acknowledged and never seen again
            continue
        if v % 10 == 0 and v % 20 == 0:  # half of the NOREPLs survived
            continue
        if v % 25 == 0:
            continue
        h.append(deq(v))
        if v % 7 == 0:
            h.append(deq(v))  # redelivered after RETRY
    r = check(h)
    assert r.attempted == 100
    assert r.failed == 4  # 25, 50, 75, 100
    assert r.acknowledged == 100 - 10 - 2  # 10 multiples of 10, plus 25 and 75
    assert r.lost == 1 and r.lost_values == [37]
    assert r.indeterminate == 100 - r.acknowledged - r.failed
    assert r.indeterminate == 8  # 10, 20, 30, 40, 60, 70, 80, 90
    assert r.recovered == 4  # the NOREPLs that were not multiples of 20: 10, 30, 70, 90
    assert r.duplicated == len([v for v in range(7, 101, 7) if v != 37 and v % 25])


def abandon(value: int) -> dict[str, Any]:
    return {"type": "abandon", "value": value}


def test_an_abandoned_delivery_redelivered_later_is_fine() -> None:
    h = [*add(1), *add(2), deq(1), abandon(1), deq(2), deq(1)]
    r = check(h)
    assert r.valid
    assert r.abandoned == 1
    assert r.stranded == 0
    assert r.duplicated == 1  # the redelivery after RETRY


def test_a_value_whose_last_delivery_was_abandoned_is_stranded() -> None:
    # 1: delivered, abandoned, never seen again. 2: abandoned twice, then delivered and fine.
    # 3: delivered, abandoned, redelivered, abandoned again: its last delivery counts.
    h = [*add(1), *add(2), *add(3), deq(1), abandon(1), deq(2), abandon(2), deq(2), abandon(2)]
    h += [deq(2), deq(3), abandon(3), deq(3), abandon(3)]
    r = check(h)
    assert not r.valid
    assert r.lost == 0  # every value was delivered: the at-least-once check alone passes
    assert r.abandoned == 5
    assert r.stranded == 2
    assert r.stranded_values == [1, 3]
    assert "stranded values: 1, 3" in r.summary()
    assert "INVALID" in r.summary()


def test_an_unacknowledged_value_abandoned_for_good_is_noted_not_stranded() -> None:
    # ADDJOB -NOREPL Timeout: the node deletes the job, even if a replica handed it out.
    h = [*add(1, "info", error="NOREPL Timeout reached"), deq(1), abandon(1)]
    h += [*add(2, "fail"), deq(2), abandon(2)]
    r = check(h)
    assert r.valid
    assert r.stranded == 0
    assert r.abandoned_unacknowledged == 2
    assert r.abandoned_unacknowledged_values == [1, 2]
    assert "note: 2 values" in r.summary()


def test_jobs_left_on_nodes_make_the_run_invalid() -> None:
    h = [*add(1), deq(1)]
    assert check(h, left_on_nodes={"0": 0, "1": 0, "2": 0}).valid
    r = check(h, left_on_nodes={"0": 0, "1": 3, "2": 1})
    assert not r.valid
    assert r.left_on_nodes == 4
    assert r.stranded_on_nodes == {"1": 3, "2": 1}
    assert "left per node" in r.summary()


def test_a_node_that_could_not_be_asked_is_not_taken_as_empty() -> None:
    r = check([*add(1), deq(1)], left_on_nodes={"0": 0, "1": "error: timed out"})
    assert not r.valid
    assert r.left_on_nodes == 0
    assert r.stranded_on_nodes == {"1": "error: timed out"}


def test_without_left_on_nodes_only_the_history_decides() -> None:
    r = check([*add(1), deq(1)])
    assert r.valid and r.stranded_on_nodes == {} and r.left_on_nodes == 0


def test_a_job_acked_then_handed_out_again_and_abandoned_is_done_not_stranded() -> None:
    # Found by the make test Jepsen run: value 62 acked on node 2; node 1, which the ack had
    # not reached (a kill and a partition), delivered it again 10 s later to a consumer that
    # died. The job was done; it must not count as stranded.
    h = [*add(1, id="D-1"), *add(2, id="D-2")]
    h += [{"type": "dequeue-ok", "value": 1, "id": "D-1", "node": 2}]
    h += [{"type": "ack-ok", "ids": ["D-1"], "acked": 1, "node": 2}]
    h += [{"type": "dequeue-ok", "value": 1, "id": "D-1", "node": 1}, abandon(1)]
    # 2 is acked under another id only (a different job): it stays stranded.
    h += [{"type": "dequeue-ok", "value": 2, "id": "D-2", "node": 0}, abandon(2)]
    h += [{"type": "ack-ok", "ids": ["D-9"], "acked": 0, "node": 0}]
    r = check(h)
    assert r.stranded == 1 and r.stranded_values == [2]
    assert r.abandoned_after_ack == 1 and r.abandoned_after_ack_values == [1]
    assert "1 values were acked, then handed out again" in r.summary()
    assert not r.valid


def test_an_ack_in_event_objects_counts_too() -> None:
    evs = [
        Event("add-ok", 1, id="D-1"),
        Event("dequeue-ok", 1, id="D-1"),
        Event("ack-ok", extra={"ids": ["D-1"]}),
        Event("dequeue-ok", 1, id="D-1"),
        Event("abandon", 1, id="D-1"),
    ]
    r = check(evs)
    assert r.valid and r.stranded == 0 and r.abandoned_after_ack == 1
