"""A Jepsen-style total-queue test against a local disq cluster.

The workload of aphyr's ``jepsen/disque`` harness (reference/anchors.md section 3), plus
dying consumers and a nemesis whose faults are checked to have taken effect:

* producers ``ADDJOB jepsen <unique int> 1000 REPLICATE 3 RETRY 1`` on random nodes
  (``--replicate``, ``--retry``); a job id is ``add-ok``; a replication timeout
  (``-NOREPL Timeout ...``) or a client timeout is ``add-info`` (indeterminate); a refused
  connect (never sent) or an up-front refusal (``-NOREPL Not enough reachable nodes``) is
  ``add-fail``;
* consumers ``GETJOB TIMEOUT 100 FROM jepsen`` + ``ACKJOB`` on random nodes; a delivery is
  recorded as soon as GETJOB returns it, before the ack. A seeded share of GETJOBs
  (``--abandon``, default 5%) is abandoned: the consumer records the delivery and an
  ``abandon`` event, never ACKs, and closes its connection, as a consumer that died would.
  RETRY must bring those jobs back;
* a seeded nemesis (:class:`Nemesis`): kill -9 + restart, SIGSTOP + SIGCONT, partitions
  into random halves, one-way cuts between random halves, slow links; never more than
  ``max_down`` (2) nodes killed or paused at once, so a job replicated 3 times always keeps
  a live copy. Each fault records ``f=effect`` when it was seen to take effect (the port
  refuses, a PING times out, a node flags a peer across the cut, the slow link's tc class
  held packets back) or ``f=no-effect`` and why; the report counts both per kind. Links are
  cut in network namespaces with tc when the lab can (root), else in-process with
  ``DEBUG DROP-PEERS`` (``partitions:`` in the summary says which, and why);
* at the end: heal, resume, restart the dead, wait until the cluster is whole, then drain
  every node (``GETJOB NOHANG`` + ``ACKJOB``) until all are empty for longer than 2x RETRY
  (unacked jobs come back after RETRY) and ``registered_jobs`` is 0, or a bound passes;
* check the history with :func:`cluster.checker.check`, giving it the jobs the drain left
  deliverable per node: valid means lost 0, unexpected 0, stranded 0 (abandoned and never
  delivered again) and nothing left on the nodes.

``python -m cluster.jepsen --nodes 5 --duration 60 --seed 1`` writes ``history.jsonl`` and
``report.json`` to ``--out`` (default ``jepsen-out/<time>-s<seed>/``, node logs under
``lab/``), prints the summary and exits 1 if the run is invalid, 2 if the cluster could not
be run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shlex
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster import checker
from cluster.lab import PAUSED, UP, Lab, LabError
from cluster.resp_client import RespClient, RespConnectError, RespError

NEMESES = ("kill", "pause", "partition", "cut", "slow")
LINK_FAULTS = frozenset({"partition", "cut", "slow"})

# Error replies that mean "refused, nothing was done". Anything else unknown stays
# indeterminate: calling a maybe-added job failed would hide a recovered one.
DEFINITE_ERRORS = frozenset({"ERR", "PAUSED", "OOM", "MAXLEN", "LEAVING", "LOADING"})

# Disque checks reachability before it creates anything, so this NOREPL is a refusal. The
# other NOREPLs (replication timed out, job expired while waiting) leave copies that may be
# delivered later: those stay indeterminate. If a refused job is ever delivered, the checker
# reports it as failed_but_delivered.
NOREPL_REFUSED = "NOREPL Not enough reachable nodes"

# Socket slack on top of the server-side timeouts: the reply to a 1000 ms ADDJOB may
# legitimately arrive a little after 1000 ms on a loaded machine.
CLIENT_SLACK_S = 2.0


@dataclass
class JepsenConfig:
    nodes: int = 5
    duration: float = 60.0
    seed: int = 0
    nemesis: tuple[str, ...] = NEMESES
    clients: int = 10  # half producers, half consumers
    rate: float = 50.0  # ADDJOBs per second, all producers together
    interval: float = 5.0  # mean seconds between nemesis steps (start or end a fault)
    max_down: int = 2  # killed + paused at once; capped at nodes - 1
    out_dir: Path | None = None
    base_port: int | None = None
    node_timeout_ms: int = 2000
    fsync: str = "everysec"
    node_cmd: list[str] | None = None
    queue: str = "jepsen"
    replicate: int = 3
    retry_s: int = 1
    abandon: float = 0.05  # share of GETJOBs whose consumer "dies": no ACK, connection closed
    network: str = "auto"  # the lab's: netns if possible, else in-process DEBUG DROP-PEERS
    slow_delay_ms: int = 200
    effect_timeout: float | None = None  # bound for a fault's effect; None: from node timeout
    add_timeout_ms: int = 1000
    heal_timeout: float = 60.0
    drain_timeout: float = 60.0
    ack_gc_wait: float = 10.0  # extra drain seconds for acked jobs to be garbage-collected

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir) if self.out_dir else None
        return d


@dataclass
class RunResult:
    report: checker.QueueReport
    out_dir: Path
    nemesis: dict[str, int]
    cluster_whole_after_heal: bool
    drain: dict[str, Any]
    ops: dict[str, int] = field(default_factory=dict)
    lab: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_faults: dict[str, str] = field(default_factory=dict)
    partitions: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.report.valid else 1


class History:
    """Thread-safe, append-only list of event dicts with a run-relative timestamp."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.counts: Counter[str] = Counter()

    def record(self, type: str, **fields: Any) -> None:
        ev = {"type": type, "time": round(time.monotonic() - self._t0, 4)}
        ev.update((k, v) for k, v in fields.items() if v is not None)
        with self._lock:
            self._events.append(ev)
            self.counts[type] += 1

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for ev in self.events():
                f.write(json.dumps(ev, separators=(",", ":")) + "\n")


