"""sim_share.py: DISQ_SIM_SHARE splits a sweep's seeds so that make test's two runs cover each
seed exactly once, and a bad value is refused rather than silently sweeping nothing."""

from __future__ import annotations

import pytest
from sim_share import SHARE_ENV, share, shared_seeds


def test_unset_sweeps_every_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARE_ENV, raising=False)
    assert share() == (0, 1)
    assert shared_seeds(range(10)) == list(range(10))


def test_the_two_shares_of_make_test_cover_each_seed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    for k in (0, 1):
        monkeypatch.setenv(SHARE_ENV, f"{k}/2")
        mine = shared_seeds(range(150))
        assert 70 <= len(mine) <= 80
        seen += mine
    assert sorted(seen) == list(range(150))


@pytest.mark.parametrize("raw", ["2/2", "1", "a/2", "1/0", "-1/2", "0/2/3"])
def test_a_bad_share_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(SHARE_ENV, raw)
    with pytest.raises(ValueError, match="DISQ_SIM_SHARE"):
        share()
