"""The beanstalk TCP protocol's accept: a connection past the core's session bound is closed
and logged (one line for a flood, with the count), and any other failure at accept is logged
with its traceback instead of passing for "the limit" (issue 32)."""

from __future__ import annotations

from typing import Any

import structlog

from disq.core.beanstalk.core import BeanstalkCore, Limits
from disq.server import beanstalk_tcp
from disq.server.beanstalk_tcp import BeanstalkProtocol


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _Host:
    """What BeanstalkProtocol reads of the runtime at accept."""

    def __init__(self, core: BeanstalkCore) -> None:
        self.beanstalk = core
        self.replicator = None
        self.sessions: dict[Any, Any] = {}
        self.op_counts = [0] * 64
        self.now = 0

    def now_ms(self) -> int:
        return self.now


def _accept(host: _Host) -> _Transport:
    t = _Transport()
    BeanstalkProtocol(host).connection_made(t)  # type: ignore[arg-type]
    return t


def test_connections_past_the_session_bound_are_closed_and_logged_once_per_interval() -> None:
    host = _Host(BeanstalkCore(Limits(max_sessions=1)))
    beanstalk_tcp._refused_state[:] = [0, -beanstalk_tcp.REFUSED_LOG_EVERY_MS]
    with structlog.testing.capture_logs() as logs:
        assert not _accept(host).closed  # the one session the bound allows
        refused = [_accept(host) for _ in range(5)]
        host.now = beanstalk_tcp.REFUSED_LOG_EVERY_MS
        refused.append(_accept(host))
    assert all(t.closed for t in refused)
    assert len(host.sessions) == 1
    lines = [e for e in logs if "session limit" in e["event"]]
    assert [e["refused"] for e in lines] == [1, 5]  # the first refusal, then the rest counted
    assert all(e["log_level"] == "warning" for e in lines)


class _DoorBugHost(_Host):
    """A runtime whose counters raise when the new door reads them: a failure at accept that
    is not the session bound. A property, so the door's own code raises it whether it runs
    compiled or not (a compiled module calls the door class directly: replacing the module's
    ``BeanstalkDoor`` would not reach it)."""

    @property
    def op_counts(self) -> list[int]:
        raise RuntimeError("door bug")

    @op_counts.setter
    def op_counts(self, value: list[int]) -> None:
        pass


def test_another_failure_at_accept_is_logged_with_its_traceback() -> None:
    host = _DoorBugHost(BeanstalkCore())
    with structlog.testing.capture_logs() as logs:
        assert _accept(host).closed
    (line,) = [e for e in logs if e["log_level"] == "error"]
    assert line["event"].startswith("beanstalk connection setup failed")
    assert isinstance(line["exc_info"], RuntimeError) or line["exc_info"] is True
    assert not [e for e in logs if "session limit" in e["event"]]
