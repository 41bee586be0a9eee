"""The kombu transport's fetcher (disq.integrations.kombu_loop): a thread fetches, the
caller's thread (the event loop's) delivers, one batch at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kombu.exceptions import ConnectionError

from disq.integrations.kombu_loop import Fetcher

Deliver = Callable[[dict[str, Any], str], None]


def message(job_id: str) -> dict[str, Any]:
    return {"properties": {"delivery_info": {"disq_job_id": job_id}}}


class FakeDrain:
    """Each call delivers the next batch of ``batches`` (then times out, as a drain with
    nothing to fetch); records the thread of each call."""

    def __init__(self, batches: list[list[str]], error: BaseException | None = None) -> None:
        self.batches = list(batches)
        self.error = error
        self.calls = 0
        self.threads: set[int] = set()
        self.called = threading.Event()

    def __call__(self, timeout: float, deliver: Deliver) -> None:
        self.calls += 1
        self.threads.add(threading.get_ident())
        self.called.set()
        if self.batches:
            for job_id in self.batches.pop(0):
                deliver(message(job_id), "q")
            return
        if self.error is not None:
            raise self.error
        threading.Event().wait(min(timeout, 0.05))  # a short GETJOB that found nothing
        raise TimeoutError()


def test_batches_are_delivered_in_the_callers_thread_one_at_a_time() -> None:
    drain = FakeDrain([["a", "b"], ["c"]])
    delivered: list[tuple[str, int]] = []
    f = Fetcher(
        drain,
        lambda m, q: delivered.append(
            (m["properties"]["delivery_info"]["disq_job_id"], threading.get_ident())
        ),
    )
    try:
        assert f.wait(5)
        assert [d[0] for d in delivered] == ["a", "b"]
        assert {d[1] for d in delivered} == {threading.get_ident()}
        assert threading.get_ident() not in drain.threads
        assert f.wait(5)  # the next batch: fetched only once the first was delivered
        assert [d[0] for d in delivered] == ["a", "b", "c"]
        assert not f.wait(0.2)  # nothing more
    finally:
        f.stop(2.0, lambda _id: None)


def test_the_next_fetch_waits_for_the_last_batch_to_be_delivered() -> None:
    drain = FakeDrain([["a"], ["b"]])
    f = Fetcher(drain, lambda m, q: None)
    put_back: list[str] = []
    try:
        assert drain.called.wait(5)
        threading.Event().wait(0.3)  # time for a second fetch, were it not held
        assert drain.calls == 1  # the prefetch room of the next one is not known yet
    finally:
        f.stop(2.0, put_back.append)
    assert put_back == ["a"]  # fetched, never delivered: put back (NACK) at the stop


def test_a_connection_error_is_raised_in_the_callers_thread() -> None:
    drain = FakeDrain([], error=ConnectionError("cluster out of reach"))
    f = Fetcher(drain, lambda m, q: None)
    try:
        with pytest.raises(ConnectionError, match="out of reach"):
            f.wait(5)
    finally:
        f.stop(2.0, lambda _id: None)
