"""The nemesis: partitions, crashes and restarts, freezes (SIGSTOP) and thaws, AOF rewrites,
memory warnings, LEAVING, PAUSE (random from the seed or a fixed ``nemesis_script``), the
once-a-second fsync of ``fsync_lost``, and the heal at the end of the chaos phase."""

from __future__ import annotations

from collections.abc import Callable

from disq.core.messages import JobData
from disq.persistence.cluster_records import to_core_records
from disq.persistence.framing import iter_frames
from disq.testing.sim.config import INF, T0_MS
from disq.testing.sim.model import SimNode
from disq.testing.sim.step import NodeStep
from disq.testing.sim.world import GONE, HOLDS, World

StartNode = Callable[[SimNode, bool], None]  # (node, fresh)
OnCrash = Callable[[SimNode], None]


class Nemesis:
    """The faults, and the operator who repairs everything at the end of the chaos phase."""

    def __init__(
        self, world: World, stepper: NodeStep, start_node: StartNode, on_crash: tuple[OnCrash, ...]
    ) -> None:
        self.w = world
        self.stepper = stepper
        self._start_node = start_node  # a restart builds the node anew
        self._on_crash = on_crash  # the clients whose connections a crash resets

    def start(self) -> None:
        """The nemesis (scripted or random) and the fsync clock of ``fsync_lost``."""
        w = self.w
        cfg = w.cfg
        if cfg.nemesis_script is not None:
            for at, action, args in cfg.nemesis_script:
                w.at(w.t_clients + at, self._scripted, (action, args))
        elif (
            cfg.partitions
            or cfg.crashes
            or cfg.aof_rewrite_prob > 0
            or cfg.memory_pressure
            or cfg.leaving
            or cfg.pauses
            or cfg.freezes
        ):
            w.at(w.t_clients + self._nemesis_gap(), self._nemesis, None)
        if cfg.fsync_lost:
            w.at(T0_MS + w.rng.randint(0, 999), self._fsync, None)

    def _fsync(self, _: object) -> None:
        for nd in self.w.nodes:
            if nd.up and not nd.frozen:  # a stopped process calls no fsync
                nd.synced = len(nd.aof)
        if self.w.now < self.w.t_give_up:
            self.w.at(self.w.now + 1000, self._fsync, None)

    def _nemesis_gap(self) -> int:
        lo, hi = self.w.cfg.nemesis_every_ms
        return self.w.rng.randint(lo, hi)

    def _nemesis(self, _: object) -> None:
        if self.w.now >= self.w.t_heal:
            return
        cfg = self.w.cfg
        rng = self.w.rng
        up = self.w.up_nodes()  # up and not frozen
        down = [nd for nd in self.w.nodes if not nd.up]
        frozen = [nd for nd in self.w.nodes if nd.frozen]
        actions: list[str] = []
        if cfg.partitions:
            actions += ["halves", "isolate", "heal"]
        if cfg.crashes:
            if down:
                actions += ["restart", "restart"]
            if len(down) + len(frozen) < self.w.max_down and len(up) > 1:
                actions += ["crash"]
        if cfg.freezes:  # a frozen node counts in max_down, as a crashed one
            if frozen:
                actions += ["thaw", "thaw"]
            if len(down) + len(frozen) < self.w.max_down and len(up) > 1:
                actions += ["freeze"]
        if up:
            if cfg.memory_pressure:
                actions += ["pressure"]
            if cfg.leaving:
                actions += ["leave"]
            if cfg.pauses:
                actions += ["pause"]
        if cfg.aof_rewrite_prob > 0 and rng.random() < cfg.aof_rewrite_prob:
            actions = ["rewrite"]
        if actions:
            action = rng.choice(actions)
            n = len(self.w.nodes)
            if action == "halves":
                order = list(range(n))
                rng.shuffle(order)
                k = rng.randint(1, n - 1)
                self._partition([order[:k], order[k:]])
            elif action == "isolate":
                i = rng.randrange(n)
                self._partition([[i], [j for j in range(n) if j != i]])
            elif action == "heal":
                self._partition([list(range(n))])
            elif action == "crash":
                self._crash(rng.choice(up))
            elif action == "restart":
                self._restart(rng.choice(down))
            elif action == "freeze":
                self._freeze(rng.choice(up))
            elif action == "thaw":
                self._thaw(rng.choice(frozen))
            elif action == "rewrite" and up:
                self._rewrite(rng.choice(up))
            elif action == "pressure":
                nd = rng.choice(up)
                self._set_pressure(nd, 0 if self.w.core(nd).memory.warning else 1)
            elif action == "leave":
                nd = rng.choice(up)
                self._set_leaving(nd, nd.id not in self.w.leaving)
            elif action == "pause":
                nd = rng.choice(up)
                queue = rng.choice(self.w.cfg.queues)
                self._pause(nd, queue, rng.choice((0, 1, 2, 3, 3)), bcast=True)
        self.w.at(self.w.now + self._nemesis_gap(), self._nemesis, None)

    def _scripted(self, arg: tuple[str, tuple[int, ...]]) -> None:
        action, args = arg
        n = len(self.w.nodes)
        if action == "isolate":
            i = args[0]
            self._partition([[i], [j for j in range(n) if j != i]])
        elif action == "split":  # args: the nodes of one side
            self._partition([list(args), [j for j in range(n) if j not in args]])
        elif action == "heal":
            self._partition([list(range(n))])
        elif action == "crash":
            for i in args:
                if self.w.nodes[i].up:
                    self._crash(self.w.nodes[i])
        elif action == "crash_all":
            for nd in self.w.nodes:
                if nd.up:
                    self._crash(nd)
        elif action == "freeze":
            for i in args:
                if self.w.nodes[i].up and not self.w.nodes[i].frozen:
                    self._freeze(self.w.nodes[i])
        elif action == "thaw":
            for i in args:
                if self.w.nodes[i].frozen:
                    self._thaw(self.w.nodes[i])
        elif action == "restart":
            for i in args:
                if not self.w.nodes[i].up:
                    self._restart(self.w.nodes[i])
        elif action == "restart_all":
            for nd in self.w.nodes:
                if not nd.up:
                    self._restart(nd)
        elif action == "rewrite":
            for i in args:
                if self.w.nodes[i].up and not self.w.nodes[i].frozen:
                    self._rewrite(self.w.nodes[i])
        elif action in ("pressure", "relief"):
            for i in args:
                if self.w.nodes[i].up and not self.w.nodes[i].frozen:
                    self._set_pressure(self.w.nodes[i], 1 if action == "pressure" else 0)
        elif action in ("leave", "stay"):
            for i in args:
                if self.w.nodes[i].up and not self.w.nodes[i].frozen:
                    self._set_leaving(self.w.nodes[i], action == "leave")
        else:
            raise ValueError(f"unknown nemesis action {action!r}")

    def _partition(self, groups: list[list[int]]) -> None:
        for g, members in enumerate(groups):
            for i in members:
                self.w.side[i] = g
        self.w.note_availability()
        if len(groups) > 1:
            self.w.stats["partitions"] += 1
        else:
            self.w.stats["heals"] += 1
        if self.w.tr:
            desc = " | ".join(",".join(f"n{i}" for i in sorted(g)) for g in groups)
            self.w.t(f"NEMESIS partition [{desc}]")

    def _crash(self, nd: SimNode) -> None:
        if nd.frozen:
            # Not modelled (what it had buffered would be lost with it): thaw it first.
            raise ValueError(f"{nd.name} is frozen: thaw it before crashing it")
        self.w.stats["crashes"] += 1
        if nd.member is not None:
            # disq-node keeps its membership snapshot in the data dir.
            nd.snapshot = nd.member.snapshot()
        lost: list[tuple[int, bytes]] = []
        if self.w.cfg.fsync_lost and nd.synced < len(nd.aof):
            lost = nd.aof[nd.synced :]
            del nd.aof[nd.synced :]
        if self.w.tr:
            extra = f", {len(lost)} unsynced AOF records lost" if lost else ""
            self.w.t(f"NEMESIS crash {nd.name}{extra}")
        nd.up = False
        nd.gen += 1
        nd.nc = None
        nd.core = None
        nd.member = None
        nd.view = None
        nd.wake_at = INF
        for reset in self._on_crash:
            reset(nd)
        self.w.note_availability()
        if lost:
            self._note_lost(nd, lost)

    def _note_lost(self, nd: SimNode, lost_frames: list[tuple[int, bytes]]) -> None:
        """fsync_lost: the node now holds whatever its surviving AOF says."""
        touched: set[str] = set()
        for kind, payload in to_core_records(lost_frames):
            if kind == "IDEMKEY" or kind == "KEYVOTE":
                continue
            if kind == "LOADJOB":
                assert isinstance(payload, JobData)
                self.w.lost_load.setdefault(payload.id, set()).add(nd.idx)
                touched.add(payload.id)
            else:
                assert isinstance(payload, str)
                self.w.lost_del.add(payload)
                touched.add(payload)
        latest: dict[str, int] = {}
        for kind, payload in to_core_records(nd.aof):
            if kind == "IDEMKEY" or kind == "KEYVOTE":
                continue
            jid = payload.id if isinstance(payload, JobData) else str(payload)
            if jid in touched:
                latest[jid] = HOLDS if kind == "LOADJOB" else GONE
        for jid in sorted(touched):
            self.w.copies.setdefault(jid, []).append((self.w.step, nd.idx, latest.get(jid, GONE)))

    def _restart(self, nd: SimNode) -> None:
        self.w.stats["restarts"] += 1
        if self.w.tr:
            self.w.t(f"NEMESIS restart {nd.name}")
        nd.synced = len(nd.aof)
        self._start_node(nd, False)
        self.w.note_availability()

    def _freeze(self, nd: SimNode) -> None:
        """SIGSTOP: the node takes no steps and runs no timers; what reaches it (messages,
        client commands) waits in order, its own output is not flushed, its blocked clients
        wait. Messages it sent before are already on the wire and arrive."""
        self.w.stats["freezes"] += 1
        nd.frozen = True
        self.w.note_availability()
        if self.w.tr:
            self.w.t(f"NEMESIS freeze {nd.name}")

    def _thaw(self, nd: SimNode) -> None:
        """SIGCONT: the node reads what waited for it, in arrival order, then its timers
        (late: its clock moved on) run."""
        nd.frozen = False
        self.w.note_availability()
        held, nd.held = nd.held, []
        if self.w.tr:
            self.w.t(f"NEMESIS thaw {nd.name}: {len(held)} inputs waited")
        for fn in held:
            fn()
        self.stepper.schedule_tick(nd)

    def _rewrite(self, nd: SimNode) -> None:
        """Background AOF rewrite: the file is replaced by a dump of the live jobs."""
        self.w.stats["aof_rewrites"] += 1
        nc = nd.nc
        assert nc is not None and nc.disque is not None
        now = self.w.now + nd.skew
        b = nc.beanstalk
        framed = [b.meta_record(), *b.snapshot_records(list(b.jobs))]
        framed += self.w.guard(nd, nc.disque.aof.snapshot_records, now)
        if nc.scheduler is not None:  # as aof_service does: schedules and last ticks stay
            framed += nc.scheduler.snapshot_records()
        if nc.routes is not None:  # and the routes table
            framed += nc.routes.snapshot_records()
        records = list(iter_frames(b"".join(framed)))
        nd.aof = records
        nd.synced = len(records)  # written, fsynced, renamed
        if self.w.tr:
            self.w.t(f"NEMESIS aof-rewrite {nd.name}: {len(records)} records")

    def _set_pressure(self, nd: SimNode, level: int) -> None:
        """Memory warning 1: the node refuses REPLJOBs and replicates ADDJOBs externally."""
        self.w.stats["pressure"] += level
        core = self.w.core(nd)
        core.forced_warning = core.memory.warning = level
        self.w.note_availability()
        if self.w.tr:
            self.w.t(f"NEMESIS memory-warning {nd.name} {level}")

    def _set_leaving(self, nd: SimNode, leaving: bool) -> None:
        self.w.stats["leaving"] += leaving
        if leaving:
            self.w.leaving.add(nd.id)
        else:
            self.w.leaving.discard(nd.id)
        self.w.note_availability()
        if nd.member is not None:
            self.w.guard(nd, nd.member.set_leaving, self.w.now + nd.skew, leaving)
        if self.w.tr:
            self.w.t(f"NEMESIS leaving {nd.name} {'yes' if leaving else 'no'}")
        self.stepper.flush(nd)

    def _pause(self, nd: SimNode, queue: str, flags: int, bcast: bool) -> None:
        self.w.stats["pauses"] += bool(flags)
        nc = self.w.node_core(nd)
        self.w.guard(nd, nc.pause, self.w.now + nd.skew, queue, flags, bcast)
        if self.w.tr:
            self.w.t(f"NEMESIS pause {nd.name} {queue} {flags}{' bcast' if bcast else ''}")
        self.stepper.flush(nd)

    def heal_all(self, _: object) -> None:
        if self.w.tr:
            self.w.t("END chaos: heal, restart every node")
        self._partition([list(range(len(self.w.nodes)))])
        for nd in self.w.nodes:
            if nd.frozen:
                self._thaw(nd)
        for nd in self.w.nodes:
            if not nd.up:
                self._restart(nd)
        self.normalise()

    def normalise(self) -> None:
        """What an operator does after the storm: no memory warning, nobody leaving, every
        queue unpaused on every node (locally: a broadcast PAUSE might be lost)."""
        for nd in self.w.nodes:
            core = self.w.core(nd)
            if core.memory.warning:
                self._set_pressure(nd, 0)
            if nd.id in self.w.leaving or (nd.member is not None and nd.member.leaving):
                self._set_leaving(nd, False)
            for name, q in sorted(core.queues.items()):
                if q.pause:
                    self._pause(nd, name, 0, bcast=False)
