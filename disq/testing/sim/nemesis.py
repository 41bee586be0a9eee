"""The nemesis: partitions, crashes and restarts, freezes (SIGSTOP) and thaws, AOF rewrites,
memory warnings, LEAVING, PAUSE (random from the seed or a fixed ``nemesis_script``), the
once-a-second fsync of ``fsync_lost``, and the heal at the end of the chaos phase."""

from __future__ import annotations

from disq.core.messages import JobData
from disq.persistence.cluster_records import to_core_records
from disq.persistence.framing import iter_frames
from disq.testing.sim.base import GONE, HOLDS, SimBase
from disq.testing.sim.config import INF
from disq.testing.sim.model import SimNode


class NemesisMixin(SimBase):
    def _fsync(self, _: object) -> None:
        for nd in self.nodes:
            if nd.up and not nd.frozen:  # a stopped process calls no fsync
                nd.synced = len(nd.aof)
        if self.now < self.t_give_up:
            self._at(self.now + 1000, self._fsync, None)

    def _nemesis_gap(self) -> int:
        lo, hi = self.cfg.nemesis_every_ms
        return self.rng.randint(lo, hi)

    def _nemesis(self, _: object) -> None:
        if self.now >= self.t_heal:
            return
        cfg = self.cfg
        rng = self.rng
        up = self._up_nodes()  # up and not frozen
        down = [nd for nd in self.nodes if not nd.up]
        frozen = [nd for nd in self.nodes if nd.frozen]
        actions: list[str] = []
        if cfg.partitions:
            actions += ["halves", "isolate", "heal"]
        if cfg.crashes:
            if down:
                actions += ["restart", "restart"]
            if len(down) + len(frozen) < self.max_down and len(up) > 1:
                actions += ["crash"]
        if cfg.freezes:  # a frozen node counts in max_down, as a crashed one
            if frozen:
                actions += ["thaw", "thaw"]
            if len(down) + len(frozen) < self.max_down and len(up) > 1:
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
            n = len(self.nodes)
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
                self._set_pressure(nd, 0 if self._core(nd).memory.warning else 1)
            elif action == "leave":
                nd = rng.choice(up)
                self._set_leaving(nd, nd.id not in self.leaving)
            elif action == "pause":
                nd = rng.choice(up)
                queue = rng.choice(self.cfg.queues)
                self._pause(nd, queue, rng.choice((0, 1, 2, 3, 3)), bcast=True)
        self._at(self.now + self._nemesis_gap(), self._nemesis, None)

    def _scripted(self, arg: tuple[str, tuple[int, ...]]) -> None:
        action, args = arg
        n = len(self.nodes)
        if action == "isolate":
            i = args[0]
            self._partition([[i], [j for j in range(n) if j != i]])
        elif action == "split":  # args: the nodes of one side
            self._partition([list(args), [j for j in range(n) if j not in args]])
        elif action == "heal":
            self._partition([list(range(n))])
        elif action == "crash":
            for i in args:
                if self.nodes[i].up:
                    self._crash(self.nodes[i])
        elif action == "crash_all":
            for nd in self.nodes:
                if nd.up:
                    self._crash(nd)
        elif action == "freeze":
            for i in args:
                if self.nodes[i].up and not self.nodes[i].frozen:
                    self._freeze(self.nodes[i])
        elif action == "thaw":
            for i in args:
                if self.nodes[i].frozen:
                    self._thaw(self.nodes[i])
        elif action == "restart":
            for i in args:
                if not self.nodes[i].up:
                    self._restart(self.nodes[i])
        elif action == "restart_all":
            for nd in self.nodes:
                if not nd.up:
                    self._restart(nd)
        elif action == "rewrite":
            for i in args:
                if self.nodes[i].up and not self.nodes[i].frozen:
                    self._rewrite(self.nodes[i])
        elif action in ("pressure", "relief"):
            for i in args:
                if self.nodes[i].up and not self.nodes[i].frozen:
                    self._set_pressure(self.nodes[i], 1 if action == "pressure" else 0)
        elif action in ("leave", "stay"):
            for i in args:
                if self.nodes[i].up and not self.nodes[i].frozen:
                    self._set_leaving(self.nodes[i], action == "leave")
        else:
            raise ValueError(f"unknown nemesis action {action!r}")

    def _partition(self, groups: list[list[int]]) -> None:
        for g, members in enumerate(groups):
            for i in members:
                self.side[i] = g
        self._avail_note()
        if len(groups) > 1:
            self.stats["partitions"] += 1
        else:
            self.stats["heals"] += 1
        if self._tr:
            desc = " | ".join(",".join(f"n{i}" for i in sorted(g)) for g in groups)
            self._t(f"NEMESIS partition [{desc}]")

    def _crash(self, nd: SimNode) -> None:
        if nd.frozen:
            # Not modelled (what it had buffered would be lost with it): thaw it first.
            raise ValueError(f"{nd.name} is frozen: thaw it before crashing it")
        self.stats["crashes"] += 1
        if nd.member is not None:
            # disq-node keeps its membership snapshot in the data dir.
            nd.snapshot = nd.member.snapshot()
        lost: list[tuple[int, bytes]] = []
        if self.cfg.fsync_lost and nd.synced < len(nd.aof):
            lost = nd.aof[nd.synced :]
            del nd.aof[nd.synced :]
        if self._tr:
            extra = f", {len(lost)} unsynced AOF records lost" if lost else ""
            self._t(f"NEMESIS crash {nd.name}{extra}")
        nd.up = False
        nd.gen += 1
        nd.nc = None
        nd.core = None
        nd.member = None
        nd.view = None
        nd.wake_at = INF
        for token, op in list(nd.pending.items()):
            self._client_lost(nd, token, op)
        nd.pending.clear()
        self._avail_note()
        for rec in nd.bprod.values():
            self._bput_done(rec, "indeterminate", why=f"{nd.name} crashed")
        nd.bprod.clear()
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
                self._lost_load.setdefault(payload.id, set()).add(nd.idx)
                touched.add(payload.id)
            else:
                assert isinstance(payload, str)
                self._lost_del.add(payload)
                touched.add(payload)
        latest: dict[str, int] = {}
        for kind, payload in to_core_records(nd.aof):
            if kind == "IDEMKEY" or kind == "KEYVOTE":
                continue
            jid = payload.id if isinstance(payload, JobData) else str(payload)
            if jid in touched:
                latest[jid] = HOLDS if kind == "LOADJOB" else GONE
        for jid in sorted(touched):
            self._copies.setdefault(jid, []).append((self.step, nd.idx, latest.get(jid, GONE)))

    def _restart(self, nd: SimNode) -> None:
        self.stats["restarts"] += 1
        if self._tr:
            self._t(f"NEMESIS restart {nd.name}")
        nd.synced = len(nd.aof)
        self._start_node(nd, fresh=False)
        self._avail_note()

    def _freeze(self, nd: SimNode) -> None:
        """SIGSTOP: the node takes no steps and runs no timers; what reaches it (messages,
        client commands) waits in order, its own output is not flushed, its blocked clients
        wait. Messages it sent before are already on the wire and arrive."""
        self.stats["freezes"] += 1
        nd.frozen = True
        self._avail_note()
        if self._tr:
            self._t(f"NEMESIS freeze {nd.name}")

    def _thaw(self, nd: SimNode) -> None:
        """SIGCONT: the node reads what waited for it, in arrival order, then its timers
        (late: its clock moved on) run."""
        nd.frozen = False
        self._avail_note()
        held, nd.held = nd.held, []
        if self._tr:
            self._t(f"NEMESIS thaw {nd.name}: {len(held)} inputs waited")
        for fn in held:
            fn()
        self._schedule_tick(nd)

    def _rewrite(self, nd: SimNode) -> None:
        """Background AOF rewrite: the file is replaced by a dump of the live jobs."""
        self.stats["aof_rewrites"] += 1
        nc = nd.nc
        assert nc is not None and nc.disque is not None
        now = self.now + nd.skew
        b = nc.beanstalk
        framed = [b.meta_record(), *b.snapshot_records(list(b.jobs))]
        framed += self._guard(nd, nc.disque.aof.snapshot_records, now)
        if nc.scheduler is not None:  # as aof_service does: schedules and last ticks stay
            framed += nc.scheduler.snapshot_records()
        if nc.routes is not None:  # and the routes table
            framed += nc.routes.snapshot_records()
        records = list(iter_frames(b"".join(framed)))
        nd.aof = records
        nd.synced = len(records)  # written, fsynced, renamed
        if self._tr:
            self._t(f"NEMESIS aof-rewrite {nd.name}: {len(records)} records")

    def _set_pressure(self, nd: SimNode, level: int) -> None:
        """Memory warning 1: the node refuses REPLJOBs and replicates ADDJOBs externally."""
        self.stats["pressure"] += level
        core = self._core(nd)
        core.forced_warning = core.memory.warning = level
        self._avail_note()
        if self._tr:
            self._t(f"NEMESIS memory-warning {nd.name} {level}")

    def _set_leaving(self, nd: SimNode, leaving: bool) -> None:
        self.stats["leaving"] += leaving
        if leaving:
            self.leaving.add(nd.id)
        else:
            self.leaving.discard(nd.id)
        self._avail_note()
        if nd.member is not None:
            self._guard(nd, nd.member.set_leaving, self.now + nd.skew, leaving)
        if self._tr:
            self._t(f"NEMESIS leaving {nd.name} {'yes' if leaving else 'no'}")
        self._flush(nd)

    def _pause(self, nd: SimNode, queue: str, flags: int, bcast: bool) -> None:
        self.stats["pauses"] += bool(flags)
        core = self._core(nd)
        self._guard(nd, core.inspect.pause, self.now + nd.skew, queue, flags, bcast)
        if self._tr:
            self._t(f"NEMESIS pause {nd.name} {queue} {flags}{' bcast' if bcast else ''}")
        self._flush(nd)

    def _heal_all(self, _: object) -> None:
        if self._tr:
            self._t("END chaos: heal, restart every node")
        self._partition([list(range(len(self.nodes)))])
        for nd in self.nodes:
            if nd.frozen:
                self._thaw(nd)
        for nd in self.nodes:
            if not nd.up:
                self._restart(nd)
        self._normalise()

    def _normalise(self) -> None:
        """What an operator does after the storm: no memory warning, nobody leaving, every
        queue unpaused on every node (locally: a broadcast PAUSE might be lost)."""
        for nd in self.nodes:
            core = self._core(nd)
            if core.memory.warning:
                self._set_pressure(nd, 0)
            if nd.id in self.leaving or (nd.member is not None and nd.member.leaving):
                self._set_leaving(nd, False)
            for name, q in sorted(core.queues.items()):
                if q.pause:
                    self._pause(nd, name, 0, bcast=False)
