"""The simulator's invariant 9 (nothing stranded) and node freezes (SIGSTOP).

Invariant 9 is shown to catch the ``never-requeue`` mutant (a job whose consumer died stays
ACTIVE on the node that delivered it, never re-queued): invariant 1 passes on it, since such
a job was delivered once.
"""

from __future__ import annotations

import dataclasses

import pytest

from disq.testing.sim import (
    T0_MS,
    InvariantViolation,
    SimConfig,
    SimResult,
    run_seed,
    sweep_config,
)
from tests import mutants

QUICK_SWEEP = range(0, 150)  # what test_sim.py's test_sweep_quick (``make test``) runs


def run(seed: int, **overrides: object) -> SimResult:
    return run_seed(seed, dataclasses.replace(SimConfig(), **overrides))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- invariant 9
def test_quick_sweep_catches_the_never_requeue_mutant_with_invariant_9() -> None:
    """Some seed of the quick sweep fails invariant 9 with the mutant in, having passed
    invariant 1 (checked first). Stops at the first such seed."""
    with mutants.applied(mutants.NEVER_REQUEUE):
        for seed in QUICK_SWEEP:
            try:
                run_seed(seed)
            except InvariantViolation as e:
                assert e.invariant.startswith("9 "), f"seed {seed} failed another check:\n{e}"
                assert "never delivered again" in e.detail or "no node has it acked" in e.detail
                assert "replay: python -m disq.testing.sim --seed" in e.report
                return
    pytest.fail(f"the never-requeue mutant passed every seed of {QUICK_SWEEP}")


# A quiet cluster (no nemesis), REPLICATE 1, producers and consumers on n0 (so federation
# makes no second copy): a consumer that dies holding a job leaves its only copy ACTIVE on n0.
_STRANDED = {
    "nodes": 3,
    "repl": (1, 1),
    "producer_nodes": (0,),
    "consumer_nodes": (0,),
    "jobs": 20,
    "producers": 1,
    "consumers": 2,
    "async_prob": 0.0,
    "delay_prob": 0.0,
    "client_cancel_prob": 0.0,
    "get_cancel_prob": 0.0,
    "partitions": False,
    "crashes": False,
    "aof_rewrite_prob": 0.0,
    "nemesis_script": (),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_consumer_dies_holding_a_replicate_1_job(seed: int) -> None:
    res = run(seed, **_STRANDED)
    assert res.stats["dropped_by_consumer"] > 0  # the scenario happened
    assert res.stats["crashes"] == 0
    assert res.stats["redeliveries"] > 0  # the dropped jobs came back
    with mutants.applied(mutants.NEVER_REQUEUE), pytest.raises(InvariantViolation) as exc:
        run(seed, **_STRANDED)
    e = exc.value
    assert e.invariant.startswith("9 "), str(e)
    assert "REPLICATE 1" in e.detail
    assert "no requeue timer" in e.detail  # the node holding it and its state are named
    assert "replay: " in e.report


# ---------------------------------------------------------------------------- freezes
_FREEZE = {
    "nodes": 3,
    "view": "swim",
    "duration_ms": 9000,
    "jobs": 30,
    "repl": (2, 3),
    "partitions": False,
    "crashes": False,
    "aof_rewrite_prob": 0.0,
    # n1 stops for 5 s (longer than SWIM's failure detection), then resumes.
    "nemesis_script": ((1000, "freeze", (1,)), (6000, "thaw", (1,))),
    "trace": True,
}


@pytest.mark.parametrize("seed", [1, 2])
def test_freeze_and_thaw(seed: int) -> None:
    res = run(seed, **_FREEZE)  # every invariant holds
    assert res.stats["freezes"] == 1
    assert res.stats["msgs_held"] > 0  # messages waited for the thaw
    # The others saw n1 stop answering, and n1 read what waited for it at the thaw.
    assert any(" view: n1 suspect" in ln for ln in res.trace if ln.split()[1] != "n1")
    thaw = next(ln for ln in res.trace if "NEMESIS thaw n1" in ln)
    assert not thaw.endswith(": 0 inputs waited")
    t_freeze = int(next(ln for ln in res.trace if "NEMESIS freeze n1" in ln).split()[0])
    t_thaw = int(thaw.split()[0])
    # Nothing ran on n1 while it was frozen: no message read, no timer, no delivery.
    during = [ln for ln in res.trace if t_freeze < int(ln.split()[0]) < t_thaw]
    assert not [ln for ln in during if ln.split()[1].startswith("recv") and ">n1 " in ln]
    assert not [ln for ln in during if ln.split()[1] in ("DELIVERED", "aof") and " n1 " in ln]


def test_a_client_of_a_frozen_node_waits_for_the_thaw() -> None:
    script = ((300, "freeze", (1,)), (3500, "thaw", (1,)))
    res = run(3, **dict(_FREEZE, producer_nodes=(1,), nemesis_script=script))
    t_clients = T0_MS + res.config.warmup_ms  # the nemesis script's time base
    t_freeze, t_thaw = t_clients + 300, t_clients + 3500
    # Adds sent to n1 while it was frozen were answered only after the thaw.
    waited = [a for a in res.adds.values() if t_freeze <= a.t_start < t_thaw <= a.t_end]
    assert waited
    assert any(a.status == "ok" for a in waited)


def test_crashing_a_frozen_node_is_refused() -> None:
    with pytest.raises(InvariantViolation, match="frozen: thaw it before crashing it"):
        run(1, **dict(_FREEZE, nemesis_script=((500, "freeze", (1,)), (900, "crash", (1,)))))


def test_sweep_seeds_with_freezes() -> None:
    """Sweep configurations with freezes on pass every invariant, and the nemesis froze."""
    results = [run_seed(seed, sweep_config(seed, freezes=True)) for seed in range(8)]
    assert sum(r.stats["freezes"] for r in results) > 0
    assert sum(r.stats["msgs_held"] for r in results) > 0


def test_the_sweep_turns_freezes_on_for_some_seeds() -> None:
    on = [s for s in QUICK_SWEEP if sweep_config(s).freezes]
    assert 15 < len(on) < 75
