"""Writing the append-only file: group-commit appends, fsync policies, incremental rewrite.

The server hands ``AofWriter.write`` one buffer of framed records (``framing.frame_into``) per
event-loop iteration and fsyncs it as ``FsyncPolicy`` says. A rewrite streams the live data set
into ``disq.aof.rewrite`` while live appends go to both files, then renames it over ``disq.aof``.
The format and the crash model are described in ``framing`` and ``aof_reader``.
"""

from __future__ import annotations

import enum
import os
import threading
from pathlib import Path
from typing import Final, NoReturn

from disq.persistence.aof_errors import (
    AofDisabledError,
    AofFsyncError,
    AofRewriteError,
    AofWriteError,
)
from disq.persistence.aof_reader import AofReadResult, read_aof
from disq.persistence.framing import HEADER, HEADER_SIZE, Bytes, count_records
from disq.persistence.fs import acquire_dir_lock, fsync_dir, fsync_fd, replace_durably, write_all

__all__ = ["AOF_NAME", "REWRITE_NAME", "AofWriter", "FsyncPolicy"]

AOF_NAME: Final = "disq.aof"
REWRITE_NAME: Final = "disq.aof.rewrite"
# The initial header is written here and renamed into place, so a crash while creating a data
# directory never leaves a disq.aof shorter than its header.
_INIT_NAME: Final = "disq.aof.init"


class FsyncPolicy(enum.Enum):
    """When appended records reach the disk; chosen and enforced by the server.

    ALWAYS (the default): every group-commit write is fsynced (``fsync_in_thread``, in a worker
    thread, the server holding the replies) before replying. EVERYSEC: a worker thread calls
    ``fsync_in_thread`` about once a second (a crash loses at most ~1 s of writes). NO: leave it
    to the OS.
    """

    ALWAYS = "always"
    EVERYSEC = "everysec"
    NO = "no"


