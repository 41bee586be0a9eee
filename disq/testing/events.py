"""A seeded set of lifecycle events with its expected analytics summary, computed without
Spark: what tests/integration/test_spark.py checks the analytics job against, and what
``python -m bench analytics`` feeds it (scaled up).

Jobs over two queues ("alpha", "beta"), enqueued uniformly over two hours on three nodes
("n1".."n3"); each is replicated to a second node; 70% are delivered once and acked, 15%
delivered, requeued by the other node, delivered again and acked, 5% delivered twice and
never acked (then expired: dead), 10% never delivered and expired (dead). A tenth of the
events appear twice, as an at-least-once export gives them.
"""

from __future__ import annotations

import random
from typing import Any

HOUR_MS = 3_600_000


def exact_percentile(values: list[int], p: float) -> float | None:
    """Linear interpolation between the closest ranks (Spark's ``percentile``)."""
    if not values:
        return None
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def seeded_events(
    seed: int, jobs_per_queue: int = 300
) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """Events of ``2 * jobs_per_queue`` jobs and the expected summary per (queue, window
    start) for one-hour windows."""
    rng = random.Random(seed)
    base = 500_000 * HOUR_MS  # an hour boundary
    seqs = {n: 0 for n in ("n1", "n2", "n3")}
    events: list[dict[str, Any]] = []

    def ev(node: str, t: int, kind: str, queue: str, job: str, attempt: int = 0) -> None:
        seqs[node] += 1
        events.append(
            {"node": node, "seq": seqs[node], "time_ms": t, "kind": kind, "queue": queue,
             "job_id": job, "attempt": attempt, "size": 10}
        )  # fmt: skip

    expect: dict[tuple[str, int], dict[str, Any]] = {}
    for queue in ("alpha", "beta"):
        for k in range(jobs_per_queue):
            job = f"D-{seed:08x}-{queue}{k:019d}-05a1"
            node, other = rng.sample(sorted(seqs), 2)
            enq = base + rng.randrange(0, 2 * HOUR_MS)
            w = (enq // HOUR_MS) * HOUR_MS
            e = expect.setdefault(
                (queue, w),
                {"enqueued": 0, "acked": 0, "deliv": [], "ack": [], "delivered": 0,
                 "retried": 0, "dead": []},
            )  # fmt: skip
            e["enqueued"] += 1
            ev(node, enq, "enqueued", queue, job)
            ev(other, enq + 1, "replicated", queue, job)
            fate = rng.random()
            if fate < 0.9:
                d1 = rng.randrange(1, 5000)
                ev(node, enq + d1, "delivered", queue, job, 1)
                e["delivered"] += 1
                e["deliv"].append(d1)
                t = enq + d1
                if fate >= 0.7:  # delivered again by the other node after a requeue
                    t += rng.randrange(1000, 60_000)
                    ev(other, t, "requeued", queue, job, 1)
                    ev(other, t + 5, "delivered", queue, job, 2)
                    e["retried"] += 1
                if fate < 0.85:
                    a = t + rng.randrange(1, 3000) - enq
                    ev(rng.choice([node, other]), enq + a, "acked", queue, job)
                    e["acked"] += 1
                    e["ack"].append(a)
                    continue
            ev(node, enq + 86_400_000, "expired", queue, job)
            e["dead"].append(job)
    dupes = rng.sample(events, len(events) // 10)  # an at-least-once export repeats some
    rng.shuffle(events)
    return events + dupes, expect
