"""Durable file operations for the data directory: whole writes, fsyncs, atomic replace, locking,
free space and the disk reserve.

``replace_durably`` is the project's one way to replace a file atomically (the AOF's initial
header, ``node.json``, ``cluster.json``, CONFIG REWRITE): after any crash the file holds either
its old or its new content, never a mix or nothing.

``fsync_fd`` is the one fsync of the AOF's files (the fault hook ``disq.testing.faults`` replaces
it in ``disq.persistence.aof_writer``). ``disk_space`` reads the filesystem's free space with one
``statvfs``; ``create_reserve`` / ``release_reserve`` keep a preallocated file in the data
directory that is deleted to give a full disk back a little room (docs/disk-full.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import TYPE_CHECKING, Final, NamedTuple, TypeAlias

from disq.persistence.aof_errors import AofLockedError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "LOCK_NAME",
    "RESERVE_NAME",
    "DiskSpace",
    "acquire_dir_lock",
    "create_reserve",
    "disk_space",
    "fsync_dir",
    "fsync_fd",
    "release_reserve",
    "replace_durably",
    "truncate_file",
    "write_all",
    "write_file_synced",
]

# The data directory's lock file (see acquire_dir_lock): one node per directory.
LOCK_NAME: Final = "lock"
# The preallocated room released when the disk fills (create_reserve, release_reserve).
RESERVE_NAME: Final = "disq.reserve"
_ZEROS = bytes(1 << 16)

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


def fsync_fd(fd: int) -> None:
    """fsync one of the AOF's descriptors. A function of its own so a fault hook can replace
    it in the writer's namespace without touching every other fsync of the process."""
    os.fsync(fd)


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


class DiskSpace(NamedTuple):
    """One ``statvfs`` of a directory's filesystem, in bytes."""

    total: int
    free: int  # what an unprivileged writer may still use (f_bavail): root's margin excluded


def disk_space(directory: Path) -> DiskSpace:
    st = os.statvfs(directory)
    return DiskSpace(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def create_reserve(path: Path, size: int) -> None:
    """Make ``path`` a file of ``size`` bytes whose blocks are allocated now (posix_fallocate;
    zeros where the filesystem does not support it). An existing file of that size is kept.
    On failure (the disk is already too full) the partial file is removed and OSError raised.
    Copy-on-write or compressing filesystems (btrfs, ZFS) may not hold the blocks for later."""
    try:
        if path.stat().st_size == size:
            return
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            left = size
            while left > 0:
                left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        raise
    os.close(fd)


def release_reserve(path: Path) -> int:
    """Delete the reserve file; the bytes it gave back (0 if there was none)."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size
