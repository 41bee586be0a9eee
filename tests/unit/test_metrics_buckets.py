"""The metrics' own helpers: fixed-bucket histograms, the per-queue cap, event counting, the
admin port's auth check, and the metrics-port config key."""

from __future__ import annotations

import base64
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from disq.config import parse_config
from disq.core import events as ev
from disq.server.admin_http import authorized
from disq.server.metrics import (
    MAX_QUEUE_SERIES,
    OTHER,
    LatencyHistogram,
    NodeMetrics,
    _capped,
)


def test_histogram_buckets_are_upper_bounds_and_cumulative() -> None:
    h = LatencyHistogram((1, 10, 100), unit_s=0.001)
    for v in (0, 1, 2, 10, 11, 100, 101, 5000):
        h.observe(v)
    assert h.counts == [2, 2, 2, 2]  # <=1, <=10, <=100, above
    assert h.count == 8 and h.sum == 5225
    assert h.cumulative() == [("0.001", 2), ("0.01", 4), ("0.1", 6), ("+Inf", 8)]


def test_histogram_family_is_valid_exposition() -> None:
    h = LatencyHistogram((0.5, 1.0))
    h.observe(0.25)
    h.observe(3.0)

    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield h.family("x_seconds", "doc")

    reg = CollectorRegistry()
    reg.register(One())
    [fam] = list(text_string_to_metric_families(generate_latest(reg).decode()))
    assert fam.type == "histogram"
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert got[("x_seconds_bucket", "0.5")] == 1
    assert got[("x_seconds_bucket", "+Inf")] == 2
    assert got[("x_seconds_count", None)] == 2
    assert got[("x_seconds_sum", None)] == 3.25


def test_queue_series_are_capped() -> None:
    small = [("a", 1), ("b", 2)]
    assert _capped(small) == small
    many = [(f"q{i}", i) for i in range(MAX_QUEUE_SERIES + 10)]
    out = dict(_capped(many))
    assert len(out) == MAX_QUEUE_SERIES + 1
    assert out[OTHER] == sum(range(10))  # the 10 shallowest, summed
    assert "q0" not in out and f"q{MAX_QUEUE_SERIES + 9}" in out


def test_events_count_per_queue_without_a_host() -> None:
    m = NodeMetrics()
    buf = ev.EventBuffer()
    buf.add(ev.ENQUEUED, 1, "q", "D-x", 0, 1)
    buf.add(ev.DELIVERED, 2, "q", "D-x", 1, 1)
    buf.add(ev.ACKED, 3, "", "D-y", 0, 0)
    m.on_events(buf.take())
    assert m.queue_events["q"][ev.ENQUEUED] == 1
    assert m.queue_events["q"][ev.DELIVERED] == 1
    assert m.queue_events[""][ev.ACKED] == 1
    assert m.delivery.count == 0  # no host: no job to read a ctime from


def test_auth_header() -> None:
    assert authorized(None, None)
    assert not authorized(None, "pw")
    assert authorized("Bearer pw", "pw")
    assert not authorized("Bearer px", "pw")
    basic = base64.b64encode(b"anyone:pw").decode()
    assert authorized(f"Basic {basic}", "pw")
    assert not authorized("Basic !!!", "pw")
    assert not authorized("Digest x", "pw")


def test_metrics_port_config_key(tmp_path: Path) -> None:
    assert parse_config("", cwd=tmp_path).settings.metrics_port == 9711
    assert parse_config("port 7000\n", cwd=tmp_path).settings.metrics_port == 9000
    assert parse_config("metrics-port 0\n", cwd=tmp_path).settings.metrics_port == 0
    assert parse_config("metrics-port 9100\n", cwd=tmp_path).settings.metrics_port == 9100
    assert parse_config("port 0\n", cwd=tmp_path).settings.metrics_port == 0
    high = parse_config("port 65000\ngrpc-port 7000\n", cwd=tmp_path)
    assert high.settings.metrics_port == 0  # past 65535: off
    store = parse_config("port 7000\n", cwd=tmp_path)
    assert store.get("metrics-port") == [("metrics-port", "9000")]
