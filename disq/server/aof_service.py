"""The node's append-only file on the loop: replay, group commit, fsync policy, rewrites, and
the free space of the data directory's filesystem.

The runtime hands every Ready's records to :meth:`AofService.persist` (one ``write`` for the
whole iteration) before anything of that Ready leaves: the group commit. Under ``always`` (the
default) the fsync runs in a worker thread: the runtime holds the iteration's messages,
replies and wake-ups (:mod:`disq.server.commit_gate`) until an fsync whose watermark covers its
records returns (:meth:`AofService.sync_to`), while the loop goes on taking work; the records
written meanwhile join the next fsync, so one fsync covers every iteration of its window. A
disk whose fsyncs average under ``INLINE_FSYNC_S`` is fsynced on the loop instead: a thread's
round trip costs more than that on a busy machine; the first slow one sends them back to the
threads.
Under ``everysec`` the worker thread fsyncs once a second and nothing is held. A failed write keeps
the Ready (the runtime retries it), refuses new puts and answers nothing until a write
succeeds; a failed fsync stops the node (exit 1), since after one the kernel may have dropped
the data and a retried fsync can report success for pages never written ("fsyncgate").

Disk full (docs/disk-full.md): the filesystem's free space is read with ``statvfs`` once a
second and after a write batch that brings the estimate near the marks of :class:`DiskPolicy`.
Below ``low_bytes`` free, new jobs are refused (``disk_full``: beanstalk OUT_OF_MEMORY, RESP
``-OOM disk full: ...``, gRPC RESOURCE_EXHAUSTED) while reads, acks and deletes go on writing
their small records into the room left; at ``high_bytes`` free adds are taken again. A reserve
file (``DIR/disq.reserve``) is deleted when a write still meets ENOSPC or a rewrite needs
room, and made again once there is space. While the disk is low, the node rewrites the AOF
when that would shrink it (acks and deletes make the file mostly garbage).

Rewrite: when the file is over ``rewrite_min_bytes`` and over twice the live data, a new file
gets a META record, the Disque core's jobs, then the beanstalk jobs in chunks of 5,000 per loop
iteration, while every new record goes to both files (the writer's job).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from disq.logging import get_logger
from disq.persistence.aof_errors import (
    AofDisabledError,
    AofFsyncError,
    AofRewriteError,
    AofWriteError,
)
from disq.persistence.fs import RESERVE_NAME, create_reserve, disk_space, release_reserve
from disq.server.node_config import NodeConfig

if TYPE_CHECKING:
    from pathlib import Path

    from disq.core.node_core import NodeCore
    from disq.persistence.aof_writer import AofWriter

REWRITE_GROWTH = 2  # rewrite when the file is this many times the live data
REWRITE_CHUNK_JOBS = 5000  # beanstalk jobs written per loop iteration during a rewrite
WRITE_RETRY_S = 0.5
FSYNC_OVERLAP = 2  # group commit: fsyncs running at once at most
INLINE_FSYNC_S = 0.0003  # group commit: fsyncs faster than this (on average) run on the loop
FSYNC_EWMA = 0.2  # weight of the latest fsync in fsync_s
GIL_SWITCH_S = 0.0005  # group commit: how long an fsync thread waits for the interpreter
DISK_CHECK_S = 1.0  # statvfs at least this often while the AOF is on (space freed by others)
REWRITE_FOR_SPACE_MIN = 16 << 10  # a disk-low rewrite must be expected to free this much
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _timed_fsync(writer: AofWriter) -> tuple[int, float]:
    """The writer's fsync (any thread): the watermark it made durable and how long it took."""
    t0 = time.perf_counter()
    mark = writer.fsync_in_thread()
    return mark, time.perf_counter() - t0


