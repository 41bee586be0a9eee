"""A node's settings that the runtime and its AOF service share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from disq.core.beanstalk.core import Limits

if TYPE_CHECKING:
    from pathlib import Path  # imported by whoever gives a data_dir (not a memory-only node)

REWRITE_MIN_BYTES = 64 << 20  # an AOF smaller than this is never rewritten


@dataclass
class NodeConfig:
    data_dir: Path | None = None
    fsync: str = "everysec"  # always | everysec | no
    fsync_interval_ms: int = 1000
    limits: Limits = field(default_factory=Limits)
    binlog_max_size: int = 10 << 20  # reported by stats; beanstalkd's -s
    rewrite_min_bytes: int = REWRITE_MIN_BYTES
    metrics_port: int = 0  # the HTTP admin port (/metrics, /healthz); 0: off
    metrics_host: str = "127.0.0.1"
    metrics_port_required: bool = True  # False (a derived default): a busy port only warns
    # The dashboard on the admin port (disq/dashboard/) is read-only unless requirepass is set
    # (actions after login) or this is on (actions from loopback clients without a password).
    dashboard_actions: bool = False
    drain_timeout_s: float = 20.0  # SIGTERM: hand jobs off this long at most (drain.py)
