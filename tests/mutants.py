"""Deliberate bugs, to show that the checks can catch them.

A check that never failed proves little: each mutant here is a small, named bug put into the
real code for the length of a test, and the simulator's and the lab's checks must fail on it
(and pass once it is gone). They are applied by monkeypatching, never by a flag in the code
that ships.

* ``never-requeue``: a node never re-queues, by its RETRY, a job it delivered itself: a job
  whose consumer died (delivered, never acked) stays ACTIVE there forever. Other holders of a
  copy still re-queue theirs, so it shows with jobs that have one copy (REPLICATE 1, or the
  others gone). Every such job was "delivered at least once", so a check that only asks that
  passes every seed; the stranding checks (the simulator's invariant 9, the lab's
  ``stranded`` count) must not.

In-process (the simulator)::

    with mutants.applied("never-requeue"):
        run_seed(7)

Node processes (the lab): ``python -m tests.mutants never-requeue node.conf`` (from the
project's root) applies the mutant, then runs ``disq.node_main`` with the remaining
arguments.

It lives with the tests, not in the package: a deliberate bug has no place in the wheel.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from disq.core.disque.core import DisqueCore
from disq.core.disque.job import ACTIVE, BEANSTALK_ORIGIN, DELIVERED, DJob

NEVER_REQUEUE = "never-requeue"
MUTANTS = (NEVER_REQUEUE,)


def _never_requeue() -> Callable[[], None]:
    original = DisqueCore._process_job

    def process_job(self: DisqueCore, j: DJob, now_ms: int) -> None:
        if (
            j.state == ACTIVE
            and j.qtime_ms
            and j.qtime_ms < now_ms  # the core's rule: due once passed (core/timers.py)
            and j.flags & DELIVERED
            and not j.flags & BEANSTALK_ORIGIN
            and j.etime_ms >= now_ms
        ):
            j.qtime_ms = 0  # the bug: the requeue time is dropped, so RETRY never fires
        original(self, j, now_ms)

    DisqueCore._process_job = process_job  # type: ignore[method-assign]

    def undo() -> None:
        DisqueCore._process_job = original  # type: ignore[method-assign]

    return undo


_APPLY: dict[str, Callable[[], Callable[[], None]]] = {NEVER_REQUEUE: _never_requeue}


def apply(name: str) -> Callable[[], None]:
    """Put the named bug in; returns the function that takes it out."""
    try:
        return _APPLY[name]()
    except KeyError:
        raise ValueError(f"unknown mutant {name!r}; choose from {', '.join(MUTANTS)}") from None


@contextlib.contextmanager
def applied(name: str) -> Iterator[None]:
    undo = apply(name)
    try:
        yield
    finally:
        undo()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in MUTANTS:
        sys.stderr.write(f"usage: python -m tests.mutants {{{','.join(MUTANTS)}}} ARGS...\n")
        return 2
    from disq import _native

    if _native.COMPILED_IN_USE:
        # The node's compiled DisqueCore calls its own methods directly, past a patched one
        # (the simulator's SimDisqueCore, a Python subclass, does see the patch): the mutant
        # node runs the .py sources. Same process (exec), so the lab's pid stays right.
        os.environ["DISQ_PURE"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "tests.mutants", *args])
    apply(args[0])
    from disq import node_main

    return node_main.main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
