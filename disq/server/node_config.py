"""A node's settings that the runtime and its AOF service share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq.core.beanstalk.core import Limits

if TYPE_CHECKING:
    from pathlib import Path  # imported by whoever gives a data_dir (not a memory-only node)

REWRITE_MIN_BYTES = 64 << 20  # an AOF smaller than this is never rewritten


class NodeConfig:
    """A plain class, not a dataclass: ``dataclasses`` (with ``inspect``) is about 0.8 ms of a
    node's start before its first answer, and nothing compares or copies configs."""

    def __init__(
        self,
        data_dir: Path | None = None,
        fsync: str = "always",  # always | everysec | no
        fsync_interval_ms: int = 1000,
        limits: Limits | None = None,
        binlog_max_size: int = 10 << 20,  # reported by stats; beanstalkd's -s
        rewrite_min_bytes: int = REWRITE_MIN_BYTES,
        metrics_port: int = 0,  # the HTTP admin port (/metrics, /healthz); 0: off
        metrics_host: str = "127.0.0.1",
        metrics_port_required: bool = True,  # False (a derived default): a busy port only warns
        # The dashboard on the admin port (disq/dashboard/) is read-only unless requirepass is
        # set (actions after login) or this is on (actions from loopback clients without a
        # password).
        dashboard_actions: bool = False,
        drain_timeout_s: float = 20.0,  # SIGTERM: hand jobs off this long at most (drain.py)
    ) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self.fsync_interval_ms = fsync_interval_ms
        self.limits: Limits = limits if limits is not None else Limits()
        self.binlog_max_size = binlog_max_size
        self.rewrite_min_bytes = rewrite_min_bytes
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics_port_required = metrics_port_required
        self.dashboard_actions = dashboard_actions
        self.drain_timeout_s = drain_timeout_s

    def __repr__(self) -> str:
        return f"NodeConfig({vars(self)!r})"