def _value(body: bytes) -> int | str:
    # Payloads are decimal ints; anything else is kept verbatim and shows up as unexpected.
    try:
        return int(body)
    except ValueError:
        return body.decode("utf-8", "backslashreplace")


def _text(x: object) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


class Workload:
    """Producer and consumer threads sharing one history and one value counter."""

    def __init__(self, cfg: JepsenConfig, lab: Lab, history: History) -> None:
        self.cfg = cfg
        self.lab = lab
        self.history = history
        self.stop = threading.Event()
        self._values = itertools.count(1)
        self._values_lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.producers = 0

    def _client(self, cache: dict[int, RespClient], i: int, timeout: float) -> RespClient:
        c = cache.get(i)
        if c is None:
            c = cache[i] = RespClient(self.lab.node(i).host, self.lab.node(i).port, timeout=timeout)
        return c

    def start(self) -> None:
        producers = self.producers = max(1, self.cfg.clients // 2)
        consumers = max(1, self.cfg.clients - producers)
        roles = [(f"producer-{k}", k, self._producer) for k in range(producers)]
        roles += [(f"consumer-{k}", producers + k, self._consumer) for k in range(consumers)]
        for name, process, body in roles:
            t = threading.Thread(target=self._guarded, args=(body, process), name=name, daemon=True)
            self.threads.append(t)
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def _guarded(self, body: Callable[[int], None], process: int) -> None:
        # A client thread that dies of a bug would silently shrink the workload: record it.
        try:
            body(process)
        except Exception as exc:
            self.history.record("client-crash", process=process, error=repr(exc))
            raise

    def _producer(self, process: int) -> None:
        cfg = self.cfg
        rng = random.Random(f"{cfg.seed}/process/{process}")
        mean_gap = self.producers / cfg.rate if cfg.rate > 0 else 0.0
        timeout = cfg.add_timeout_ms / 1000 + CLIENT_SLACK_S
        clients: dict[int, RespClient] = {}
        try:
            while not self.stop.wait(rng.uniform(0, 2 * mean_gap)):
                i = rng.randrange(cfg.nodes)
                with self._values_lock:
                    value = next(self._values)
                self.history.record(checker.ADD_INVOKE, value=value, node=i, process=process)
                kind, fields = add_job(self._client(clients, i, timeout), cfg, value)
                self.history.record(kind, value=value, node=i, process=process, **fields)
        finally:
            for c in clients.values():
                c.close()

    def _consumer(self, process: int) -> None:
        cfg = self.cfg
        rng = random.Random(f"{cfg.seed}/process/{process}")
        clients: dict[int, RespClient] = {}
        try:
            while not self.stop.is_set():
                i = rng.randrange(cfg.nodes)
                c = self._client(clients, i, 0.1 + CLIENT_SLACK_S)
                try:
                    reply = c.call("GETJOB", "TIMEOUT", 100, "COUNT", 1, "FROM", cfg.queue)
                except (RespError, OSError) as exc:
                    self.history.record(
                        "dequeue-error",
                        node=i,
                        process=process,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    # A killed node refuses at once: do not spin on it.
                    self.stop.wait(0.1)
                    continue
                if not reply:
                    continue
                if rng.random() < cfg.abandon:
                    # This consumer "dies" holding the job: it had it (recorded), never ACKs,
                    # and its connection goes away. The job's RETRY must bring it back.
                    abandon(self.history, reply, node=i, process=process)
                    clients.pop(i).close()
                else:
                    consume(self.history, c, reply, node=i, process=process)
        finally:
            for c in clients.values():
                c.close()


def add_job(c: RespClient, cfg: JepsenConfig, value: int) -> tuple[str, dict[str, Any]]:
    """ADDJOB one value; classify the outcome as add-ok / add-fail / add-info."""
    try:
        reply = c.call(
            "ADDJOB", cfg.queue, str(value), cfg.add_timeout_ms,
            "REPLICATE", cfg.replicate, "RETRY", cfg.retry_s,
        )  # fmt: skip
    except RespError as exc:
        definite = exc.code in DEFINITE_ERRORS or exc.text.startswith(NOREPL_REFUSED)
        return (checker.ADD_FAIL if definite else checker.ADD_INFO), {"error": exc.text}
    except RespConnectError as exc:  # nothing was sent
        return checker.ADD_FAIL, {"error": f"connect: {exc.__cause__ or exc}"}
    except OSError as exc:  # sent, then timeout / reset: it may have happened
        return checker.ADD_INFO, {"error": f"{type(exc).__name__}: {exc}"}
    if isinstance(reply, str) and reply.startswith("D-"):
        return checker.ADD_OK, {"id": reply}
    return checker.ADD_INFO, {"error": f"odd reply {reply!r}"}


def abandon(history: History, reply: list[Any], *, node: int, process: int | str) -> None:
    """Record every job of a GETJOB reply as delivered, then as abandoned (no ACK follows)."""
    for item in reply:
        jid, value = _text(item[1]), _value(item[2])
        history.record(checker.DEQUEUE_OK, value=value, id=jid, node=node, process=process)
        history.record(checker.ABANDON, value=value, id=jid, node=node, process=process)


def consume(
    history: History, c: RespClient, reply: list[Any], *, node: int, process: int | str
) -> int:
    """Record every job of a GETJOB reply as delivered, then ACKJOB them all. Returns count."""
    ids = []
    for item in reply:
        _queue, jid, body = item[0], _text(item[1]), item[2]
        history.record(checker.DEQUEUE_OK, value=_value(body), id=jid, node=node, process=process)
        ids.append(jid)
    try:
        acked = c.call("ACKJOB", *ids, timeout=CLIENT_SLACK_S)
        history.record(checker.ACK_OK, node=node, process=process, ids=ids, acked=acked)
    except (RespError, OSError) as exc:
        # The job comes back after RETRY and is delivered again: a duplicate, not a loss.
        history.record(
            "ack-fail", node=node, process=process, ids=ids, error=f"{type(exc).__name__}: {exc}"
        )
    return len(ids)


@dataclass
class _Fault:
    """One fault in progress. ``settled`` is set once its effect was seen or its bound
    passed: a fault is not ended before that, so every fault gets its chance to be seen."""

    kind: str
    node: int | None = None
    groups: list[list[int]] | None = None
    links: list[tuple[int, int]] = field(default_factory=list)  # directed (from, to)
    settled: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)


class Nemesis:
    """Seeded fault schedule: every ``interval`` x U(0.5, 1.5) seconds start or end a fault.

    Kinds (``NEMESES``):

    * ``kill``: kill -9 a node, restart it when the fault ends; effect: its port refuses.
    * ``pause``: SIGSTOP, SIGCONT at the end; effect: a PING times out.
    * ``partition``: random halves, both ways; effect: a node on one side flags (HELLO
      priority > 1) a node of the other side that it saw ok just before the cut.
    * ``cut``: a one-way partition: everything from one random half to the other is
      dropped, the other way is fine; effect: as for partition (with SWIM both sides end up
      suspecting: one side's probes are lost, the other side's acks are). A cut of one link
      alone would not do: SWIM's indirect probes go around it and nobody is flagged.
    * ``slow``: a random pair of nodes, both directions slowed by ``slow_delay_ms`` (tc, so
      network namespaces only; skipped otherwise); effect: the slow link's tc class held
      packets back (netem: carried any; htb: ``overlimits`` > 0).

    Kinds are taken in a seeded-shuffled cycle, kinds never started yet first, so every
    enabled kind happens in a short run; targets are seeded random picks. Overlapping faults
    are allowed (a kill during a partition), within ``max_down`` nodes killed or paused at
    once and one link fault (partition, cut or slow) at a time. Each fault gets an observer
    thread that records a ``nemesis`` event ``f=effect`` when the fault took effect, or
    ``f=no-effect`` with the reason. What actually happens also depends on timing, so the
    history's ``nemesis`` events are the record, not the seed.
    """

    def __init__(self, cfg: JepsenConfig, lab: Lab, history: History) -> None:
        self.cfg = cfg
        self.lab = lab
        self.history = history
        self.rng = random.Random(f"{cfg.seed}/nemesis")
        self.kinds = list(cfg.nemesis)
        self.rng.shuffle(self.kinds)
        self._next_kind = 0
        self.max_down = max(0, min(cfg.max_down, cfg.nodes - 1))
        self.active: list[_Fault] = []
        self.counts: Counter[str] = Counter()
        # Per kind: started, effective (effect seen), no_effect (bound passed or ended first).
        self.faults: dict[str, Counter[str]] = {k: Counter() for k in self.kinds}
        self.skipped: dict[str, str] = {}
        self.effect_timeout = cfg.effect_timeout or max(10.0, 6 * cfg.node_timeout_ms / 1000)
        self._lock = threading.Lock()
        self._observers: list[threading.Thread] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        if "slow" in self.kinds and not lab.can_slow:
            self.skipped["slow"] = f"slow links need tc in namespaces; partitions: {lab.partitions}"

    def start(self) -> None:
        for kind, why in self.skipped.items():
            self._event("skip", kind=kind, why=why)
        if self.kinds:
            self.thread.start()

    def join(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def join_observers(self) -> None:
        for t in self._observers:
            t.join()

    def _run(self) -> None:
        while not self.stop.wait(self.cfg.interval * self.rng.uniform(0.5, 1.5)):
            self._restart_crashed()
            try:
                self.step()
            except Exception as exc:  # keep hurting: one failed fault must not end the run
                self._event("error", error=f"{type(exc).__name__}: {exc}")

    def _event(self, f: str, **kv: Any) -> None:
        with self._lock:
            self.counts[f] += 1
        self.history.record("nemesis", f=f, **kv)

    def _targets(self) -> list[int]:
        """Nodes a kill or pause may hit now: up ones, if another may go down."""
        if len(self.lab.down()) >= self.max_down:
            return []
        return [nd.index for nd in self.lab.nodes if nd.state == UP]

    def _can_start(self, kind: str) -> bool:
        if kind in self.skipped:
            return False
        if kind in LINK_FAULTS:
            # One link fault at a time: a slow link makes SWIM suspect too, and a cut seen
            # during one would be credited to the wrong fault.
            return self.cfg.nodes > 1 and not any(f.kind in LINK_FAULTS for f in self.active)
        return bool(self._targets())

    def step(self) -> None:
        order = [
            self.kinds[(self._next_kind + k) % len(self.kinds)] for k in range(len(self.kinds))
        ]
        startable = [k for k in order if self._can_start(k)]
        fresh = [k for k in startable if not self.faults[k]["started"]]
        ripe = [f for f in self.active if f.settled.is_set()]
        if fresh or (startable and (not ripe or self.rng.random() < 0.5)):
            kind = (fresh or startable)[0]
            self._next_kind = (self.kinds.index(kind) + 1) % len(self.kinds)
            self._start(kind)
        elif ripe:
            fault = ripe[self.rng.randrange(len(ripe))]
            self.active.remove(fault)
            self._end(fault)

    def _halves(self) -> list[list[int]]:
        """Random halves; preferably each with a node up, or the cut could not be seen."""
        nodes = list(range(self.cfg.nodes))
        half = len(nodes) // 2
        for _ in range(20):
            self.rng.shuffle(nodes)
            a, b = sorted(nodes[:half]), sorted(nodes[half:])
            if all(any(self.lab.node(i).state == UP for i in g) for g in (a, b)):
                break
        return [a, b]

    def _start(self, kind: str) -> None:
        with self._lock:
            self.faults[kind]["started"] += 1
        if kind in ("partition", "cut"):
            src, dst = self._halves()
            if self.rng.random() < 0.5:
                src, dst = dst, src
            links = [(i, j) for i in src for j in dst]
            if kind == "partition":
                links += [(j, i) for i, j in links]
            fault = _Fault(kind, groups=[src, dst], links=links)
            # Which cross-links look healthy now: the effect must be one of them going bad.
            baseline = self._healthy(fault.links)
            self.active.append(fault)
            if kind == "partition":
                self._event("partition", groups=[src, dst])
                self.lab.partition([src, dst])
            else:
                self._event("cut", src=src, dst=dst, one_way=True)
                for i, j in fault.links:
                    self.lab.cut(i, j, one_way=True)
            if baseline:
                self._observe(fault, lambda: self._flagged(baseline))
            else:
                # Every cross link already looked bad (nodes down, a heal not yet seen):
                # nothing this cut could change is observable.
                self._no_effect(fault, "no healthy cross link before the cut")
            return
        if kind == "slow":
            i, j = self.rng.sample(range(self.cfg.nodes), 2)
            fault = _Fault(kind, links=[(i, j), (j, i)])
            self.active.append(fault)
            self._event("slow", nodes=[i, j], delay_ms=self.cfg.slow_delay_ms)
            for x, y in fault.links:
                self.lab.slow(x, y, self.cfg.slow_delay_ms)
            self._observe(fault, lambda: self._held_back(fault.links))
            return
        i = self.rng.choice(self._targets())
        fault = _Fault(kind, node=i)
        self.active.append(fault)
        if kind == "kill":
            self._event("kill", node=i)
            self.lab.kill9(i)
            self._observe(fault, lambda: {"node": i} if self.lab.refuses(i) else None)
        else:
            self._event("pause", node=i)
            self.lab.pause(i)
            self._observe(fault, lambda: {"node": i} if self.lab.ping_times_out(i) else None)

    # -- effects --------------------------------------------------------------------------

    def _flags_if_up(self, a: int) -> dict[int, int] | None:
        """Node ``a``'s HELLO flags of its peers; None if it is down or did not answer."""
        if self.lab.node(a).state != UP:
            return None
        try:
            return self.lab.hello_flags(a)
        except (OSError, RespError, LabError, ValueError, IndexError, TypeError):
            return None

    def _healthy(self, links: list[tuple[int, int]]) -> set[tuple[int, int]]:
        """Of the links (a, b), those whose both ends are up and where a sees b as ok."""
        out = set()
        for a in sorted({a for a, _ in links}):
            flags = self._flags_if_up(a)
            if flags is None:
                continue
            out |= {
                (x, b)
                for x, b in links
                if x == a and flags.get(b) == 1 and self.lab.node(b).state == UP
            }
        # Either end may be the one to notice: watch both directions of every cut link.
        return out | {(b, a) for a, b in out}

    def _flagged(self, baseline: set[tuple[int, int]]) -> dict[str, Any] | None:
        """A link of ``baseline`` whose first end now flags the second (both still up)."""
        for a in sorted({a for a, _ in baseline}):
            flags = self._flags_if_up(a)
            if flags is None:
                continue
            for x, b in sorted(baseline):
                if x == a and flags.get(b, 1) > 1 and self.lab.node(b).state == UP:
                    return {"observer": a, "peer": b, "priority": flags[b]}
        return None

    def _held_back(self, links: list[tuple[int, int]]) -> dict[str, Any] | None:
        netem = self.lab.net is not None and self.lab.net.slow_mode == "netem"
        for i, j in links:
            packets, overlimits = self.lab.slow_packets(i, j)
            if (packets if netem else overlimits) > 0:
                return {"src": i, "dst": j, "packets": packets, "overlimits": overlimits}
        return None

    def _no_effect(self, fault: _Fault, why: str) -> None:
        with self._lock:
            self.faults[fault.kind]["no_effect"] += 1
        self._event("no-effect", kind=fault.kind, after_s=0.0, why=why)
        fault.settled.set()

    def _observe(self, fault: _Fault, probe: Callable[[], dict[str, Any] | None]) -> None:
        """Poll ``probe`` in a thread until it returns details (the effect), the bound passes,
        or the fault ends; record which, and settle the fault."""
        started = time.monotonic()

        def watch() -> None:
            deadline = started + self.effect_timeout
            seen: dict[str, Any] | None = None
            why = "bound"
            try:
                while True:
                    try:
                        seen = probe()
                    except (OSError, RespError, LabError, ValueError) as exc:
                        why = f"probe failed: {exc}"
                        seen = None
                    if seen is not None or fault.ended.is_set() or time.monotonic() > deadline:
                        break
                    fault.ended.wait(0.1)
                after = round(time.monotonic() - started, 2)
                if seen is not None:
                    with self._lock:
                        self.faults[fault.kind]["effective"] += 1
                    self._event("effect", kind=fault.kind, after_s=after, **seen)
                else:
                    why = "ended first" if fault.ended.is_set() else why
                    with self._lock:
                        self.faults[fault.kind]["no_effect"] += 1
                    self._event("no-effect", kind=fault.kind, after_s=after, why=why)
            except Exception as exc:  # an observer bug must not leave the fault unsettled
                self._event("error", error=f"effect observer: {type(exc).__name__}: {exc}")
            finally:
                fault.settled.set()

        t = threading.Thread(target=watch, name=f"effect-{fault.kind}", daemon=True)
        self._observers.append(t)
        t.start()

    # -- ending ---------------------------------------------------------------------------

    def _end(self, fault: _Fault) -> None:
        fault.ended.set()
        if fault.kind == "partition":
            self._event("heal")
            self.lab.heal_partition()
        elif fault.kind == "cut":
            self._event("uncut", src=(fault.groups or [[]])[0])
            for i, j in fault.links:
                self.lab.uncut(i, j)
        elif fault.kind == "slow":
            self._event("unslow", nodes=sorted({i for i, _ in fault.links}))
            for i, j in fault.links:
                self.lab.unslow(i, j)
        elif fault.kind == "kill":
            assert fault.node is not None
            self._restart(fault.node)
        elif fault.kind == "pause":
            assert fault.node is not None
            if self.lab.node(fault.node).state == PAUSED:
                self._event("resume", node=fault.node)
                self.lab.resume(fault.node)

    def _restart(self, i: int) -> None:
        self._event("restart", node=i)
        try:
            self.lab.restart(i)
        except LabError as exc:
            # A node that cannot come back from kill -9 (AOF replay failure) is a finding.
            self._event("restart-failed", node=i, error=str(exc)[:2000])

    def _restart_crashed(self) -> None:
        for i in self.lab.check_crashes():
            # Not our doing: the node died by itself. Record it, remove any fault on it, and
            # bring it back so the run keeps its shape.
            self._event("crash", node=i, log=self.lab.node(i).log_tail(15)[-2000:])
            for f in self.active:
                if f.node == i:
                    f.ended.set()
            self.active = [f for f in self.active if f.node != i]
            self._restart(i)

    def heal_all(self) -> None:
        """End every fault. Resume first, heal, then restart the dead, so that a restarted
        node comes up into a healed network."""
        for f in self.active:
            f.ended.set()
        self.join_observers()
        self._restart_crashed()
        for nd in self.lab.nodes:
            if nd.state == PAUSED:
                self._event("resume", node=nd.index)
                self.lab.resume(nd.index)
        if self.lab.partitioned:
            self._event("heal")
            self.lab.heal()
        for nd in self.lab.nodes:
            if nd.state != UP:
                self._restart(nd.index)
        self.active = []

    def fault_counts(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {
                k: {n: c[n] for n in ("started", "effective", "no_effect")}
                for k, c in self.faults.items()
            }


def drain(cfg: JepsenConfig, lab: Lab, history: History) -> dict[str, Any]:
    """Empty every node with GETJOB NOHANG + ACKJOB until nothing is left to deliver.

    Done when the rounds have been quiet for more than 2x RETRY (a job delivered to a consumer
    that died, or whose ACK was lost, is invisible until its requeue timer fires) and no
    node holds a job of the queue in a deliverable state (``JSCAN ... STATE wait-repl|active
    |queued``). Then ``registered_jobs`` is waited for down to 0, at most ``ack_gc_wait``
    more seconds: the jobs it still counts are acked ones whose ack GC is pending, a
    liveness matter reported, not a delivery one. ``drain_timeout`` bounds it all.
    """
    clients = [RespClient(nd.host, nd.port, timeout=CLIENT_SLACK_S + 1) for nd in lab.nodes]
    start = time.monotonic()
    last_delivery = start
    settled_at: float | None = None  # when nothing deliverable was left anywhere
    min_quiet = 2 * cfg.retry_s + 1.0
    rounds = empty_rounds = delivered = errors = 0
    registered: dict[int, int | str] = {}
    pending: dict[int, int | str] = {}
    try:
        while True:
            rounds += 1
            got = 0
            for nd, c in zip(lab.nodes, clients, strict=True):
                while True:
                    try:
                        reply = c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", cfg.queue)
                    except (RespError, OSError) as exc:
                        errors += 1
                        err = f"{type(exc).__name__}: {exc}"
                        history.record("dequeue-error", node=nd.index, process="drain", error=err)
                        break
                    if not reply:
                        break
                    got += consume(history, c, reply, node=nd.index, process="drain")
            now = time.monotonic()
            delivered += got
            if got:
                last_delivery = now
                empty_rounds = 0
                settled_at = None
            else:
                empty_rounds += 1
            if empty_rounds >= 3 and now - last_delivery >= min_quiet:
                pending = _pending_jobs(lab, cfg.queue)
                registered = _registered_jobs(lab)
                if all(v == 0 for v in pending.values()):
                    settled_at = settled_at or now
                    if all(v == 0 for v in registered.values()):
                        break
                    if now - settled_at >= cfg.ack_gc_wait:
                        break
                else:
                    settled_at = None
            if now - start >= cfg.drain_timeout:
                pending = _pending_jobs(lab, cfg.queue)
                registered = _registered_jobs(lab)
                break
            time.sleep(0.2)
    finally:
        for c in clients:
            c.close()
    return {
        "seconds": round(time.monotonic() - start, 2),
        "rounds": rounds,
        "delivered": delivered,
        "errors": errors,
        # Jobs of the queue still wait-repl / active / queued per node: should be 0.
        "final_pending_jobs": {str(k): v for k, v in pending.items()},
        # Every registered job, acked ones awaiting GC included.
        "final_registered_jobs": {str(k): v for k, v in registered.items()},
        "clean": all(v == 0 for v in pending.values()),
        "acks_collected": all(v == 0 for v in registered.values()),
    }


def _registered_jobs(lab: Lab) -> dict[int, int | str]:
    out: dict[int, int | str] = {}
    for nd in lab.nodes:
        try:
            out[nd.index] = int(lab.info(nd.index, "jobs").get("registered_jobs", -1))
        except (OSError, RespError, ValueError) as exc:
            out[nd.index] = f"error: {exc}"
    return out


def _pending_jobs(lab: Lab, queue: str) -> dict[int, int | str]:
    """Per node, how many jobs of ``queue`` are in a state that can still be delivered."""
    out: dict[int, int | str] = {}
    for nd in lab.nodes:
        try:
            ids: set[str] = set()
            cursor: object = "0"
            for _ in range(10_000):  # a cursor that never returns to 0 must not hang the run
                reply: Any = nd.call(
                    "JSCAN", _text(cursor), "COUNT", 1000, "BUSYLOOP", "QUEUE", queue,
                    "STATE", "wait-repl", "STATE", "active", "STATE", "queued", "REPLY", "id",
                )  # fmt: skip
                cursor, batch = reply[0], reply[1]
                ids.update(_text(x) for x in batch)
                if _text(cursor) == "0":
                    break
            out[nd.index] = len(ids)
        except (OSError, RespError, ValueError, TypeError, IndexError) as exc:
            out[nd.index] = f"error: {exc}"
    return out


def default_out_dir(seed: int) -> Path:
    return Path("jepsen-out") / f"{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"


def run(cfg: JepsenConfig, *, log: Any = print) -> RunResult:
    """One whole run: start, hurt, heal, drain, check, write files. Raises LabError if the
    cluster cannot be started at all."""
    for k in cfg.nemesis:
        if k not in NEMESES:
            raise ValueError(f"unknown nemesis {k!r}; choose from {', '.join(NEMESES)}")
    if not 0.0 <= cfg.abandon <= 1.0:
        raise ValueError(f"abandon is a share of GETJOBs, 0..1, not {cfg.abandon}")
    out_dir = Path(cfg.out_dir or default_out_dir(cfg.seed)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    history = History()
    lab = Lab(
        cfg.nodes,
        out_dir / "lab",
        cfg.base_port,
        node_timeout_ms=cfg.node_timeout_ms,
        fsync=cfg.fsync,
        node_cmd=cfg.node_cmd,
        network=cfg.network,
    )
    log(
        f"jepsen: {cfg.nodes} nodes, {cfg.duration:.0f}s, seed {cfg.seed}, "
        f"nemesis {','.join(cfg.nemesis) or 'none'}, out {out_dir}"
    )
    whole = False
    drained: dict[str, Any] = {}
    nemesis: Nemesis | None = None
    try:
        with lab:
            log(
                f"jepsen: cluster formed on {lab.node(0).host}.., ports "
                f"{lab.base_port}..{lab.base_port + cfg.nodes - 1}; partitions: {lab.partitions}"
            )
            workload = Workload(cfg, lab, history)
            nemesis = Nemesis(cfg, lab, history)
            workload.start()
            nemesis.start()
            try:
                time.sleep(cfg.duration)
            finally:
                nemesis.join()
                workload.join()
            log(f"jepsen: workload done {dict(history.counts)}; healing")
            nemesis.heal_all()
            try:
                lab.wait_cluster(cfg.heal_timeout)
                whole = True
            except LabError as exc:
                history.record("nemesis", f="not-whole", error=str(exc))
                log(f"jepsen: WARNING {exc}")
            log("jepsen: draining")
            drained = drain(cfg, lab, history)
    finally:
        if nemesis is not None:
            for f in nemesis.active:
                f.ended.set()
            nemesis.join_observers()
        history.write(out_dir / "history.jsonl")

    # What the drain left deliverable on the nodes is part of the verdict.
    report = checker.check(history.events(), left_on_nodes=drained.get("final_pending_jobs"))
    lab_stats = asdict(lab.stats)
    result = RunResult(
        report=report,
        out_dir=out_dir,
        nemesis=dict(nemesis.counts) if nemesis else {},
        cluster_whole_after_heal=whole,
        drain=drained,
        ops=dict(history.counts),
        lab=lab_stats,
        faults=nemesis.fault_counts() if nemesis else {},
        skipped_faults=dict(nemesis.skipped) if nemesis else {},
        partitions=lab.partitions,
    )
    (out_dir / "report.json").write_text(
        json.dumps(
            {
                "config": cfg.to_dict(),
                "checker": report.to_dict(),
                "partitions": lab.partitions,
                "network": lab.net.describe() if lab.net is not None else None,
                "nemesis": result.nemesis,
                "faults": result.faults,
                "skipped_faults": result.skipped_faults,
                "cluster_whole_after_heal": whole,
                "drain": drained,
                "ops": result.ops,
                "lab": lab_stats,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    return result


def _summary(result: RunResult) -> str:
    lines = [result.report.summary()]
    lines.append(f"partitions: {result.partitions}")
    lines.append(
        "nemesis: " + (", ".join(f"{k}={v}" for k, v in sorted(result.nemesis.items())) or "none")
    )
    if result.faults:
        lines.append(
            "faults (started/effect seen/not seen): "
            + ", ".join(
                f"{k} {c['started']}/{c['effective']}/{c['no_effect']}"
                for k, c in sorted(result.faults.items())
            )
        )
    for kind, why in sorted(result.skipped_faults.items()):
        lines.append(f"skipped: {kind} ({why})")
    d = result.drain
    lines.append(
        f"drain: {d.get('delivered')} delivered in {d.get('seconds')}s; left per node: "
        f"deliverable {d.get('final_pending_jobs')}, "
        f"registered (acked ones included) {d.get('final_registered_jobs')}"
    )
    if d and not d.get("clean"):
        lines.append("INVALID: jobs were still deliverable when the drain gave up")
    if not result.cluster_whole_after_heal:
        lines.append("WARNING: the cluster was not whole after healing (see report.json)")
    crashes = result.lab.get("crashes", 0)
    if crashes:
        lines.append(f"WARNING: {crashes} node crash(es) nobody asked for; see node logs")
    if result.lab.get("id_changes"):
        lines.append(f"WARNING: node ids changed on restart: {result.lab['id_changes']}")
    lines.append(f"files: {result.out_dir}/history.jsonl, report.json, lab/")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m cluster.jepsen",
        description="Jepsen-style total-queue test of a local cluster.",
    )
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of workload")
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument(
        "--nemesis",
        default=",".join(NEMESES),
        help=f"comma list of {','.join(NEMESES)}; 'none' for a calm run",
    )
    p.add_argument("--replicate", type=int, default=3, help="ADDJOB REPLICATE")
    p.add_argument("--retry", type=int, default=1, help="ADDJOB RETRY, seconds")
    p.add_argument(
        "--abandon",
        type=float,
        default=0.05,
        help="share of GETJOBs whose consumer dies (no ACK, connection closed)",
    )
    p.add_argument(
        "--net",
        choices=("auto", "netns", "inprocess"),
        default="auto",
        help="how links are cut: netns (tc in a namespace per node, root only), inprocess "
        "(DEBUG DROP-PEERS), auto (netns if possible)",
    )
    p.add_argument("--slow-delay", type=int, default=200, help="ms, for the slow nemesis")
    p.add_argument("--clients", type=int, default=10, help="half produce, half consume")
    p.add_argument("--rate", type=float, default=50.0, help="ADDJOB/s, all producers")
    p.add_argument("--interval", type=float, default=5.0, help="mean s between nemesis steps")
    p.add_argument("--max-down", type=int, default=2)
    p.add_argument("--out", type=Path, help="output dir (default jepsen-out/<time>-s<seed>)")
    p.add_argument("--base-port", type=int, default=0)
    p.add_argument("--node-timeout", type=int, default=2000, help="cluster-node-timeout, ms")
    p.add_argument("--fsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument("--node-cmd", help="command that runs a node (conf path appended)")
    p.add_argument("--drain-timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    nemesis = tuple(k for k in args.nemesis.split(",") if k and k != "none")
    cfg = JepsenConfig(
        nodes=args.nodes,
        duration=args.duration,
        seed=seed,
        nemesis=nemesis,
        clients=args.clients,
        rate=args.rate,
        interval=args.interval,
        max_down=args.max_down,
        out_dir=args.out,
        base_port=args.base_port or None,
        node_timeout_ms=args.node_timeout,
        fsync=args.fsync,
        node_cmd=shlex.split(args.node_cmd) if args.node_cmd else None,
        drain_timeout=args.drain_timeout,
        replicate=args.replicate,
        retry_s=args.retry,
        abandon=args.abandon,
        network=args.net,
        slow_delay_ms=args.slow_delay,
    )
    try:
        result = run(cfg)
    except LabError as exc:
        print(f"jepsen: could not run the cluster: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"jepsen: {exc}", file=sys.stderr)
        return 2
    print(_summary(result))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