class AofWriter:
    """Owns ``DIR/disq.aof`` for appending, and the rewrite that replaces it.

    Opening locks the directory, removes a rewrite left behind by a crash and creates the file if
    it does not exist. If it existed, call ``load`` (which reads it, cutting a torn tail) before
    the first write: appending behind a torn tail would turn it into corruption in the middle.

    Threading contract: every method belongs to one thread (the event loop), except
    ``fsync_in_thread``, which any other thread may call at any time, concurrently with
    ``write``, rewrites and ``close``. It fsyncs a ``dup`` of the current descriptor taken under a
    small lock, so a concurrent ``commit_rewrite`` or ``close`` can neither close the fd under it
    nor let it sync an unrelated file that reused the fd number. ``write`` takes no lock.
    """

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / AOF_NAME
        self.rewrite_path = self.data_dir / REWRITE_NAME
        self.records_written = 0
        self.bytes_written = 0
        self.rewrites_done = 0
        self._fd_lock = threading.Lock()
        self._fd = -1
        self._size = 0
        self._rw_fd: int | None = None
        self._rw_size = 0
        # Why the last rewrite stopped on its own, so the caller's next call can say so.
        self._rw_abort_reason: str | None = None
        self._ready = False
        self._closed = False
        self._failed: str | None = None
        self._dir_sync_pending = False
        # Bumped by every commit, so a worker thread whose directory fsync predates the latest
        # rename does not clear the "rename not yet durable" flag that rename set.
        self._renames = 0

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = acquire_dir_lock(self.data_dir)
        try:
            self._remove_leftovers()
            if not self.path.exists():
                self._create()
                self._ready = True
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self._size = os.fstat(self._fd).st_size
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- setup

    def _remove_leftovers(self) -> None:
        for name in (REWRITE_NAME, _INIT_NAME):
            leftover = self.data_dir / name
            try:
                size = leftover.stat().st_size
                leftover.unlink()
            except FileNotFoundError:
                continue
            from disq.logging import get_logger

            # The live file is still authoritative: a rewrite only wins by its final rename.
            get_logger().warning("aof_leftover_removed", path=str(leftover), size=size)

    def _create(self) -> None:
        replace_durably(self.path, HEADER, self.data_dir / _INIT_NAME)

    def load(self, by_offset: tuple[int, ...] = ()) -> AofReadResult:
        """Read the existing records (cutting a torn tail) and make the writer ready; those of
        the types in ``by_offset`` stay in the file's buffer (``read_aof``)."""
        self._check_open()
        result = read_aof(self.path, by_offset=by_offset)
        self._size = os.fstat(self._fd).st_size
        self._ready = True
        return result

    # -- state

    @property
    def size(self) -> int:
        """Bytes in the current live file, header included."""
        return self._size

    @property
    def rewrite_active(self) -> bool:
        return self._rw_fd is not None

    @property
    def rewrite_size(self) -> int:
        """Bytes in the rewrite file so far (0 when no rewrite is active)."""
        return self._rw_size if self._rw_fd is not None else 0

    def _check_open(self) -> None:
        if self._closed:
            raise AofWriteError(f"{self.path}: writer is closed")

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise AofDisabledError(
                f"{self.path}: writer disabled after an unrecoverable error ({self._failed}); "
                "restart the node so it replays the file from disk"
            )
        self._check_open()

    def _check_writable(self) -> None:
        self._check_usable()
        if not self._ready:
            raise RuntimeError(f"{self.path} existed: call load() before writing to it")

    # -- appending

    def write(self, data: Bytes, records: int | None = None) -> None:
        """Append ``data`` (whole framed records: one loop iteration's group-commit buffer).

        ``records`` is how many records ``data`` holds, for the stats counter; when omitted they
        are counted from the length prefixes, which also rejects (``ValueError``, nothing
        written) a buffer that is not whole records. During a rewrite the same bytes also go to the
        rewrite file. On failure the live file is cut back to where it was, ``AofWriteError`` is
        raised and the writer stays usable (e.g. retry after ENOSPC clears). A failure of the
        rewrite file only aborts the rewrite: the live file has the data, so the write succeeds.
        """
        if not data:
            return
        self._check_writable()
        if records is None:
            records = count_records(data)
        n = len(data)
        try:
            write_all(self._fd, data)
        except OSError as exc:
            self._roll_back(exc)
        self._size += n
        self.bytes_written += n
        self.records_written += records
        if self._rw_fd is not None:
            try:
                write_all(self._rw_fd, data)
            except OSError as exc:
                self._rewrite_failed("write", exc)
            else:
                self._rw_size += n

    def _roll_back(self, exc: OSError) -> NoReturn:
        # A partial append left in place would sit *before* the retried copy of the same
        # records: corruption in the middle at the next start. So it has to go.
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc2:
            self._failed = f"append failed ({exc}) and the rollback failed too ({exc2})"
            raise AofDisabledError(
                f"{self.path}: {self._failed}; the file may end in a partial record, which the "
                "next start will cut as a torn tail"
            ) from exc
        raise AofWriteError(
            f"{self.path}: append of records failed at offset {self._size}: {exc}; the file was "
            "rolled back and nothing was written",
            errno=exc.errno,
        ) from exc

    def fsync(self) -> None:
        """fsync the live file on the calling (owning) thread; for ``FsyncPolicy.ALWAYS``."""
        self._check_usable()
        try:
            fsync_fd(self._fd)
            if self._dir_sync_pending:
                fsync_dir(self.data_dir)
                self._dir_sync_pending = False
        except OSError as exc:
            self._fsync_failed(exc)

    def fsync_in_thread(self) -> int:
        """fsync from any thread; return a ``bytes_written`` watermark now durable.

        Every byte handed to ``write`` before the watermark (compare with ``bytes_written`` read
        right after that write returned) is on disk when this returns. The watermark is read
        before the fsync starts, so it can only under-report. Raises ``AofFsyncError`` (and
        disables the writer) if the fsync fails; returns the watermark untouched if closed.
        """
        with self._fd_lock:
            if self._closed or self._failed is not None:
                if self._failed is not None:
                    raise AofFsyncError(f"{self.path}: writer disabled ({self._failed})")
                return self.bytes_written
            mark = self.bytes_written
            fd = os.dup(self._fd)
            dir_pending = self._dir_sync_pending
            renames = self._renames
        try:
            fsync_fd(fd)
            if dir_pending:
                fsync_dir(self.data_dir)
                with self._fd_lock:
                    if self._renames == renames:
                        self._dir_sync_pending = False
        except OSError as exc:
            self._fsync_failed(exc)
        finally:
            os.close(fd)
        return mark

    def _fsync_failed(self, exc: OSError) -> NoReturn:
        self._failed = f"fsync failed: {exc}"
        raise AofFsyncError(
            f"{self.path}: fsync failed ({exc}); records written since the last successful "
            "fsync may be lost and a retry cannot tell, so the writer is disabled: restart the "
            "node to replay the file from disk"
        ) from exc

    # -- rewrite

    def begin_rewrite(self) -> None:
        """Start a new file next to the live one; from now on ``write`` appends to both.

        The caller then streams the live data set with ``write_snapshot`` over as many loop
        iterations as it likes. The new file interleaves snapshot chunks and live records in the
        order they happened, so replay must tolerate a live record about a job whose snapshot
        record comes later (that snapshot already reflects it).
        """
        self._check_writable()
        if self._rw_fd is not None:
            raise AofRewriteError(f"{self.rewrite_path}: a rewrite is already in progress")
        try:
            fd = os.open(
                self.rewrite_path,
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
                0o644,
            )
        except OSError as exc:
            raise AofRewriteError(f"{self.rewrite_path}: cannot create: {exc}") from exc
        self._rw_fd = fd
        self._rw_size = 0
        self._rw_abort_reason = None
        try:
            write_all(fd, HEADER)
        except OSError as exc:
            self._rewrite_failed("header write", exc)
            raise AofRewriteError(f"{self.rewrite_path}: header write failed: {exc}") from exc
        self._rw_size = HEADER_SIZE

    def write_snapshot(self, data: Bytes) -> None:
        """Append whole framed records to the rewrite file only.

        On failure the rewrite is aborted (its file deleted, which also frees the space an
        ENOSPC is about) and ``AofRewriteError`` is raised; the live file is untouched.
        """
        self._check_writable()
        fd = self._rw_fd
        if fd is None:
            raise self._no_rewrite()
        try:
            write_all(fd, data)
        except OSError as exc:
            self._rewrite_failed("snapshot write", exc)
            raise AofRewriteError(
                f"{self.rewrite_path}: snapshot write failed, rewrite aborted: {exc}"
            ) from exc
        self._rw_size += len(data)

    def commit_rewrite(self) -> None:
        """Make the rewrite file the live file: fsync it, rename it over ``disq.aof``, sync the
        directory, and keep appending to it. On failure before the rename the rewrite is
        aborted and ``AofRewriteError`` raised; the old file stays live and complete."""
        self._check_writable()
        fd = self._rw_fd
        if fd is None:
            raise self._no_rewrite()
        try:
            # Durable before the rename: otherwise a crash could leave the new name pointing
            # at a file whose contents never reached the disk.
            fsync_fd(fd)
            os.replace(self.rewrite_path, self.path)
        except OSError as exc:
            self._rewrite_failed("commit", exc)
            raise AofRewriteError(
                f"{self.rewrite_path}: commit failed, rewrite aborted: {exc}"
            ) from exc
        with self._fd_lock:
            old = self._fd
            self._fd = fd
            self._rw_fd = None
            self._size = self._rw_size
            self._rw_size = 0
            self._renames += 1
        os.close(old)
        self.rewrites_done += 1
        try:
            fsync_dir(self.data_dir)
        except OSError as exc:
            # The rename happened and both names hold complete files, so nothing is lost yet;
            # the next fsync retries making the rename durable (and fails loudly if it cannot).
            with self._fd_lock:
                self._dir_sync_pending = True
            from disq.logging import get_logger

            get_logger().warning("aof_dir_fsync_failed", path=str(self.data_dir), error=str(exc))

    def abort_rewrite(self) -> None:
        """Drop the rewrite in progress (no-op if none); the live file is unaffected."""
        fd = self._rw_fd
        if fd is None:
            return
        self._rw_fd = None
        self._rw_size = 0
        try:
            os.close(fd)
        finally:
            try:
                self.rewrite_path.unlink()
            except FileNotFoundError:
                pass

    def _no_rewrite(self) -> AofRewriteError:
        why = self._rw_abort_reason
        if why is None:
            return AofRewriteError(f"{self.rewrite_path}: no rewrite in progress")
        return AofRewriteError(f"{self.rewrite_path}: the rewrite was aborted: {why}")

    def _rewrite_failed(self, what: str, exc: OSError) -> None:
        self._rw_abort_reason = f"{what} failed: {exc}"
        from disq.logging import get_logger

        get_logger().warning(
            "aof_rewrite_aborted", path=str(self.rewrite_path), stage=what, error=str(exc)
        )
        try:
            self.abort_rewrite()
        except OSError:
            pass

    # -- lifecycle

    def close(self) -> None:
        """Abort any rewrite, close the file and release the directory lock. Idempotent.

        Does not fsync: the caller decides (a clean shutdown should ``fsync`` first).
        """
        if self._closed:
            return
        try:
            self.abort_rewrite()
        finally:
            with self._fd_lock:
                self._closed = True
                fd, self._fd = self._fd, -1
            try:
                if fd >= 0:
                    os.close(fd)
            finally:
                os.close(self._lock_fd)

    def __enter__(self) -> AofWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
