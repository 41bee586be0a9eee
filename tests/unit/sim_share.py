"""The simulator sweeps' shared work (issue 32: ``make test`` on 2 cores under 25 minutes).

Two savings, neither drops a seed nor an assertion:

- **One run per seed per process.** A seed's run with its sweep configuration is
  deterministic (test_sim.py's replay test: byte-identical traces across processes), so the
  sweeps that run the same seeds (test_sim.py's quick and chunked sweeps, the schedule sweep
  of test_sim_schedules.py, whose seeds are sweep seeds 0-796) simulate each seed once and
  keep its outcome, the stats or the violation, for the next sweep that needs it.
- **Seeds shared between make test's two runs.** ``make test`` runs tests/unit twice: compiled
  (slow sweeps included), then pure. The sweeps both runs make split their seeds between the
  two: ``DISQ_SIM_SHARE=k/n`` (the Makefile: 0/2 compiled, 1/2 pure) keeps the seeds with
  ``seed % n == k``, so together the two runs cover every seed once and each build half.
  Unset (a run of its own, CI's other jobs): every seed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from disq.testing.sim import InvariantViolation, run_seed

SHARE_ENV = "DISQ_SIM_SHARE"


def share() -> tuple[int, int]:
    """``(k, n)`` from DISQ_SIM_SHARE ("k/n"); ``(0, 1)`` when unset."""
    raw = os.environ.get(SHARE_ENV, "")
    if not raw:
        return 0, 1
    k_text, sep, n_text = raw.partition("/")
    if not (sep and k_text.isdigit() and n_text.isdigit()) or not 0 <= int(k_text) < int(n_text):
        raise ValueError(f"{SHARE_ENV}={raw!r}: want k/n with 0 <= k < n, e.g. 0/2")
    return int(k_text), int(n_text)


def shared_seeds(seeds: Iterable[int]) -> list[int]:
    """This run's share of ``seeds`` (all of them without DISQ_SIM_SHARE)."""
    k, n = share()
    return [s for s in seeds if s % n == k]


@dataclass(frozen=True, slots=True)
class Outcome:
    stats: dict[str, int]  # empty when the run broke an invariant
    violation: str  # "" when every invariant held


_OUTCOMES: dict[int, Outcome] = {}


def sweep_outcome(seed: int) -> Outcome:
    """``seed`` run with its sweep configuration (run_seed: replayed with its trace when an
    invariant breaks), simulated once per process."""
    out = _OUTCOMES.get(seed)
    if out is None:
        try:
            out = Outcome(dict(run_seed(seed).stats), "")
        except InvariantViolation as e:
            out = Outcome({}, str(e))
        _OUTCOMES[seed] = out
    return out
