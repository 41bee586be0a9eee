"""Disque job ids: shape, the odd/even TTL rule, validation, determinism under a seed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disq.core import ids

NODE = "dcb833cf" + "0" * 32


@given(ttl=st.integers(0, 10**9), retry=st.integers(0, 10**6), seed=st.integers(0, 2**32))
def test_shape_and_ttl_parity(ttl: int, retry: int, seed: int) -> None:
    job_id = ids.make_job_id(NODE, random.Random(seed), ttl, retry)
    assert len(job_id) == 40
    assert ids.validate_job_id(job_id) == job_id
    assert ids.node_prefix(job_id) == "dcb833cf"
    assert ids.may_be_redelivered(job_id) is (retry > 0)
    assert abs(ids.ttl_minutes(job_id) - min(ttl // 60, 0xFFFF)) <= 1


def test_same_seed_same_ids_and_ids_differ() -> None:
    a = [ids.make_job_id(NODE, random.Random(7), 86400, 300) for _ in range(2)]
    assert a[0] == a[1]
    rng = random.Random(7)
    many = {ids.make_job_id(NODE, rng, 86400, 300) for _ in range(1000)}
    assert len(many) == 1000


def test_example_from_disque_validates() -> None:
    assert ids.validate_job_id("D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1")
    assert ids.ttl_minutes("D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1") == 0x05A1


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a",
        "X-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1",
        "D_dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1",
        "D-dcb833cf_8YL1NT17e9+wsA/09NqxscQI-05a1",
        "D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI_05a1",
    ],
)
def test_bad_ids(bad: str) -> None:
    with pytest.raises(ids.BadJobId):
        ids.validate_job_id(bad)
