"""The errors of the append-only file layer (reading, writing, rewriting, locking)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "AofCorruptError",
    "AofDisabledError",
    "AofError",
    "AofFsyncError",
    "AofLockedError",
    "AofRewriteError",
    "AofWriteError",
]


class AofError(Exception):
    """Base class; ``code`` is stable and machine-readable (for logs, metrics, exit reasons).

    Deliberately not a ``DisqError``: those codes go on the wire, these never do. The server maps
    a failed append to ``PersistenceFailed`` for the client.
    """

    code = "AOF_ERROR"


class AofCorruptError(AofError):
    """The file is damaged somewhere a crash cannot explain; the node must not start on it."""

    code = "AOF_CORRUPT"

    def __init__(self, message: str, *, path: Path, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class AofLockedError(AofError):
    """Another process (or another writer in this process) holds the data directory."""

    code = "AOF_LOCKED"


class AofWriteError(AofError):
    """An append failed. The file was rolled back to its previous end, so a retry is safe.
    ``errno``: the OS error's number when one caused it (``ENOSPC``: the disk is full)."""

    code = "AOF_WRITE"

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class AofDisabledError(AofWriteError):
    """The writer refused for good after an error it cannot undo (a failed fsync, or an append
    whose rollback failed too): the node must stop and replay the file from disk."""

    code = "AOF_DISABLED"


class AofFsyncError(AofWriteError):
    """fsync failed: the writer is now unusable and the node must restart and replay from disk.

    After a failed fsync Linux may have dropped the dirty pages and marked them clean, so a
    retried fsync can succeed without the data ever reaching the disk ("fsyncgate"). Only a
    re-read of the file tells the truth.
    """

    code = "AOF_FSYNC"


class AofRewriteError(AofError):
    """A rewrite failed or was misused; the live file is unaffected and keeps taking writes."""

    code = "AOF_REWRITE"
