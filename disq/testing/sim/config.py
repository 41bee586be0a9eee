"""The simulator's configuration: one frozen ``SimConfig`` per run, the CI sweep's
per-seed configuration, and the CLI line that replays a run."""

from __future__ import annotations

import dataclasses
import random
import shlex
from dataclasses import dataclass
from typing import Any

T0_MS = 1_700_000_000_000  # a realistic epoch: ctime = ms * 1e6 must stay within 63 bits
INF = 1 << 62
SCHED_SKIP_QUEUE = "sq"  # the SKIP schedules' queue: the nemesis pauses only ``queues``
SCHED_SHARE = 0.2  # share of the sweep's seeds with schedules
DEAD_LETTER_QUEUE = "dq"  # the dead letter queue of ``max_deliveries``' policy
DEAD_LETTER_SHARE = 0.25  # share of the sweep's seeds with a delivery limit


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a run depends on besides the seed (so a failure replays exactly)."""

    nodes: int = 3
    loss: float = 0.0  # probability a message is dropped
    dup: float = 0.0  # probability a message is delivered twice
    delay_ms: tuple[int, int] = (1, 20)  # per message, uniform: reordering comes from this
    partitions: bool = True
    crashes: bool = True
    duration_ms: int = 3000  # chaos phase: producers, consumers and nemesis
    jobs: int = 30  # ADDJOBs over the chaos phase
    producers: int = 3
    consumers: int = 3
    queues: tuple[str, ...] = ("q0", "q1")
    repl: tuple[int, int] | None = None  # REPLICATE range; None: (1, min(3, nodes))
    max_retry_s: int = 2  # RETRY drawn from 1..max_retry_s
    ttl_s: int = 3600  # far beyond the run; jobs whose TTL ends before the end are excused
    at_most_once_prob: float = 0.0  # REPLICATE 1 RETRY 0 jobs
    async_prob: float = 0.15
    delay_prob: float = 0.05  # DELAY 1
    add_timeout_ms: tuple[int, int] = (200, 2000)
    client_cancel_prob: float = 0.03  # the producer disconnects before the sync reply
    max_down: int | None = None  # None: min(REPLICATE) - 1
    nemesis_every_ms: tuple[int, int] = (200, 1200)
    # Instead of the random nemesis: (ms after the clients start, action, node indexes) with
    # action in isolate, split (args = one side), heal, crash, crash_all, restart,
    # restart_all, rewrite (AOF), pressure/relief (memory warning), leave/stay, freeze/thaw
    # (SIGSTOP/SIGCONT; crashing a frozen node is refused: thaw it first).
    nemesis_script: tuple[tuple[int, str, tuple[int, ...]], ...] | None = None
    aof_rewrite_prob: float = 0.1  # share of nemesis actions that rewrite one node's AOF
    memory_pressure: bool = False  # nemesis: memory warning 1 on a node (external replication)
    leaving: bool = False  # nemesis: CLUSTER LEAVING yes/no on a node
    pauses: bool = False  # nemesis: PAUSE a queue (in/out/all, broadcast) on a node
    # nemesis: freeze (SIGSTOP) a node and thaw it later; counted in max_down like a crash
    freezes: bool = False
    get_cancel_prob: float = 0.03  # a consumer hangs up while blocked in GETJOB
    fsync_lost: bool = False
    enqueue_on_restart_prob: float = 0.0  # aof-enqueue-jobs-once yes (a controlled restart)
    clock_skew_ms: int = 0  # each node's clock is off by up to this much (fixed offset)
    view: str = "swim"  # "swim" (real Membership), "oracle" (perfect detector), "static"
    probe_interval_ms: int = 500
    ping_timeout_ms: int = 200
    node_timeout_ms: int = 3000
    warmup_ms: int = 1500  # membership converges before clients start
    consumer_start_ms: int = 0  # consumers start this long after the clients phase begins
    producer_nodes: tuple[int, ...] | None = None  # None: any live node
    consumer_nodes: tuple[int, ...] | None = None
    ack_other_node_prob: float = 0.3
    settle_ms: int | None = None  # after healing, consumers go on; None: 3 x max retry + 2 s
    drain: str = "all"  # "all": NOHANG on every node; "consumers": blocking on consumer nodes
    drain_max_ms: int = 60_000
    final_gc_ms: int = 0  # > 0: then check that every acked job was garbage collected
    check_every: int = 1  # structural check every this many steps (per stepping node)
    # Known core gaps whose consequences invariant 1 tolerates (so a sweep can stay useful
    # while they are open; tests/unit/test_sim.py pins each with a strict xfail). Fixed and
    # gone: "extrepl-repl1", "extrepl-async" (issue 12), "amo-enqueue-once",
    # "idem-deljob-race" (a holder answered a retried key with the id of a failed add's copy;
    # now it holds the retry until that add is decided).
    exempt: tuple[str, ...] = ()
    # Idempotency keys: this share of ADDJOBs carry IDEMPOTENCY-KEY; a keyed add that ends
    # without an id (hang-up, crash, NOREPL) is retried with the SAME key on another node, and
    # an acknowledged one, with ``idem_lost_reply_prob``, too (its reply was "lost").
    idem_prob: float = 0.0
    # False: keys are bound by announcements alone, without the vote (keyvote.py): the
    # deliberate weakening that shows invariant 7 failing (tests/unit/test_sim.py).
    vote_keys: bool = True
    idem_lost_reply_prob: float = 0.3
    idem_max_retries: int = 3
    # The beanstalk door: this many puts over the chaos phase, each node with its own
    # ``beanstalk_replicate`` drawn from ``beanstalk_repl`` (capped at the node count).
    beanstalk_jobs: int = 0
    beanstalk_repl: tuple[int, int] = (2, 3)
    beanstalk_ttr_ms: tuple[int, int] = (1000, 3000)
    # Recurring schedules (disq/core/schedule/): this many are added through a random live
    # node's scheduler as the clients start ("@every 1s", "*/2 * * * * *", "@every 3s"),
    # each on one of ``queues`` (CATCHUP) or on ``SCHED_SKIP_QUEUE`` (SKIP, a queue the
    # nemesis never pauses); the consumers and the drain read them all. Invariant 10.
    schedules: int = 0
    # One schedule is paused from one node and resumed from another during the chaos phase.
    schedule_changes: bool = False
    # A queue policy (disq/core/disque/deadletter.py): the first of ``queues`` gets
    # MAXDELIVERIES ``max_deliveries`` DEADLETTER ``DEAD_LETTER_QUEUE``, set on one node
    # before the clients start; the consumers and the drain read the dead letter queue too.
    # Invariant 11. 0: no policy.
    max_deliveries: int = 0
    trace: bool = False


def sweep_config(seed: int, **overrides: Any) -> SimConfig:
    """The configuration the CI sweep uses for ``seed``: drawn from the seed itself, so
    ``python -m disq.testing.sim --seed N`` replays a failing CI seed with nothing else.
    Small and short on purpose: thousands of these run in CI."""
    r = random.Random(f"disq-sim-config:{seed}")
    nodes = r.choice((3, 3, 3, 4, 4, 5, 5, 6, 7))
    top = min(3, nodes)
    lo = r.choice((1, 2, 2, 3)) if top >= 3 else r.choice((1, 2))
    lo = min(lo, top)
    cfg = SimConfig(
        nodes=nodes,
        loss=r.choice((0.0, 0.0, 0.01, 0.05, 0.1, 0.2)),
        dup=r.choice((0.0, 0.0, 0.05, 0.1, 0.2)),
        delay_ms=(1, r.choice((3, 10, 30, 80, 200))),
        partitions=r.random() < 0.7,
        crashes=r.random() < 0.7,
        duration_ms=r.randint(1500, 3000),
        jobs=r.randint(12, 25),
        producers=r.randint(1, 3),
        consumers=r.randint(1, 3),
        repl=(lo, top),
        max_retry_s=r.choice((1, 1, 2)),
        at_most_once_prob=r.choice((0.0, 0.0, 0.1)),
        fsync_lost=False,
        clock_skew_ms=r.choice((0, 0, 50, 300)),
        view=r.choice(("swim", "swim", "oracle", "static")),
        max_down=r.choice((None, None, None, nodes)),  # sometimes the whole cluster goes down
        memory_pressure=r.random() < 0.25,
        leaving=r.random() < 0.2,
        pauses=r.random() < 0.2,
        enqueue_on_restart_prob=r.choice((0.0, 0.0, 0.5)),
        check_every=5,
    )
    # Drawn after every older field, so those stay what they were for each seed.
    if r.random() < 0.3:
        cfg = dataclasses.replace(cfg, idem_prob=r.choice((0.3, 0.6, 1.0)))
    if r.random() < 0.3:
        cfg = dataclasses.replace(cfg, beanstalk_jobs=r.randint(6, 14), jobs=cfg.jobs * 2 // 3)
    # Freezes: drawn last of all, so every field above keeps its value for each seed.
    if r.random() < 0.25:
        cfg = dataclasses.replace(cfg, freezes=True)
    # Schedules: drawn after the freezes, so every field above keeps its value for each seed.
    # Their seeds get clock skew of seconds between nodes and a longer chaos phase (more
    # ticks under the faults).
    if r.random() < SCHED_SHARE:
        cfg = dataclasses.replace(
            cfg,
            schedules=r.randint(1, 3),
            schedule_changes=r.random() < 0.3,
            clock_skew_ms=r.choice((500, 1000, 2000, 3000)),
            duration_ms=r.randint(3000, 6000),
            settle_ms=r.randint(8000, 12000),  # healthy ticks after the heal, SKIP's too
        )
    # A delivery limit: drawn after the schedules, so every field above keeps its value.
    if r.random() < DEAD_LETTER_SHARE:
        cfg = dataclasses.replace(cfg, max_deliveries=r.choice((1, 2, 3)))
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def config_diff(cfg: SimConfig) -> str:
    """Only the fields that differ from the defaults, as ``SimConfig`` keyword arguments."""
    base = SimConfig()
    parts = [
        f"{f.name}={getattr(cfg, f.name)!r}"
        for f in dataclasses.fields(SimConfig)
        if f.name != "trace" and getattr(cfg, f.name) != getattr(base, f.name)
    ]
    return ", ".join(parts) or "defaults"


def replay_command(seed: int, cfg: SimConfig) -> str:
    """The CLI line that replays this run: the seed's sweep config plus ``--set`` for every
    field that differs from it."""
    base = sweep_config(seed)
    sets = [
        f" --set {shlex.quote(f'{f.name}={getattr(cfg, f.name)!r}')}"
        for f in dataclasses.fields(SimConfig)
        if f.name != "trace" and getattr(cfg, f.name) != getattr(base, f.name)
    ]
    return f"python -m disq.testing.sim --seed {seed} --trace{''.join(sets)}"
