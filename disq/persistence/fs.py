"""Durable file operations for the data directory: whole writes, fsyncs, atomic replace, locking.

``replace_durably`` is the project's one way to replace a file atomically (the AOF's initial
header, ``node.json``, ``cluster.json``, CONFIG REWRITE): after any crash the file holds either
its old or its new content, never a mix or nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import TYPE_CHECKING, Final, TypeAlias

from disq.persistence.aof_errors import AofLockedError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "LOCK_NAME",
    "acquire_dir_lock",
    "fsync_dir",
    "replace_durably",
    "truncate_file",
    "write_all",
    "write_file_synced",
]

# The data directory's lock file (see acquire_dir_lock): one node per directory.
LOCK_NAME: Final = "lock"

_Bytes: TypeAlias = bytes | bytearray | memoryview


def write_all(fd: int, data: _Bytes) -> None:
    n = os.write(fd, data)
    total = len(data)
    if n == total:
        return
    view = memoryview(data)
    while n < total:
        w = os.write(fd, view[n:])
        if w == 0:
            # A regular file only returns 0 for a 0-byte request; never spin on it.
            raise OSError(errno.EIO, "write returned 0")
        n += w


def fsync_dir(directory: Path) -> None:
    # A rename or create is only durable once the directory itself is synced.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_synced(path: Path, data: _Bytes, *, exclusive: bool) -> None:
    """Write a whole file and fsync it; ``exclusive`` refuses to overwrite one."""
    mode = os.O_EXCL if exclusive else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(
    path: Path, data: bytes, tmp: Path | None = None, *, mode: int | None = None
) -> None:
    """Make ``path`` hold ``data`` or its old content after any crash: write a temporary
    file, fsync it, rename it over ``path``, fsync the directory. ``mode``: permissions the
    temporary file gets before the rename (default: those it has or was created with)."""
    tmp = tmp if tmp is not None else path.with_name(path.name + ".tmp")
    write_file_synced(tmp, data, exclusive=False)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def truncate_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def acquire_dir_lock(directory: Path) -> int:
    """Take the exclusive lock on ``directory/lock``; return its fd (closing it unlocks)."""
    lock_path = directory / LOCK_NAME
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # flock, not fcntl/lockf: flock locks belong to the open file description, so a second
        # open in this same process conflicts too, and the kernel drops them when we die.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        os.close(fd)
        raise AofLockedError(
            f"data directory {directory} is in use by another disq-node (pid {holder} holds "
            f"{lock_path}); two nodes must never share a data directory. Stop that process "
            "or give this node its own directory."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        # Only a hint for the message above; the lock itself is what excludes.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    return fd
