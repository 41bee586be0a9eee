"""The node's open-files limit, raised at start toward the hard limit as Redis does.

A process started by systemd (or a shell) often gets a soft ``RLIMIT_NOFILE`` of 1024 under a
hard limit far above it. Every connection of every port, the AOF, the event log and gRPC's
own sockets share that number, so a node with 1024 descriptors serves a few hundred clients
and then stops accepting on every port at once. Redis's ``adjustOpenFilesLimit`` raises the
soft limit to what ``maxclients`` needs (plus a reserve) before it serves; the node does the
same, and logs what it got: a hard limit below the wish is the operator's to raise, and the
log line says so. Only the soft limit moves: raising the hard one needs privileges a node
should not use, and lowering nothing.

Kept to ``resource`` (a builtin extension): this runs on every start, which is measured
(``python -m bench startup``).
"""

from __future__ import annotations

import resource

__all__ = ["RESERVED_FDS", "OpenFilesLimit", "raise_open_files_limit", "wanted_open_files"]

# Descriptors beside the client connections: the AOF and its rewrite, the event log, the
# listening sockets, the admin port's connections, gRPC's sockets, pipes and timers, the job
# lanes to and from every peer and the lane port's connections that have not said hello yet
# (job_lane.pending_caps). Redis reserves 32 for its handful; a node has more of its own.
RESERVED_FDS = 1024


class OpenFilesLimit:
    """What the raise got. A plain class: a dataclass costs a millisecond of every start
    to build (its methods are generated with exec)."""

    __slots__ = ("before", "hard", "soft", "wanted")

    def __init__(self, before: int, soft: int, hard: int, wanted: int) -> None:
        self.before = before  # the soft limit the process was started with
        self.soft = soft  # the soft limit now
        self.hard = hard  # the hard limit (RLIM_INFINITY as -1, as resource reports it)
        self.wanted = wanted

    @property
    def short(self) -> bool:
        """Below what was wanted (the hard limit, or the kernel, said no)."""
        return self.soft != resource.RLIM_INFINITY and self.soft < self.wanted


def wanted_open_files(max_clients: int) -> int:
    return max(0, max_clients) + RESERVED_FDS


def raise_open_files_limit(wanted: int) -> OpenFilesLimit:
    """Raise the soft RLIMIT_NOFILE to ``wanted``, or as close to it as the hard limit (and
    the kernel's nr_open) let it go; never lowers it."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    if before == infinite or before >= wanted:
        return OpenFilesLimit(before, before, hard, wanted)
    target = wanted if hard == infinite else min(wanted, hard)
    soft = before
    # The kernel can refuse a value under the hard limit (fs.nr_open below an unlimited hard
    # limit, a container's seccomp): step down, as Redis does, halving the distance to what
    # the process has, until a value is taken or nothing is left to gain.
    while target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = soft + (target - soft) // 2
            continue
        soft = target
        break
    return OpenFilesLimit(before, soft, hard, wanted)
