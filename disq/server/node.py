"""One node: the engine, its doors, the AOF and the clock, on one asyncio loop.

One loop iteration: read sockets -> feed codecs -> call the engine -> flush once. With the
AOF on, the flush writes every record of the iteration with one write (and one fsync under
``always``) before any reply that depends on it is sent: group commit. Time-driven work has
one timer, set to the engine's next deadline, never a timer per job.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import resource
import secrets
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from disq.core.engine import Engine, Limits
from disq.persistence.aof_file import AofFsyncError, AofRewriteError, AofWriteError
from disq.protocol.beanstalk import OP_COUNT
from disq.server.beanstalk_tcp import BeanstalkProtocol

if TYPE_CHECKING:
    from disq.core.session import Session
    from disq.persistence.aof_file import AofWriter
    from disq.server.cluster_runtime import ClusterRuntime

PROTOCOL_VERSION = "1.12"  # the beanstalkd protocol this door speaks, reported by `stats`
REWRITE_MIN_BYTES = 64 << 20
REWRITE_GROWTH = 2  # rewrite when the file is this many times the live data
REWRITE_CHUNK_JOBS = 5000  # jobs written per loop iteration during a rewrite
WRITE_RETRY_S = 0.5


@dataclass
class NodeConfig:
    data_dir: Path | None = None
    fsync: str = "everysec"  # always | everysec | no
    fsync_interval_ms: int = 1000
    limits: Limits = field(default_factory=Limits)
    binlog_max_size: int = 10 << 20  # reported by stats; beanstalkd's -s
    rewrite_min_bytes: int = REWRITE_MIN_BYTES


class Node:
    def __init__(self, config: NodeConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.engine = Engine(config.limits, persist=False)
        self.op_counts = [0] * OP_COUNT
        self.sessions: dict[Session, BeanstalkProtocol] = {}
        self.instance_id = secrets.token_hex(8)
        self.started = time.monotonic()
        self._dirty: list[BeanstalkProtocol] = []
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = -1
        self.aof: AofWriter | None = None
        self._unsynced = False
        self._fsync_busy = False
        self._pending_aof: list[bytes] = []
        self._rewrite_ids: list[int] | None = None
        self._rewrite_pos = 0
        self.servers: list[asyncio.AbstractServer] = []
        self._stopping: asyncio.Future[None] | None = None
        self.fatal = False  # stopped because the AOF can no longer be trusted
        self.aof_error: str | None = None  # why the last AOF write failed (RESP: MISCONF)
        self.cluster: ClusterRuntime | None = None  # set when the node runs in a cluster
        self._uname = platform.uname()
        self._hostname = socket.gethostname()

    # ------------------------------------------------------------------ clock
    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # ------------------------------------------------------------ persistence
    def open_aof(self) -> None:
        """Replay the AOF into the engine, then log to it. Runs before serving."""
        from disq.persistence.aof_file import AofWriter

        data_dir = self.config.data_dir
        assert data_dir is not None
        data_dir.mkdir(parents=True, exist_ok=True)
        writer = AofWriter(data_dir)  # takes the directory lock before we read
        # Replay allocates millions of long-lived objects: the cyclic GC would walk them
        # over and over. Off during replay, then frozen so later collections skip them.
        gc.disable()
        try:
            result = writer.load()
            jobs = self.engine.restore(result.records)
            if self.cluster is not None:
                jobs += self.cluster.restore(result.records)
            del result
        finally:
            gc.enable()
        gc.freeze()
        engine = self.engine
        # Delays that ran out while the node was down are due before the first command,
        # as in beanstalkd (which processes due timers before it reads).
        now_ms = self.now_ms()
        while 0 <= engine.next_deadline_ms() <= now_ms:
            engine.tick(now_ms)
        self._log().info("aof_loaded", jobs=jobs, next_id=engine.next_id, size=writer.size)
        engine.persist = True
        self.aof = writer
        if self.config.fsync == "everysec":
            self.loop.call_later(self.config.fsync_interval_ms / 1000, self._fsync_tick)

    def enable_aof(self, data_dir: Path) -> None:
        """CONFIG SET appendonly yes: a fresh AOF holding everything the node has now (as
        Disque, which starts a rewrite), then every change is logged."""
        if self.aof is not None:
            return
        from disq.persistence.aof_file import AofWriter

        writer = AofWriter(data_dir)
        writer.load()  # takes the lock; an older file's content is superseded below
        self._snapshot_into(writer)
        self.config.data_dir = data_dir
        self.engine.persist = True
        self.aof = writer
        if self.config.fsync == "everysec":
            self.loop.call_later(self.config.fsync_interval_ms / 1000, self._fsync_tick)
        self._log().info("aof_enabled", data_dir=str(data_dir), size=writer.size)

    def disable_aof(self) -> None:
        """CONFIG SET appendonly no: flush, fsync and close the AOF; keep serving."""
        if self.aof is None:
            return
        self._flush()
        self._abort_rewrite()
        self.aof.fsync()
        self.aof.close()
        self.aof = None
        self.engine.persist = False
        self._log().info("aof_disabled")

    def rewrite_now(self) -> None:
        """SHUTDOWN REWRITE-AOF: a complete rewrite before exiting (Disque's controlled
        restart), so the next start replays the smallest file."""
        if self.aof is None:
            return
        self._flush()
        self._abort_rewrite()
        self._snapshot_into(self.aof)

    def _abort_rewrite(self) -> None:
        """Drop an incremental rewrite in progress (the live file is untouched)."""
        if self._rewrite_ids is not None and self.aof is not None:
            self._rewrite_ids = None
            self.aof.abort_rewrite()

    def _snapshot_into(self, writer: AofWriter) -> None:
        writer.begin_rewrite()
        writer.write_snapshot(self.engine.meta_record())
        ids = list(self.engine.jobs)
        for i in range(0, len(ids), REWRITE_CHUNK_JOBS):
            chunk = ids[i : i + REWRITE_CHUNK_JOBS]
            writer.write_snapshot(b"".join(self.engine.snapshot_records(chunk)))
        if self.cluster is not None:
            writer.write_snapshot(self.cluster.snapshot_bytes())
        writer.commit_rewrite()

    def _write_aof(self) -> bool:
        """Write every record of this iteration with one call. False: keep replies held."""
        engine = self.engine
        aof = self.aof
        if aof is None:
            engine.aof_out.clear()
            return True
        if engine.aof_out:
            self._pending_aof.extend(engine.aof_out)
            engine.aof_out.clear()
        if not self._pending_aof:
            return True
        data = b"".join(self._pending_aof)
        try:
            aof.write(data, len(self._pending_aof))
            if self.config.fsync == "always":
                aof.fsync()
        except AofFsyncError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a retry
            # can report success for data never written: the only safe answer is to stop
            # without acknowledging anything more. A restart replays what is on disk.
            self._log().critical("aof_fsync_failed_stopping", error=str(exc))
            self._dirty.clear()
            self.fatal = True
            self.stop()
            return False
        except AofWriteError as exc:
            # Nothing is acknowledged before it is written: hold the replies, refuse new
            # puts (OUT_OF_MEMORY, like beanstalkd when its binlog cannot grow) and retry.
            engine.refuse_puts = True
            self.aof_error = str(exc)
            self._log().error("aof_write_failed", error=str(exc))
            self.loop.call_later(WRITE_RETRY_S, self._schedule_flush)
            return False
        self._pending_aof.clear()
        engine.refuse_puts = False
        self.aof_error = None
        self._unsynced = True
        if self._rewrite_ids is None and self._rewrite_due(aof.size):
            try:
                self._start_rewrite()
            except AofRewriteError as exc:
                self._rewrite_ids = None
                self._log().error("aof_rewrite_failed", error=str(exc))
        return True

    def fsync_tick(self) -> None:
        self._fsync_tick()

    def _fsync_tick(self) -> None:
        if self.aof is None:
            return
        self.loop.call_later(self.config.fsync_interval_ms / 1000, self._fsync_tick)
        if self._unsynced and not self._fsync_busy:
            self._unsynced = False
            self._fsync_busy = True
            fut = self.loop.run_in_executor(None, self.aof.fsync_in_thread)
            fut.add_done_callback(self._fsync_done)

    def _fsync_done(self, fut: asyncio.Future[int]) -> None:
        self._fsync_busy = False
        if fut.exception() is not None:
            # The writer is disabled after a failed fsync (see _write_aof): stop.
            self._log().critical("aof_fsync_failed_stopping", error=str(fut.exception()))
            self.fatal = True
            self.stop()

    def _rewrite_due(self, size: int) -> bool:
        live = self.engine.live_bytes
        if self.cluster is not None:
            live += self.cluster.live_bytes()
        return size > self.config.rewrite_min_bytes and size > REWRITE_GROWTH * max(live, 1)

    @property
    def rewriting(self) -> bool:
        return self._rewrite_ids is not None

    def request_rewrite(self) -> None:
        """BGREWRITEAOF: start an incremental rewrite now."""
        if self.aof is None or self._rewrite_ids is not None:
            return
        try:
            self._start_rewrite()
        except AofRewriteError as exc:
            self._rewrite_ids = None
            self._log().error("aof_rewrite_failed", error=str(exc))

    def _start_rewrite(self) -> None:
        """Incremental rewrite: snapshot records in chunks, one chunk per loop iteration.

        The writer copies every live record to the new file too, so the new file is the
        snapshot interleaved with everything that happened meanwhile, in time order.
        """
        assert self.aof is not None
        self.aof.begin_rewrite()
        self.aof.write_snapshot(self.engine.meta_record())
        if self.cluster is not None:
            # Cluster jobs are fewer and carry no per-job timers to preserve: one chunk.
            self.aof.write_snapshot(self.cluster.snapshot_bytes())
        self._rewrite_ids = list(self.engine.jobs)
        self._rewrite_pos = 0
        self._log().info("aof_rewrite_started", jobs=len(self._rewrite_ids), size=self.aof.size)
        self.loop.call_soon(self._rewrite_step)

    def _rewrite_step(self) -> None:
        ids = self._rewrite_ids
        aof = self.aof
        if ids is None or aof is None:
            return
        chunk = ids[self._rewrite_pos : self._rewrite_pos + REWRITE_CHUNK_JOBS]
        self._rewrite_pos += len(chunk)
        try:
            if chunk:
                aof.write_snapshot(b"".join(self.engine.snapshot_records(chunk)))
            if self._rewrite_pos >= len(ids):
                self._rewrite_ids = None
                aof.commit_rewrite()
                self._log().info("aof_rewrite_done", size=aof.size)
                return
        except AofRewriteError as exc:
            # The writer already aborted the rewrite; the live file is intact.
            self._rewrite_ids = None
            self._log().error("aof_rewrite_failed", error=str(exc))
            return
        self.loop.call_soon(self._rewrite_step)

    # ---------------------------------------------------------------- serving
    def after_commands(self, proto: BeanstalkProtocol | None, now_ms: int) -> None:
        """Route engine output after a batch of commands: wake-ups, replies, timer."""
        engine = self.engine
        cluster = self.cluster
        if cluster is not None and (engine.cluster_events or cluster.core.outbox):
            cluster.on_engine_events(now_ms)  # replicated puts, bury, delete ...: one pump
        if cluster is not None and len(engine.events):
            cluster.event_log.append(engine.events.take())
        if engine.wakeups:
            self._deliver_wakeups(now_ms)
        if proto is not None and (proto.out or proto.closing):
            if engine.persist:
                self._dirty.append(proto)
            else:
                proto.flush()
        if engine.persist and (self._dirty or engine.aof_out):
            self._schedule_flush()
        hint = engine.timer_hint_ms
        if hint >= 0:
            engine.timer_hint_ms = -1
            self.check_timer(hint, now_ms)

    def check_timer(self, deadline_ms: int, now_ms: int) -> None:
        """Arm the one timer earlier if ``deadline_ms`` comes before it."""
        if self._timer_at_ms < 0 or deadline_ms < self._timer_at_ms:
            self._arm_timer(deadline_ms, now_ms)

    def _deliver_wakeups(self, now_ms: int) -> None:
        engine = self.engine
        while engine.wakeups:
            wakeups = engine.wakeups
            engine.wakeups = []
            for session, result in wakeups:
                proto = self.sessions.get(session)
                if proto is None or proto.door is None:
                    continue
                proto.door.resume(result, now_ms, proto.out)
                if engine.persist:
                    self._dirty.append(proto)
                else:
                    proto.flush()

    def schedule_flush(self) -> None:
        """Write pending AOF records at the end of this iteration, then release replies."""
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._write_aof():
            return
        dirty = self._dirty
        self._dirty = []
        for proto in dirty:
            proto.flush()
        if self.cluster is not None:
            self.cluster.release()

    def _arm_timer(self, deadline_ms: int, now_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = deadline_ms
        delay_s = max(0.0, (deadline_ms - now_ms) / 1000)
        self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = -1
        now_ms = self.now_ms()
        engine = self.engine
        engine.tick(now_ms)
        self.after_commands(None, now_ms)
        nd = engine.next_deadline_ms()
        if nd >= 0:
            self.check_timer(nd, now_ms)

    # ------------------------------------------------------------------ stats
    def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        aof = self.aof
        return [
            ("pid", os.getpid()),
            ("version", f'"{PROTOCOL_VERSION}"'),
            ("rusage-utime", f"{ru.ru_utime:.6f}"),
            ("rusage-stime", f"{ru.ru_stime:.6f}"),
            ("uptime", int(time.monotonic() - self.started)),
            ("binlog-oldest-index", 1 if aof else 0),
            ("binlog-current-index", 1 if aof else 0),
            ("binlog-records-migrated", aof.rewrites_done if aof else 0),
            ("binlog-records-written", aof.records_written if aof else 0),
            ("binlog-max-size", self.config.binlog_max_size),
            ("draining", "true" if self.engine.draining else "false"),
            ("id", self.instance_id),
            ("hostname", self._hostname),
            ("os", self._uname.version),
            ("platform", self._uname.machine),
        ]

    # -------------------------------------------------------------- lifecycle
    async def serve(
        self, sockets: list[socket.socket], resp_sockets: list[socket.socket] | None = None
    ) -> None:
        loop = self.loop
        if self.cluster is not None:
            await self.cluster.start()
            factory = self.cluster.resp_factory
            for sock in resp_sockets or []:
                self.servers.append(await loop.create_server(factory, sock=sock, backlog=1024))
        for sock in sockets:
            if sock.family == socket.AF_UNIX:
                server = await loop.create_unix_server(lambda: BeanstalkProtocol(self), sock=sock)
            else:
                server = await loop.create_server(
                    lambda: BeanstalkProtocol(self), sock=sock, backlog=1024
                )
            self.servers.append(server)
        self._stopping = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGUSR1, self.drain)
        nd = self.engine.next_deadline_ms()  # arm the timer for what replay scheduled
        if nd >= 0:
            self.check_timer(nd, self.now_ms())
        self._log().info(
            "listening",
            addresses=[str(s.getsockname()) for s in [*sockets, *(resp_sockets or [])]],
            data_dir=str(self.config.data_dir) if self.config.data_dir else None,
            jobs=len(self.engine.jobs),
        )
        await self._stopping
        await self.shutdown()

    def drain(self) -> None:
        self.engine.draining = True
        self._log().info("drain_mode")

    def stop(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    async def shutdown(self) -> None:
        for server in self.servers:
            server.close()
        self._flush()
        if self.cluster is not None:
            await self.cluster.close()
        if self.aof is not None and not self.fatal:
            self._abort_rewrite()
            self.aof.fsync()
            self.aof.close()
        self._log().info("stopped")

    @staticmethod
    def _log() -> Any:
        import structlog

        return structlog.get_logger("disq.node")
