"""LazyFS mounts for the power-loss tests (third_party/lazyfs, built by
scripts/ensure_lazyfs.sh).

A :class:`LazyMount` is one LazyFS process serving ``mnt`` over the directory ``root``: what a
process writes there stays in LazyFS's own cache until it is fsynced, and
:meth:`LazyMount.clear_cache` drops every unsynced byte, as a power cut would. Commands go
through LazyFS's fault FIFO; the FIFO of completed faults says when one is done, so nothing is
slept for.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENSURE = ROOT / "scripts" / "ensure_lazyfs.sh"
MOUNT_TIMEOUT_S = 15.0
FAULT_TIMEOUT_S = 30.0


def lazyfs_binary() -> str:
    """The built LazyFS binary, or a skip that says why this machine cannot run it."""
    if os.geteuid() != 0:
        pytest.skip("LazyFS mounts need root here (no user_allow_other setup)")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: FUSE is not usable on this machine")
    try:
        with open("/dev/fuse", "rb+", buffering=0):
            pass
    except OSError as exc:
        pytest.skip(f"/dev/fuse cannot be opened: {exc}")
    try:
        r = subprocess.run([str(ENSURE)], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"LazyFS could not be built: {exc}")
    if r.returncode != 0:
        pytest.skip(f"LazyFS could not be built: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout.strip().splitlines()[-1]


def _mounted(mnt: Path) -> bool:
    target = str(mnt)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


class LazyMount:
    """One LazyFS mount at ``base/mnt`` over ``base/root`` (created), its FIFOs in ``base``."""

    def __init__(self, binary: str, base: Path, cache_size: str = "128mb") -> None:
        self.base = base
        self.root = base / "root"
        self.mnt = base / "mnt"
        self.fifo = base / "faults.fifo"
        self.done_fifo = base / "done.fifo"
        self.log_path = base / "lazyfs.log"
        for d in (self.root, self.mnt):
            d.mkdir(parents=True, exist_ok=True)
        self.config = base / "lazyfs.toml"
        self.config.write_text(
            "[faults]\n"
            f'fifo_path="{self.fifo}"\n'
            f'fifo_path_completed="{self.done_fifo}"\n'
            "[cache]\napply_eviction=false\n"
            f'[cache.simple]\ncustom_size="{cache_size}"\nblocks_per_page=1\n'
            '[filesystem]\nlog_all_operations=false\nlogfile=""\n'
        )
        self.binary = binary
        self._log = open(self.log_path, "ab")
        self._done_fd = -1
        self._mount()

    def _mount(self) -> None:
        argv = [self.binary, str(self.mnt), "--config-path", str(self.config), "-f"]
        argv += ["-o", "modules=subdir", "-o", f"subdir={self.root}"]
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not (_mounted(self.mnt) and self.done_fifo.exists() and self.fifo.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                pytest.skip(f"LazyFS did not mount: {self.log_text()[-2000:]}")
            time.sleep(0.02)
        # Read-write: the open never blocks, and LazyFS's own open for writing (its fault
        # thread's first step) finds a reader.
        self._done_fd = os.open(self.done_fifo, os.O_RDWR | os.O_NONBLOCK)

    def remount(self) -> None:
        """A new LazyFS over the same directory (after it crashed on a fault): what was
        persisted is what the node finds."""
        self._unmount()
        self._mount()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def command(self, cmd: str, done: bytes | None) -> None:
        """Send one fault command; with ``done``, wait until LazyFS reports it finished."""
        fd = os.open(self.fifo, os.O_WRONLY)
        try:
            os.write(fd, cmd.encode() + b"\n")
        finally:
            os.close(fd)
        if done is None:
            return
        got = b""
        deadline = time.monotonic() + FAULT_TIMEOUT_S
        while done not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"LazyFS did not finish {cmd!r}: {self.log_text()[-2000:]}")
            ready, _, _ = select.select([self._done_fd], [], [], left)
            if ready:
                got += os.read(self._done_fd, 4096)

    def clear_cache(self) -> None:
        """Drop every write not yet fsynced: the power cut, for this disk."""
        self.command("lazyfs::clear-cache", b"finished::clear-cache")

    def _unmount(self) -> None:
        if _mounted(self.mnt):
            umount = shutil.which("fusermount3") or "fusermount"
            subprocess.run([umount, "-u", "-z", str(self.mnt)], capture_output=True, timeout=30)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._done_fd >= 0:
            os.close(self._done_fd)
            self._done_fd = -1
        for fifo in (self.fifo, self.done_fifo):
            fifo.unlink(missing_ok=True)  # LazyFS makes them anew at its start

    def tear_next_write(self, name: str) -> None:
        """LazyFS's torn-op on ``name`` (in the mount): its next write is cut in three parts,
        the first and the third reach the disk, then LazyFS kills itself. Returns once LazyFS
        says the fault is set (its log: the FIFO of completed faults tells only clear-cache)."""
        cmd = f"lazyfs::torn-op::file={self.root / name}::parts=3::persist=1,3"
        seen = self.log_text().count("configured successfully")
        self.command(cmd, None)
        deadline = time.monotonic() + FAULT_TIMEOUT_S
        while self.log_text().count("configured successfully") <= seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"LazyFS did not take {cmd!r}: {self.log_text()[-2000:]}")
            time.sleep(0.02)

    def close(self) -> None:
        self._unmount()
        self._log.close()
