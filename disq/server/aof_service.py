"""The node's append-only file on the loop: replay, group commit, fsync policy, rewrites.

The runtime hands every Ready's records to :meth:`AofService.persist` (one ``write`` for the
whole iteration, one ``fsync`` under ``always``) before anything of that Ready leaves: the
group commit. Under ``everysec`` a worker thread fsyncs once a second. A failed write keeps
the Ready (the runtime retries it), refuses new puts and answers nothing until a write
succeeds; a failed fsync stops the node, since after one the kernel may have dropped the data.

Rewrite: when the file is over ``rewrite_min_bytes`` and over twice the live data, a new file
gets a META record, the Disque core's jobs, then the beanstalk jobs in chunks of 5,000 per loop
iteration, while every new record goes to both files (the writer's job).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from disq.persistence.aof_errors import AofFsyncError, AofRewriteError, AofWriteError
from disq.server.node_config import NodeConfig

if TYPE_CHECKING:
    from pathlib import Path

    from disq.core.node_core import NodeCore
    from disq.persistence.aof_writer import AofWriter

REWRITE_GROWTH = 2  # rewrite when the file is this many times the live data
REWRITE_CHUNK_JOBS = 5000  # beanstalk jobs written per loop iteration during a rewrite
WRITE_RETRY_S = 0.5


class AofHost(Protocol):
    """What the AOF service needs from the runtime."""

    config: NodeConfig
    core: NodeCore
    fatal: bool

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def now_ms(self) -> int: ...

    def flush_now(self) -> None: ...

    def schedule_flush(self) -> None: ...

    def fail(self) -> None: ...


class AofService:
    def __init__(self, runtime: AofHost) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.config = runtime.config
        self.writer: AofWriter | None = None
        self.error: str | None = None  # why the last write failed (RESP: MISCONF)
        self._unsynced = False
        self._fsync_busy = False
        self.on_fsync: Callable[[float], None] | None = None  # seconds per fsync (metrics)
        self._fsync_t0 = 0.0
        self._rewrite_ids: list[int] | None = None
        self._rewrite_pos = 0
        self.log: Any = structlog.get_logger("disq.aof")

    # ------------------------------------------------------------------ open / close
    def open(self) -> None:
        """Replay the AOF into the cores, then log to it. Runs before serving."""
        from disq.persistence.aof_writer import AofWriter

        data_dir = self.config.data_dir
        assert data_dir is not None
        data_dir.mkdir(parents=True, exist_ok=True)
        writer = AofWriter(data_dir)  # takes the directory lock before we read
        core = self.runtime.core
        now_ms = self.runtime.now_ms()
        # Replay allocates millions of long-lived objects: the cyclic GC would walk them
        # over and over. Off during replay, then frozen so later collections skip them.
        gc.disable()
        try:
            result = writer.load()
            jobs = core.restore(now_ms, result.records)
            del result
        finally:
            gc.enable()
        gc.freeze()
        # Delays that ran out while the node was down are due before the first command,
        # as in beanstalkd (which processes due timers before it reads).
        beanstalk = core.beanstalk
        while 0 <= beanstalk.next_deadline_ms() <= now_ms:
            beanstalk.tick(now_ms)
        self.log.info("aof_loaded", jobs=jobs, next_id=beanstalk.next_id, size=writer.size)
        self._start(writer)

    def _start(self, writer: AofWriter) -> None:
        self.runtime.core.set_persist(True)
        self.writer = writer
        if self.config.fsync == "everysec":
            self.start_fsync_timer()

    def enable(self, data_dir: Path) -> None:
        """CONFIG SET appendonly yes: a fresh AOF holding everything the node has now (as
        Disque, which starts a rewrite), then every change is logged."""
        if self.writer is not None:
            return
        from disq.persistence.aof_writer import AofWriter

        writer = AofWriter(data_dir)
        writer.load()  # takes the lock; an older file's content is superseded below
        self._snapshot_into(writer)
        self.config.data_dir = data_dir
        self._start(writer)
        self.log.info("aof_enabled", data_dir=str(data_dir), size=writer.size)

    def disable(self) -> None:
        """CONFIG SET appendonly no: flush, fsync and close the AOF; keep serving."""
        if self.writer is None:
            return
        self.runtime.flush_now()
        self._abort_rewrite()
        self.writer.fsync()
        self.writer.close()
        self.writer = None
        self.runtime.core.set_persist(False)
        self.log.info("aof_disabled")

    def close(self) -> None:
        """Shutdown: fsync and close (not after a failed fsync: nothing more is trusted)."""
        if self.writer is not None and not self.runtime.fatal:
            self._abort_rewrite()
            self.writer.fsync()
            self.writer.close()

    # ------------------------------------------------------------------ group commit
    def persist(self, records: list[bytes]) -> bool:
        """Write one Ready's records with one call. False: nothing of the Ready may leave."""
        writer = self.writer
        if writer is None:
            return True  # no AOF: the cores made no records that matter
        beanstalk = self.runtime.core.beanstalk
        try:
            writer.write(b"".join(records), len(records))
            if self.config.fsync == "always":
                t0 = time.perf_counter()
                writer.fsync()
                if self.on_fsync is not None:
                    self.on_fsync(time.perf_counter() - t0)
        except AofFsyncError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a retry
            # can report success for data never written: the only safe answer is to stop
            # without acknowledging anything more. A restart replays what is on disk.
            self.log.critical("aof_fsync_failed_stopping", error=str(exc))
            self.runtime.fail()
            return False
        except AofWriteError as exc:
            # Nothing is acknowledged before it is written: hold the replies, refuse new
            # puts (OUT_OF_MEMORY, like beanstalkd when its binlog cannot grow) and retry.
            beanstalk.refuse_puts = True
            self.error = str(exc)
            self.log.error("aof_write_failed", error=str(exc))
            self.loop.call_later(WRITE_RETRY_S, self.runtime.schedule_flush)
            return False
        beanstalk.refuse_puts = False
        self.error = None
        self._unsynced = True
        if self._rewrite_ids is None and self._rewrite_due(writer.size):
            self.request_rewrite()
        return True

    # ------------------------------------------------------------------ fsync
    def start_fsync_timer(self) -> None:
        self.loop.call_later(self.config.fsync_interval_ms / 1000, self._fsync_tick)

    def _fsync_tick(self) -> None:
        writer = self.writer
        if writer is None:
            return
        self.start_fsync_timer()
        if self._unsynced and not self._fsync_busy:
            self._unsynced = False
            self._fsync_busy = True
            self._fsync_t0 = time.perf_counter()
            fut = self.loop.run_in_executor(None, writer.fsync_in_thread)
            fut.add_done_callback(self._fsync_done)

    def _fsync_done(self, fut: asyncio.Future[int]) -> None:
        self._fsync_busy = False
        if self.on_fsync is not None:
            self.on_fsync(time.perf_counter() - self._fsync_t0)
        if fut.exception() is not None:
            # The writer is disabled after a failed fsync (see persist): stop.
            self.log.critical("aof_fsync_failed_stopping", error=str(fut.exception()))
            self.runtime.fail()

    # ------------------------------------------------------------------ rewrite
    @property
    def rewriting(self) -> bool:
        return self._rewrite_ids is not None

    def _rewrite_due(self, size: int) -> bool:
        live = self.runtime.core.live_bytes()
        return size > self.config.rewrite_min_bytes and size > REWRITE_GROWTH * max(live, 1)

    def rewrite_now(self) -> None:
        """SHUTDOWN REWRITE-AOF: a complete rewrite before exiting (Disque's controlled
        restart), so the next start replays the smallest file."""
        if self.writer is None:
            return
        self.runtime.flush_now()
        self._abort_rewrite()
        self._snapshot_into(self.writer)

    def request_rewrite(self) -> None:
        """BGREWRITEAOF, or the file outgrew the live data: an incremental rewrite."""
        if self.writer is None or self._rewrite_ids is not None:
            return
        try:
            self._start_rewrite()
        except AofRewriteError as exc:
            self._rewrite_ids = None
            self.log.error("aof_rewrite_failed", error=str(exc))

    def _abort_rewrite(self) -> None:
        """Drop an incremental rewrite in progress (the live file is untouched)."""
        if self._rewrite_ids is not None and self.writer is not None:
            self._rewrite_ids = None
            self.writer.abort_rewrite()

    def _snapshot_into(self, writer: AofWriter) -> None:
        beanstalk = self.runtime.core.beanstalk
        writer.begin_rewrite()
        writer.write_snapshot(beanstalk.meta_record())
        ids = list(beanstalk.jobs)
        for i in range(0, len(ids), REWRITE_CHUNK_JOBS):
            chunk = ids[i : i + REWRITE_CHUNK_JOBS]
            writer.write_snapshot(b"".join(beanstalk.snapshot_records(chunk)))
        writer.write_snapshot(self._disque_snapshot())
        writer.commit_rewrite()

    def _disque_snapshot(self) -> bytes:
        disque = self.runtime.core.disque
        if disque is None:
            return b""
        return b"".join(disque.snapshot_records(self.runtime.now_ms()))

    def _start_rewrite(self) -> None:
        """Snapshot records in chunks, one chunk per loop iteration. The writer copies every
        live record to the new file too, so the new file is the snapshot interleaved with
        everything that happened meanwhile, in time order."""
        writer = self.writer
        assert writer is not None
        beanstalk = self.runtime.core.beanstalk
        writer.begin_rewrite()
        writer.write_snapshot(beanstalk.meta_record())
        # Disque jobs are fewer and carry no per-job timers to preserve: one chunk.
        writer.write_snapshot(self._disque_snapshot())
        self._rewrite_ids = list(beanstalk.jobs)
        self._rewrite_pos = 0
        self.log.info("aof_rewrite_started", jobs=len(self._rewrite_ids), size=writer.size)
        self.loop.call_soon(self._rewrite_step)

    def _rewrite_step(self) -> None:
        ids = self._rewrite_ids
        writer = self.writer
        if ids is None or writer is None:
            return
        chunk = ids[self._rewrite_pos : self._rewrite_pos + REWRITE_CHUNK_JOBS]
        self._rewrite_pos += len(chunk)
        try:
            if chunk:
                writer.write_snapshot(b"".join(self.runtime.core.beanstalk.snapshot_records(chunk)))
            if self._rewrite_pos >= len(ids):
                self._rewrite_ids = None
                writer.commit_rewrite()
                self.log.info("aof_rewrite_done", size=writer.size)
                return
        except AofRewriteError as exc:
            # The writer already aborted the rewrite; the live file is intact.
            self._rewrite_ids = None
            self.log.error("aof_rewrite_failed", error=str(exc))
            return
        self.loop.call_soon(self._rewrite_step)
