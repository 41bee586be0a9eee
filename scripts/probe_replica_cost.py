"""What a replica costs the node that holds it, and what "replicas as bytes" could save.

    .venv/bin/python scripts/probe_replica_cost.py [--jobs 50000] [--repeat 3]

Issue 14 named a direction: a node holding a copy keeps the received job bytes and the few
fields its timers need, builds the full record only when it must act, and writes the bytes it
received as its AOF record. This probe measures, in process and per copy, what a holder does
today when a REPLJOB arrives (columnar batch messages, as between nodes of this build):

  decode       the frame's ReplJobs message -> JobData (peer_wire.decode_frame)
  core         DisqueCore.on_message(ReplJob): the DJob, the jobs dict, the timer heap, the
               event, the GOTJOB answer (AOF off)
  + AOF        the same with the LOADJOB record built (AOF on, as a node with appendonly)
  record       of which building the DJob (ReplicationMixin._job_from_data)
  loadjob      of which encoding the LOADJOB record (the AOF's own format)

and the floor a bytes replica could reach: the received bytes sliced out of the frame, one
dict entry holding (bytes, requeue time), one timer heap push, the bytes appended as the AOF
record and the GOTJOB answer. The difference is the most the direction could save per copy;
the probe prints it next to the CPU one REPLICATE 3 job costs three cores
(scripts/profile_cluster.py), so the saving reads as a share of a job.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import statistics
import time
from collections.abc import Callable

from disq.core.disque.core import DisqueCore
from disq.core.messages import GotJob, JobData, Message, ReplJob
from disq.node_main import GC_THRESHOLDS
from disq.server.peer_wire import decode_frame, encode_frame
from disq.testing.mesh import StaticView

BODY = b"x" * 100
CREATOR = "01" * 20
HOLDER = "02" * 20
OTHER = "03" * 20


def _jobs(n: int, base: int) -> list[JobData]:
    return [
        JobData(f"D-01010101-{base + i:024x}-0e10", "q", BODY, 3, base + i, 0, 60, 86_400)
        for i in range(n)
    ]


def _holder(persist: bool) -> DisqueCore:
    core = DisqueCore(StaticView(HOLDER, [CREATOR, OTHER]), random.Random(2), 0)
    core.persist = persist
    return core


def _us(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / n * 1e6


def measure(n: int, batch: int = 256) -> dict[str, float]:
    jobs = _jobs(n, 1)
    frames = [
        encode_frame(CREATOR, k, [ReplJob(j) for j in jobs[k : k + batch]], columnar=True)
        for k in range(0, n, batch)
    ]
    out: dict[str, float] = {}
    decoded: list[list[Message]] = []
    out["decode"] = _us(lambda: decoded.extend(decode_frame(f)[2] for f in frames), n)
    msgs = [m for frame in decoded for m in frame]

    def deliver(core: DisqueCore) -> None:
        for msg in msgs:
            core.on_message(1000, CREATOR, msg)
            if len(core.outbox) > 4096:
                core.outbox.clear()
                core.aof_out.clear()

    out["core"] = _us(lambda: deliver(_holder(False)), n)
    out["core + AOF"] = _us(lambda: deliver(_holder(True)), n)

    core = _holder(True)
    out["record"] = _us(lambda: [core._job_from_data(j, 1000) for j in jobs], n)
    records = [core._job_from_data(j, 1000) for j in jobs[:1000]] * (n // 1000 + 1)
    out["loadjob"] = _us(lambda: [core._loadjob_record(r, 1000) for r in records[:n]], n)

    # The floor of a bytes replica: what it must still do per copy.
    raw = [(j.id, bytes(120) + j.body) for j in jobs]  # about one Job's bytes each

    def floor() -> None:
        held: dict[str, tuple[bytes, int]] = {}
        heap: list[tuple[int, str]] = []
        aof: list[bytes] = []
        answers: list[tuple[str, Message]] = []
        for job_id, data in raw:
            blob = data[:]  # sliced out of the frame
            held[job_id] = (blob, 61_000)
            heapq.heappush(heap, (61_000, job_id))
            aof.append(blob)
            answers.append((CREATOR, GotJob(job_id)))

    out["bytes floor"] = _us(floor, n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # as a node runs
    runs = [measure(args.jobs) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    for k, v in med.items():
        spread = "/".join(f"{r[k]:.2f}" for r in runs)
        print(f"{k:12s} {v:6.2f} us per copy   (runs {spread})")
    today = med["decode"] + med["core + AOF"]
    saving = today - med["bytes floor"]
    print(f"a holder today (decode + core + AOF): {today:.2f} us per copy")
    print(
        f"at most saved by bytes replicas: {saving:.2f} us per copy, "
        f"{2 * saving:.2f} us per REPLICATE 3 job (two holders)"
    )


if __name__ == "__main__":
    main()