class DiskPolicy(NamedTuple):
    """Free-space marks of the data directory's filesystem, scaled to its size.

    Below ``low_bytes`` free, new jobs are refused; at ``high_bytes`` they are taken again (the
    gap keeps the state from flapping). ``reserve_bytes``: the reserve file's size. The low
    mark must hold what one loop iteration can accept before the next check (one read per
    connection) plus the acks and deletes that follow: 1/64 of the filesystem, at least
    256 KiB, at most 256 MiB. A NamedTuple, not a dataclass: ``dataclasses`` is about 0.8 ms
    of a node's start before its first answer (issue 31).
    """

    low_bytes: int
    high_bytes: int
    reserve_bytes: int

    @classmethod
    def for_total(cls, total: int) -> DiskPolicy:
        low = min(max(total // 64, 256 << 10), 256 << 20)
        reserve = min(max(total // 512, 64 << 10), 8 << 20)
        return cls(low_bytes=low, high_bytes=2 * low, reserve_bytes=reserve)


def disk_full_message(low_bytes: int) -> str:
    """The refusal every door gives an add while the disk is low (RESP: after ``-OOM ``);
    ``low_bytes`` 0: the filesystem tells no size, a write found it full."""
    if not low_bytes:
        return (
            "disk full: a write to the AOF found no space, new jobs are refused until "
            "space is freed (reads, acks and deletes still work)"
        )
    return (
        f"disk full: less than {low_bytes} bytes free for the AOF, new jobs are refused until "
        "space is freed (reads, acks and deletes still work)"
    )


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
        self._inflight = 0  # fsyncs running in worker threads
        self._started = 0  # bytes_written when the newest of them started
        # Group commit (always): the writer's bytes_written watermark known on disk, the one
        # asked for, and who is told when it moves (the runtime's commit gate).
        self.durable = 0
        self._want = 0
        self.on_durable: Callable[[int], None] | None = None
        self.on_fsync: Callable[[float], None] | None = None  # seconds per fsync (metrics)
        self.fsync_s = 1.0  # the fsync call's own duration, a moving average (slow at first)
        self._rewrite_ids: list[int] | None = None
        self._rewrite_pos = 0
        # Disk space (docs/disk-full.md): the marks, the last statvfs, the state.
        self.disk_policy: DiskPolicy | None = None
        self.disk_total = 0  # -1: the filesystem reports no size (_size_unknown)
        self.disk_free = -1  # bytes free at the last check; -1: not checked or unknown
        self.disk_full = False  # new jobs refused for lack of space
        self.reserve_bytes = 0  # held in DIR/disq.reserve now
        self._since_check = 0  # bytes written since the last statvfs
        self._disk_timer: asyncio.TimerHandle | None = None
        self._rewrite_base = 0  # file size when the last disk-low rewrite started or ended
        self._no_room_size = -1  # file size when a disk-low rewrite last found no room
        self.log: Any = get_logger("disq.aof")

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
        by_offset: tuple[int, ...] = ()
        if core.disque is not None:
            # Its job records stay in the file's buffer, decoded in place (aof.py). Imported
            # here: a standalone node loads no cluster module before it serves.
            from disq.persistence.cluster_records import JOB_RECORD_TYPES

            by_offset = JOB_RECORD_TYPES
        gc.disable()
        try:
            result = writer.load(by_offset=by_offset)
            jobs = core.restore(now_ms, result.records, result.buf, result.offsets)
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
        self.durable = self._want = writer.bytes_written
        if self.config.fsync == "always":
            # An fsync that returned waits for the interpreter before it can say so, and the
            # loop holds it up to the switch interval (5 ms) while it works: every held reply
            # would wait that much longer.
            sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_S))
        if self.config.fsync == "everysec":
            self.start_fsync_timer()
        self._disk_start(writer)

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
        self._durable_to(self.writer.bytes_written)
        self.writer.close()
        self.writer = None
        self.runtime.core.set_persist(False)
        self._disk_stop()
        self.log.info("aof_disabled")

    def close(self) -> None:
        """Shutdown: fsync and close (not after a failed fsync: nothing more is trusted)."""
        self._disk_stop(keep_state=True)
        if self.writer is not None and not self.runtime.fatal:
            self._abort_rewrite()
            self.writer.fsync()
            self._durable_to(self.writer.bytes_written)
            self.writer.close()

    # ------------------------------------------------------------------ group commit
    @property
    def group_commit(self) -> bool:
        """Whether what a Ready lets out waits for an fsync of its records (``always``)."""
        return self.writer is not None and self.config.fsync == "always"

    def persist(self, records: list[bytes]) -> bool:
        """Write one Ready's records with one call. False: nothing of the Ready may leave.
        Under ``always`` the caller holds the Ready's output until :meth:`sync_to` the
        writer's ``bytes_written`` reports it durable."""
        writer = self.writer
        if writer is None:
            return True  # no AOF: the cores made no records that matter
        if self.runtime.fatal:
            return False  # stopping after a failed fsync: nothing more is acknowledged
        data = b"".join(records)
        try:
            writer.write(data, len(records))
        except (AofFsyncError, AofDisabledError) as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a retry
            # can report success for data never written: the only safe answer is to stop
            # without acknowledging anything more. A restart replays what is on disk.
            event = (
                "aof_fsync_failed_stopping"
                if isinstance(exc, AofFsyncError)
                else "aof_writer_disabled_stopping"
            )
            self.log.critical(event, error=str(exc), code=exc.code)
            self.runtime.fail()
            return False
        except AofWriteError as exc:
            self._write_failed(exc)
            return False
        if self.error is not None:
            self.log.info("aof_write_recovered")
            self.error = None
        self._unsynced = True
        self._wrote(len(data) * (2 if writer.rewrite_active else 1))
        if self._rewrite_ids is None and self._rewrite_due(writer.size):
            self.request_rewrite()
        return True

    def _write_failed(self, exc: AofWriteError) -> None:
        """Nothing is acknowledged before it is written: hold the replies, refuse new puts
        (OUT_OF_MEMORY, like beanstalkd when its binlog cannot grow) and retry. A full disk
        gives back the reserve and retries at once."""
        if self.error is None:
            self.log.error("aof_write_failed", error=str(exc), errno=exc.errno)
        self.error = str(exc)
        delay = WRITE_RETRY_S
        if exc.errno in _NO_SPACE:
            self._abort_rewrite()  # live records first: the rewrite file gives its room back
            if not self.disk_full:
                self._enter_disk_full("write_failed")
            if self.reserve_bytes:
                self._release_reserve("write_failed")
                delay = 0.0
        self._update_refusal()
        self.loop.call_later(delay, self.runtime.schedule_flush)

    # ------------------------------------------------------------------ fsync
    def sync_to(self, mark: int) -> None:
        """Have every byte written before the writer's ``bytes_written`` reached ``mark`` on
        disk, then tell ``on_durable``: at once if it is already, else after an fsync in a
        worker thread. What is written while an fsync runs is covered by the next one, which
        starts at once (up to FSYNC_OVERLAP running: the disk's journal joins them) or when
        one ends: one fsync covers every write of its window (Kafka's and RabbitMQ's group
        commit)."""
        if mark > self._want:
            self._want = mark
        if self.durable >= mark:
            self.loop.call_soon(self._tell_durable)
        else:
            self._maybe_start_fsync()

    def _maybe_start_fsync(self) -> None:
        if self._inflight == 0 and self.fsync_s < INLINE_FSYNC_S:
            self._fsync_inline()
        elif self._inflight == 0 or (self._want > self._started and self._inflight < FSYNC_OVERLAP):
            self._start_fsync()

    def _fsync_inline(self) -> None:
        """A disk whose fsync takes less than INLINE_FSYNC_S: fsync on the loop, which costs
        it less than handing the call to a thread and hearing back (a wake-up of each, and the
        interpreter's lock, on a busy machine: a millisecond or more). The release is one
        callback later, as from a thread."""
        writer = self.writer
        if writer is None or self.runtime.fatal:
            return
        self._unsynced = False
        try:
            mark, seconds = _timed_fsync(writer)
        except AofFsyncError as exc:
            self.log.critical("aof_fsync_failed_stopping", error=str(exc))
            self.runtime.fail()
            return
        self._fsync_took(seconds)
        if mark > self.durable:
            self.durable = mark
        self.loop.call_soon(self._tell_durable)

    def _fsync_took(self, seconds: float) -> None:
        self.fsync_s += (seconds - self.fsync_s) * FSYNC_EWMA
        if self.on_fsync is not None:
            self.on_fsync(seconds)

    def start_fsync_timer(self) -> None:
        self.loop.call_later(self.config.fsync_interval_ms / 1000, self._fsync_tick)

    def _fsync_tick(self) -> None:
        writer = self.writer
        if writer is None or self.config.fsync != "everysec":
            return  # CONFIG SET appendfsync moved away from everysec: the timer ends
        self.start_fsync_timer()
        if self._unsynced and not self._inflight:
            self._start_fsync()

    def _start_fsync(self) -> None:
        writer = self.writer
        if writer is None or self.runtime.fatal:
            return
        self._unsynced = False
        self._inflight += 1
        self._started = writer.bytes_written
        fut = self.loop.run_in_executor(None, _timed_fsync, writer)
        fut.add_done_callback(lambda f: self._fsync_done(f, writer))

    def _fsync_done(self, fut: asyncio.Future[tuple[int, float]], writer: AofWriter) -> None:
        self._inflight -= 1
        if writer is not self.writer:
            return  # the AOF was turned off (and on) meanwhile: its watermark means nothing
        exc = fut.exception()
        if exc is not None:
            # The writer is disabled after a failed fsync (see persist): stop, and let out
            # nothing that waited for it.
            self.log.critical("aof_fsync_failed_stopping", error=str(exc))
            self.runtime.fail()
            return
        # Any fsync's watermark counts, whichever ends first: each covers every byte written
        # before it started.
        mark, seconds = fut.result()
        self._fsync_took(seconds)
        self._durable_to(mark)
        if self._want > self.durable and self.writer is not None:
            self._maybe_start_fsync()

    def _durable_to(self, mark: int) -> None:
        if mark > self.durable:
            self.durable = mark
        self._tell_durable()

    def _tell_durable(self) -> None:
        if self.on_durable is not None and not self.runtime.fatal:
            self.on_durable(self.durable)

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
        core = self.runtime.core
        disque = core.disque
        if disque is None:
            return b""
        records = disque.aof.snapshot_records(self.runtime.now_ms())
        if core.scheduler is not None:
            records.extend(core.scheduler.snapshot_records())
        if core.routes is not None:
            records.extend(core.routes.snapshot_records())
        if core.policies is not None:
            records.extend(core.policies.snapshot_records())
        return b"".join(records)

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
                self._rewrite_base = writer.size
                if self.disk_full:
                    self.check_disk()  # the old file's room is back: adds may resume now
                return
        except AofRewriteError as exc:
            # The writer already aborted the rewrite; the live file is intact.
            self._rewrite_ids = None
            self.log.error("aof_rewrite_failed", error=str(exc))
            return
        self.loop.call_soon(self._rewrite_step)

    # ------------------------------------------------------------------ disk space
    @property
    def disk_full_reason(self) -> str | None:
        """The refusal text while new jobs are refused for lack of space, else None."""
        if not self.disk_full:
            return None
        return disk_full_message(self.disk_policy.low_bytes if self.disk_policy else 0)

    def _disk_start(self, writer: AofWriter) -> None:
        try:
            self.reserve_bytes = (writer.data_dir / RESERVE_NAME).stat().st_size
        except FileNotFoundError:
            self.reserve_bytes = 0
        self._rewrite_base = writer.size
        self.check_disk()
        self._disk_timer = self.loop.call_later(DISK_CHECK_S, self._disk_tick)

    def _disk_stop(self, *, keep_state: bool = False) -> None:
        if self._disk_timer is not None:
            self._disk_timer.cancel()
            self._disk_timer = None
        if not keep_state and self.disk_full:
            self.disk_full = False  # no AOF, nothing to keep room for
            self.log.info("aof_disk_ok", reason="aof_disabled")
            self._update_refusal()

    def _disk_tick(self) -> None:
        self._disk_timer = None
        if self.writer is None or self.runtime.fatal:
            return
        self.check_disk()
        self._disk_timer = self.loop.call_later(DISK_CHECK_S, self._disk_tick)

    def _wrote(self, n: int) -> None:
        """After a write batch: check the disk now if the estimate comes near a mark."""
        self._since_check += n
        policy = self.disk_policy
        if policy is not None and self.disk_free - self._since_check < policy.high_bytes:
            self.check_disk()
        else:
            self._update_refusal()

    def check_disk(self) -> None:
        """One statvfs; enter or leave the disk-full state, keep the reserve, and start a
        rewrite when the disk is low and the file would shrink."""
        writer = self.writer
        if writer is None:
            return
        try:
            space = disk_space(writer.data_dir)
        except OSError as exc:
            self.log.warning("aof_disk_check_failed", error=str(exc))
            return
        self._since_check = 0
        if space.total == 0:
            self._size_unknown(writer)
            return
        if self.disk_policy is None or space.total != self.disk_total:
            self.disk_total = space.total
            self.disk_policy = DiskPolicy.for_total(space.total)
        policy = self.disk_policy
        self.disk_free = space.free
        if not self.disk_full:
            if space.free < policy.low_bytes:
                self._enter_disk_full("low_free_space")
            elif (
                self.reserve_bytes < policy.reserve_bytes
                and space.free >= policy.high_bytes + policy.reserve_bytes
            ):
                self._make_reserve(writer, policy.reserve_bytes)
        elif space.free >= policy.high_bytes and self.error is None:
            self.disk_full = False
            self.log.info(
                "aof_disk_ok",
                data_dir=str(writer.data_dir),
                free_bytes=space.free,
                high_bytes=policy.high_bytes,
            )
        if self.disk_full:
            self._maybe_rewrite_for_space(writer)
        self._update_refusal()

    def _size_unknown(self, writer: AofWriter) -> None:
        """A filesystem that reports no blocks at all (ramfs, some FUSE and network ones):
        its size is unknown, not zero, so no mark applies and adds are taken. Only a write
        that meets ENOSPC says it is full; the next check takes adds again, and a write that
        still fails says so again (its Ready and replies wait for the retry meanwhile)."""
        if self.disk_total != -1:  # said once, until a size shows up
            self.log.warning("aof_disk_size_unknown", data_dir=str(writer.data_dir))
        self.disk_policy = None
        self.disk_total = -1
        self.disk_free = -1
        if self.disk_full and self.error is None:
            self.disk_full = False
            self.log.info("aof_disk_ok", reason="size_unknown")
        self._update_refusal()

    def _enter_disk_full(self, why: str) -> None:
        self.disk_full = True
        if self.writer is not None:
            self._rewrite_base = self.writer.size  # growth from here on is acks and deletes
        policy = self.disk_policy
        self.log.warning(
            "aof_disk_full",
            reason=why,
            data_dir=str(self.config.data_dir),
            free_bytes=self.disk_free,
            low_bytes=policy.low_bytes if policy else None,
            high_bytes=policy.high_bytes if policy else None,
        )

    def _update_refusal(self) -> None:
        self.runtime.core.beanstalk.refuse_puts = self.disk_full or self.error is not None

    def _make_reserve(self, writer: AofWriter, size: int) -> None:
        try:
            create_reserve(writer.data_dir / RESERVE_NAME, size)
        except OSError as exc:
            self.log.warning("aof_disk_reserve_failed", size=size, error=str(exc))
            return
        self.reserve_bytes = size
        self.disk_free -= size
        self.log.info("aof_disk_reserve_made", size=size)

    def _release_reserve(self, why: str) -> None:
        writer = self.writer
        if writer is None:
            return
        try:
            freed = release_reserve(writer.data_dir / RESERVE_NAME)
        except OSError as exc:
            self.log.error("aof_disk_reserve_release_failed", error=str(exc))
            return
        self.reserve_bytes = 0
        self.disk_free += freed
        self.log.warning("aof_disk_reserve_released", reason=why, freed_bytes=freed)

    def _maybe_rewrite_for_space(self, writer: AofWriter) -> None:
        """A rewrite while the disk is low, when it should free at least a quarter of the
        file: the live data is well under the file (``live_bytes`` overestimates a Disque
        job's record), or the file grew by a quarter since the disk got low or the last such
        rewrite (while adds are refused it grows by acks and deletes, which a rewrite drops).
        Only when the new file fits in the free space and the reserve."""
        if self._rewrite_ids is not None or writer.rewrite_active:
            return
        size = writer.size
        live = self.runtime.core.live_bytes()
        gain = max(size // 4, REWRITE_FOR_SPACE_MIN)
        if size - live < gain and size - self._rewrite_base < gain:
            return
        self._rewrite_base = size  # one attempt per quarter of growth, whatever its outcome
        need = min(live, size)  # the new file's estimated size
        if need > self.disk_free + self.reserve_bytes:
            if self._no_room_size == size:
                return  # said so already
            self._no_room_size = size
            self.log.warning(
                "aof_rewrite_for_space_no_room",
                size=size,
                live_bytes=live,
                free_bytes=self.disk_free,
                reserve_bytes=self.reserve_bytes,
            )
            return
        if self.disk_free < need:
            self._release_reserve("rewrite")
        self.log.info(
            "aof_rewrite_for_space", size=size, live_bytes=live, free_bytes=self.disk_free
        )
        self.request_rewrite()
