"""disq.server.fd_limit: the soft open-files limit raised toward the hard limit at start, and
the lane port's caps that follow it (disq.server.job_lane.pending_caps)."""

from __future__ import annotations

import resource

import pytest

from disq.server import fd_limit
from disq.server.job_lane import pending_caps


class FakeLimits:
    def __init__(self, soft: int, hard: int, kernel_max: int) -> None:
        self.soft, self.hard, self.kernel_max = soft, hard, kernel_max
        self.tried: list[int] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.soft, self.hard

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        self.tried.append(limits[0])
        if limits[0] > self.kernel_max:  # fs.nr_open, a seccomp filter
            raise ValueError("not allowed")
        self.soft = limits[0]


def _fake(monkeypatch: pytest.MonkeyPatch, limits: FakeLimits) -> None:
    monkeypatch.setattr(fd_limit.resource, "getrlimit", limits.getrlimit)
    monkeypatch.setattr(fd_limit.resource, "setrlimit", limits.setrlimit)


def test_the_soft_limit_goes_to_what_is_wanted_under_the_hard_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = FakeLimits(1024, 1 << 20, 1 << 20)
    _fake(monkeypatch, limits)
    got = fd_limit.raise_open_files_limit(fd_limit.wanted_open_files(10_000))
    assert (got.before, got.soft, got.hard, got.wanted, got.short) == (
        1024,
        11_024,
        1 << 20,
        11_024,
        False,
    )


def test_a_hard_limit_below_the_wish_is_as_far_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, FakeLimits(1024, 4096, 1 << 20))
    got = fd_limit.raise_open_files_limit(11_024)
    assert (got.soft, got.short) == (4096, True)


def test_a_refused_value_is_stepped_down_and_never_lowers_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = FakeLimits(1024, resource.RLIM_INFINITY, 3000)
    _fake(monkeypatch, limits)
    got = fd_limit.raise_open_files_limit(11_024)
    assert 1024 < got.soft <= 3000 and got.short
    assert limits.tried[0] == 11_024 and all(t > 1024 for t in limits.tried)
    # Nothing to gain: the limit is left alone.
    limits = FakeLimits(20_000, 20_000, 20_000)
    _fake(monkeypatch, limits)
    assert fd_limit.raise_open_files_limit(11_024).soft == 20_000 and limits.tried == []


def test_the_lane_caps_are_an_eighth_of_the_limit_at_most() -> None:
    assert pending_caps(1024) == (64, 128)
    assert pending_caps(11_024) == (512, 1024)
    assert pending_caps(resource.RLIM_INFINITY) == (512, 1024)
    for soft in (16, 64, 256, 1024, 4096, 100_000):
        per_port, total = pending_caps(soft)
        assert 1 <= per_port <= total <= soft // 8
