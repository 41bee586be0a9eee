"""A disq node that records when its IO layer's methods run: ``bench hops``'s node command
(``python -m bench.hop_node CONF``, under cluster/lab.py).

A few methods of the server are wrapped to append ``(tag, time.perf_counter_ns())`` to a
list (CLOCK_MONOTONIC: one clock for every process on the machine); when the node exits, the
list is written as JSON beside its config file (``hops.json``). Compiled classes cannot be
wrapped, so the lab runs these nodes with ``DISQ_PURE=1``: the hops show where an add waits,
not the compiled build's CPU.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any, NoReturn


def _record(conf: str) -> None:
    from disq.core.messages import GotJob, ReplJob
    from disq.server.peer_link import PeerLinks
    from disq.server.resp_tcp import RespProtocol
    from disq.server.runtime import NodeRuntime

    clock = time.perf_counter_ns
    events: list[tuple[str, int]] = []
    add = events.append

    def around(cls: Any, name: str, tag: str) -> None:
        orig = getattr(cls, name)

        def wrapper(self: Any, *args: Any) -> Any:
            add((tag, clock()))
            return orig(self, *args)

        setattr(cls, name, wrapper)

    around(RespProtocol, "data_received", "resp_in")
    around(RespProtocol, "_after_commands", "cmd_done")
    # At entry: the write happens inside, and the reader may run (on the other core) before an
    # exit stamp would be taken.
    around(RespProtocol, "flush", "resp_out")
    around(NodeRuntime, "_flush", "flush_in")
    around(PeerLinks, "_flush", "frames_out")
    on_peer = NodeRuntime.on_peer_messages

    def on_peer_messages(self: Any, sender: str, msgs: list[Any]) -> None:
        kinds = {type(m) for m in msgs}
        if ReplJob in kinds:
            add(("repljob_in", clock()))
        elif GotJob in kinds:
            add(("gotjob_in", clock()))
        on_peer(self, sender, msgs)

    NodeRuntime.on_peer_messages = on_peer_messages  # type: ignore[method-assign]
    real_exit = os._exit

    def exit_after_writing(status: int) -> NoReturn:
        # The node leaves through os._exit (no atexit): write the events on the way out.
        (Path(conf).parent / "hops.json").write_text(json.dumps(events))
        real_exit(status)

    os._exit = exit_after_writing


if __name__ == "__main__":
    if os.environ.get("DISQ_PURE") != "1":
        raise SystemExit(
            "bench.hop_node: run with DISQ_PURE=1 (compiled classes cannot be wrapped)"
        )
    _record(sys.argv[-1])
    sys.argv = ["disq-node", *sys.argv[1:]]
    runpy.run_module("disq.node_main", run_name="__main__")
