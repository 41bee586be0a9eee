"""Injected I/O faults, to show that the node handles them as documented.

Like the tests' mutants (tests/mutants.py): a fault is put into the real code by
monkeypatching for the length of a test or of one node process, never by a flag in the code
that ships.

* ``fsync-eio``: the fsync of the AOF's files (``fsync_fd`` as
  :mod:`disq.persistence.aof_writer` calls it: group commits under ``always``, the
  ``everysec`` worker thread, a rewrite's commit) succeeds ``after`` times, then raises
  ``OSError(EIO)`` on every later call, as a disk that lost a write does. Other fsyncs of the
  process (node.json, cluster.json, directories) are untouched. A node must stop (exit 1)
  without acknowledging the records of the failed fsync (docs/disk-full.md, "fsyncgate").
* ``fsync-hold``: the same fsyncs, after ``after`` of them, wait while the file ``gate``
  exists: a disk that takes its time, to watch what the group commit holds meanwhile.
* ``api-held``: a node whose peers hear from it first loads its gRPC client API only once the
  file ``gate`` exists; until then every client call is answered UNAVAILABLE "not run"
  (disq/server/late_services.py), as in the milliseconds after a restart, for as long as a
  test needs (tests/integration/test_client_failover_live.py).

In-process::

    with faults.applied("fsync-eio", after=3):
        ...

Node processes: ``python -m disq.testing.faults fsync-eio|fsync-hold|api-held [--after N]
[--gate PATH] -- ARGS...`` applies the fault, then runs ``disq.node_main`` with ``ARGS``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from disq.persistence import aof_writer

FSYNC_EIO = "fsync-eio"
FSYNC_HOLD = "fsync-hold"
API_HELD = "api-held"
FAULTS = (FSYNC_EIO, FSYNC_HOLD, API_HELD)
HOLD_POLL_S = 0.005


class FsyncFault:
    """The replacement fsync: ``after`` calls pass through, every later one fails with EIO.
    Thread-safe (the ``everysec`` worker thread calls it too)."""

    def __init__(self, after: int, original: Callable[[int], None]) -> None:
        self.after = after
        self.calls = 0
        self.failures = 0
        self._original = original
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            fail = self.calls > self.after
            if fail:
                self.failures += 1
        if fail:
            raise OSError(errno.EIO, os.strerror(errno.EIO) + " (injected: disq.testing.faults)")
        self._original(fd)


class FsyncHold(FsyncFault):
    """The replacement fsync: ``after`` calls pass through, every later one first waits while
    the file ``gate`` exists."""

    def __init__(self, after: int, gate: str, original: Callable[[int], None]) -> None:
        super().__init__(after, original)
        self.gate = gate

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            hold = self.calls > self.after
        while hold and os.path.exists(self.gate):
            time.sleep(HOLD_POLL_S)
        self._original(fd)


def _replace_fsync(
    make: Callable[[Callable[[int], None]], Callable[[int], None]],
) -> Callable[[], None]:
    # The writer looks fsync_fd up in its module's namespace at each call: replace it there.
    namespace = vars(aof_writer)
    original: Callable[[int], None] = namespace["fsync_fd"]
    namespace["fsync_fd"] = make(original)

    def undo() -> None:
        namespace["fsync_fd"] = original

    return undo


def _api_held(gate: str) -> Callable[[], None]:
    # The runtime looks import_api up in its module when it loads the API, in a thread of
    # its own: the wait holds that thread only, the node serves everything else meanwhile.
    from disq.server import cluster_services

    original = cluster_services.import_api

    def held() -> None:
        while not os.path.exists(gate):
            time.sleep(0.01)
        original()

    cluster_services.import_api = held

    def undo() -> None:
        cluster_services.import_api = original

    return undo


def apply(name: str, *, after: int = 0, gate: str = "") -> Callable[[], None]:
    """Put the named fault in; returns the function that takes it out."""
    if name == FSYNC_EIO:
        return _replace_fsync(lambda original: FsyncFault(after, original))
    if name == FSYNC_HOLD:
        if not gate:
            raise ValueError("fsync-hold needs a gate file")
        return _replace_fsync(lambda original: FsyncHold(after, gate, original))
    if name == API_HELD:
        return _api_held(gate)
    raise ValueError(f"unknown fault {name!r}; choose from {', '.join(FAULTS)}")


@contextlib.contextmanager
def applied(name: str, *, after: int = 0, gate: str = "") -> Iterator[None]:
    undo = apply(name, after=after, gate=gate)
    try:
        yield
    finally:
        undo()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--" in args:
        cut = args.index("--")
        ours, node_args = args[:cut], args[cut + 1 :]
    else:
        ours, node_args = args, []
    parser = argparse.ArgumentParser(
        prog="python -m disq.testing.faults",
        description="Run disq-node with an injected I/O fault (tests only).",
        epilog="Everything after -- goes to disq-node.",
    )
    parser.add_argument("fault", choices=FAULTS)
    parser.add_argument(
        "--after", type=int, default=0, metavar="N", help="calls that succeed before the fault"
    )
    parser.add_argument(
        "--gate",
        default="",
        metavar="PATH",
        help="fsync-hold: wait while it exists; api-held: the file awaited",
    )
    opts = parser.parse_args(ours)
    if opts.after < 0:
        parser.error("--after must be >= 0")
    if opts.fault in (FSYNC_HOLD, API_HELD) and not opts.gate:
        parser.error(f"{opts.fault} needs --gate PATH")
    apply(opts.fault, after=opts.after, gate=opts.gate)
    from disq import node_main

    return node_main.main(node_args)


if __name__ == "__main__":
    sys.exit(main())
