"""The Spark sink against real nodes and a real local Spark session (one for the module).

Slow: the JVM starts once (~10 s), then each write of 100k rows takes seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Java is needed for Spark (make test installs it)", allow_module_level=True)

from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from disq.client import Client  # noqa: E402

pytestmark = pytest.mark.slow
ROWS = 100_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from disq.spark import session

    # local[2,4]: two cores, and a failed task is tried up to 4 times (what a cluster does).
    s = session("disq-tests", master="local[2,4]")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """This module's 3 nodes, with a 5 s node timeout (conftest's lab3 has 1.5 s): the module
    leaves ~100k replicated jobs on them while the suite's other workers and a JVM hold both
    cores, and a peer marked failing for a missed probe makes its holders requeue every copy
    at once (the work of which missed more probes, seen as a requeue storm in a loaded run).
    No test here kills a node."""
    with Lab(3, tmp_path_factory.mktemp("lab3"), node_timeout_ms=5000) as lab:
        yield lab


def nodes(lab: Lab) -> str:
    return ",".join(f"127.0.0.1:{lab.node(i).bus_port}" for i in range(lab.n))


def drain(lab: Lab, queue: str) -> list[bytes]:
    """Every queued job of ``queue`` on every node (Disque's queues are per node)."""
    bodies: list[bytes] = []
    for i in range(lab.n):
        with Client(f"127.0.0.1:{lab.node(i).bus_port}", discover=False) as c:
            while True:
                jobs = c.get_jobs(queue, count=1000, nohang=True)
                if not jobs:
                    break
                bodies.extend(j.body for j in jobs)
                c.fast_ack(*(j.id for j in jobs))
    return bodies


def qlen_all(lab: Lab, queue: str) -> int:
    total = 0
    for i in range(lab.n):
        with Client(f"127.0.0.1:{lab.node(i).bus_port}", discover=False) as c:
            total += c.qlen(queue)
    return total


def write(spark: Any, lab: Lab, queue: str, **options: str) -> None:
    df = spark.range(0, ROWS, numPartitions=4).selectExpr("concat('row-', id) as body")
    w = df.write.format("disq").mode("append").option("nodes", nodes(lab))
    w = w.option("queue", queue).option("replicate", "2").option("retry", "600")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_100k_rows_arrive_exactly_once_though_a_task_is_retried(spark: Any, lab3: Lab) -> None:
    write(spark, lab3, "exactly", _failFirstAttemptAfter="3000")
    bodies = drain(lab3, "exactly")
    assert len(bodies) == ROWS
    assert set(bodies) == {f"row-{i}".encode() for i in range(ROWS)}


def test_a_task_failing_with_adds_in_flight_is_retried_on_another_node(
    spark: Any, lab3: Lab
) -> None:
    """Partition 0's first attempt fails at row 3250 without waiting for its last AddJobs
    (some answered, the last ones sent with no answer yet: the task's client goes away, so
    the nodes cancel what is not done). Its retry starts on another node (the sink rotates
    the node per attempt), whose copies of the cancelled adds may not be deleted yet: every
    row still arrives exactly once, none lost, none twice."""
    write(spark, lab3, "inflight", _failFirstAttemptInFlightAfter="3250")
    bodies = drain(lab3, "inflight")
    assert sorted(bodies) == sorted({f"row-{i}".encode() for i in range(ROWS)})


def test_without_keys_the_retried_task_duplicates(spark: Any, lab3: Lab) -> None:
    # The same failure with idempotency off: at-least-once, the first attempt's rows twice.
    write(spark, lab3, "atleast", _failFirstAttemptAfter="3000", idempotency="off")
    bodies = drain(lab3, "atleast")
    assert set(bodies) == {f"row-{i}".encode() for i in range(ROWS)}
    assert len(bodies) == ROWS + 3000


@pytest.mark.parametrize(
    ("options", "mode", "columns", "message"),
    [
        ({"queue": "q"}, "append", "concat('x', id) as body", "option nodes is required"),
        ({"nodes": "x:1"}, "append", "concat('x', id) as body", "option queue is required"),
        ({"nodes": "x:1", "queue": "q"}, "append", "id", "no body column 'body'"),
        ({"nodes": "x:1", "queue": "q"}, "append", "id as body", "must be string or binary"),
        ({"nodes": "x:1", "queue": "q"}, "overwrite", "concat('x', id) as body", "only appends"),
        (
            {"nodes": "x:1", "queue": "q", "batchSize": "many"},
            "append",
            "concat('x', id) as body",
            "(?i)batchSize must be an integer",
        ),
    ],
)
def test_bad_options_columns_and_modes_are_clear_errors(
    spark: Any, options: dict[str, str], mode: str, columns: str, message: str
) -> None:
    df = spark.range(0, 3).selectExpr(columns)
    w = df.write.format("disq").mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=message):
        w.save()


@pytest.mark.parametrize(
    ("options", "columns", "message"),
    [
        ({"replicate": "0"}, "", "option replicate must be between 1 and 65535, not 0"),
        ({"replicate": "two"}, "", "option replicate must be an integer, not 'two'"),
        ({"replicate": "4"}, "", "option replicate is 4, but the cluster has 3 nodes"),
        ({"ttl": "0"}, "", r"option ttl must be >= 1 \(seconds\), not 0"),
        ({"retry": "-1"}, "", r"option retry must be >= 0 \(seconds\), not -1"),
        ({"delay": "100", "ttl": "50"}, "", r"option delay \(100 s\) must be below ttl"),
        ({"retry": "0"}, "", "option retry 0 .* needs option replicate 1, not 3"),
        ({"queue": ""}, "", "option queue must not be empty"),
        ({"bodyColumn": "payload"}, "", "option bodyColumn: no body column 'payload'"),
        ({}, "'x' AS body; 'two' AS replicate", "column replicate must be an integer type"),
        ({"nodes": "RESP"}, "", r"is a RESP \(Disque/Redis\) port, not disq's gRPC port"),
    ],
)
def test_bad_options_fail_on_the_driver_before_any_task(
    spark: Any, lab3: Lab, options: dict[str, str], columns: str, message: str
) -> None:
    """Each bad value is named, on the driver: no Spark job ran and nothing was added
    (replicate 0 was stored at the default level; a RESP port said 'not reachable')."""
    import uuid

    exprs = columns.split("; ") if columns else ["concat('x', id) AS body"]
    df = spark.range(0, 20, numPartitions=2).selectExpr(*exprs)
    queue = f"badopt-{uuid.uuid4().hex[:8]}"
    w = df.write.format("disq").mode("append").option("nodes", nodes(lab3)).option("queue", queue)
    ports = {"RESP": lab3.node(0).port}
    for k, v in options.items():
        if v in ports:
            v = f"127.0.0.1:{ports[v]}"
        w = w.option(k, v)
    group = f"g-{queue}"
    spark.sparkContext.setJobGroup(group, "a write with a bad option")
    try:
        with pytest.raises(Exception, match=message):
            w.save()
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert qlen_all(lab3, queue) == 0


def _snapshot_bodies(spark: Any, lab: Lab, queue: str) -> list[str]:
    r = spark.read.format("disq").option("nodes", nodes(lab)).option("queue", queue).load()
    return [bytes(x.body).decode() for x in r.collect()]


def test_a_null_body_fails_its_partition_with_nothing_of_it_written(spark: Any, lab3: Lab) -> None:
    """Row 500 of partition 1 has a null body: its task fails naming the row, and nothing of
    partition 1 is in the queue (500 of its rows were, before). Fixed and written again with
    the same writeId, every row is there once."""
    rows = spark.range(0, 4000, numPartitions=4)
    bad = rows.selectExpr("CASE WHEN id = 1500 THEN NULL ELSE concat('r-', id) END AS body")
    w = bad.write.format("disq").mode("append").option("nodes", nodes(lab3))
    w = w.option("queue", "badrow").option("replicate", "2").option("writeId", "fix-me")
    with pytest.raises(
        Exception,
        match="DisqSinkError: row 500 of partition 1: null body \\(column 'body'\\); "
        "nothing of this partition was written",
    ):
        w.save()
    assert not [b for b in _snapshot_bodies(spark, lab3, "badrow") if 1000 <= int(b[2:]) < 2000]
    fixed = rows.selectExpr("concat('r-', id) AS body")
    (
        fixed.write.format("disq")
        .mode("append")
        .option("nodes", nodes(lab3))
        .option("queue", "badrow")
        .option("replicate", "2")
        .option("writeId", "fix-me")
        .save()
    )
    bodies = drain(lab3, "badrow")
    assert sorted(bodies) == sorted(f"r-{i}".encode() for i in range(4000))


def test_a_partition_over_buffer_bytes_is_sent_in_spans_and_says_so(spark: Any, lab3: Lab) -> None:
    """bufferBytes bounds what a task holds: a partition larger than it is checked and sent
    span by span, and the error says how many of its rows went before the bad one."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        rows = spark.range(0, 1000, numPartitions=1)
        bad = rows.selectExpr("CASE WHEN id = 250 THEN NULL ELSE concat('s-', id) END AS body")
        w = bad.write.format("disq").mode("append").option("nodes", nodes(lab3))
        w = w.option("queue", "spans").option("replicate", "1").option("bufferBytes", "1")
        with pytest.raises(
            Exception, match=r"row 250 of partition 0: null body .*the 200 rows before it"
        ):
            w.save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted(drain(lab3, "spans")) == sorted(f"s-{i}".encode() for i in range(200))


@pytest.mark.parametrize(
    ("schema", "data", "options", "message"),
    [
        ("body STRING", [("ok",), ("much too long",)], {"maxBodyBytes": "5"},
         r"row 1 of partition 0: body over maxBodyBytes \(5 bytes\)"),
        ("body STRING, replicate INT", [("a", 1), ("b", 0)], {},
         "row 1 of partition 0: replicate below 1"),
        ("body STRING, ttl_s INT, delay_s INT", [("a", 60, 0), ("b", 60, 60)], {},
         "row 1 of partition 0: delay_s not below ttl_s"),
        ("body STRING, queue STRING", [("a", "q1"), ("b", None)], {"queue": None},
         "row 1 of partition 0: no queue"),
    ],
)  # fmt: skip
def test_bad_rows_are_named(
    spark: Any,
    lab3: Lab,
    schema: str,
    data: list[tuple[Any, ...]],
    options: dict[str, str | None],
    message: str,
) -> None:
    df = spark.createDataFrame(data, schema).coalesce(1)
    w = df.write.format("disq").mode("append").option("nodes", nodes(lab3))
    settings: dict[str, str | None] = {"queue": "rowcheck", "replicate": "1", **options}
    for k, v in settings.items():
        if v is not None:
            w = w.option(k, v)
    with pytest.raises(Exception, match=message):
        w.save()
    assert qlen_all(lab3, "rowcheck") == 0 and qlen_all(lab3, "q1") == 0


def test_unreachable_nodes_fail_the_write_on_the_driver(spark: Any) -> None:
    df = spark.range(0, 3).selectExpr("concat('x', id) as body")
    w = df.write.format("disq").mode("append").option("nodes", "127.0.0.1:1").option("queue", "q")
    with pytest.raises(
        Exception, match=r"no disq gRPC port answered.*127\.0\.0\.1:1: nothing answers"
    ):
        w.save()


def _run_script(code: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` as a script of its own (its own driver and JVM), as a user runs it."""
    path.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DISQ_PURE": "1"}
    return subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=600
    )


def _offsets_now(lab: Lab) -> dict[str, int]:
    """Every node's next event sequence number."""
    out = {}
    for i in range(lab.n):
        a = f"127.0.0.1:{lab.node(i).bus_port}"
        with Client(a, discover=False) as c:
            r = c.read_events(a, 0, max_events=1)
            out[r.node_id] = r.next_seq
    return out


def test_readme_spark_snippets_run_as_scripts(spark: Any, lab3: Lab, tmp_path: Path) -> None:
    """Each README Python block that uses disq.spark is a complete program: run as a script
    it writes what it says (the stream's block waited for nothing before, and exited with
    nothing written)."""
    import json
    import re

    readme = (ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "disq.spark" in b]
    sink, stream = blocks
    assert len(sink.strip().splitlines()) <= 10
    before = _offsets_now(lab3)
    done = _run_script(sink.replace("127.0.0.1:7710", nodes(lab3)), tmp_path / "sink.py")
    assert done.returncode == 0, done.stderr[-3000:]
    out, ck = tmp_path / "events", tmp_path / "events-ck"
    code = (
        stream.replace("127.0.0.1:7710", nodes(lab3))
        .replace('"earliest"', repr(json.dumps(before)))  # only the sink's events
        .replace("/tmp/disq-events-ck", str(ck))
        .replace("/tmp/disq-events", str(out))
    )
    done = _run_script(code, tmp_path / "stream.py")
    assert done.returncode == 0, done.stderr[-3000:]
    events = spark.read.parquet(str(out))
    assert events.select("node", "seq").distinct().count() == events.count()
    enqueued = events.where("queue = 'orders' AND kind = 'enqueued'")
    assert enqueued.select("job_id").distinct().count() == 100_000
    bodies = drain(lab3, "orders")
    assert len(bodies) == 100_000 and len(set(bodies)) == 100_000


def test_a_failed_write_shows_the_disq_error_first_and_keeps_spark_in_its_log(
    lab3: Lab, tmp_path: Path
) -> None:
    """A script whose write fails on a bad row: its first line of output is the disq error;
    Spark's start-up warnings and the failed task's Java trace (about 660 lines) are in the
    session's log file, not on the console."""
    log = tmp_path / "spark.log"
    code = f"""
from disq.spark import session

spark = session("fails", master="local[2]", log_file={str(log)!r})
df = spark.range(0, 100).selectExpr("CASE WHEN id = 7 THEN NULL ELSE 'x' END AS body")
w = df.coalesce(1).write.format("disq").mode("append").option("queue", "f")
w.option("nodes", {nodes(lab3)!r}).save()
"""
    done = _run_script(code, tmp_path / "fails.py")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "disq: DisqSinkError: row 7 of partition 0: null body (column 'body'); "
        "nothing of this partition was written"
    ), done.stderr[:2000]
    assert lines[1] == f"(Spark's log, with the Java traces: {log})"
    for noise in ("at org.apache.spark", "NativeCodeLoader", "jdk.incubator", "loopback"):
        assert noise not in done.stderr
    spark_log = log.read_text()
    assert "at org.apache.spark" in spark_log and "DisqSinkError" in spark_log
    assert qlen_all(lab3, "f") == 0


def test_events_stream_available_now_reads_in_fair_batches_and_stops(
    spark: Any, lab3: Lab, tmp_path: Path
) -> None:
    """trigger(availableNow=True) with maxOffsetsPerTrigger: batches within the limit, each
    advancing every node that still has events, and the query stops by itself. Before, it
    fell back to one batch of everything, and the limit went to one node at a time."""
    import json

    start = _offsets_now(lab3)
    for i in range(lab3.n):
        with Client(f"127.0.0.1:{lab3.node(i).bus_port}", discover=False) as c:
            for k in range(12):
                c.add_job("avnow", f"{i}-{k}", replicate=1)
    there = _offsets_now(lab3)
    out, ck = tmp_path / "out", tmp_path / "ck"
    q = (
        spark.readStream.format("disq-events")
        .option("nodes", nodes(lab3))
        .option("startingOffsets", json.dumps(start))
        .option("maxOffsetsPerTrigger", "9")
        .load()
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert q.awaitTermination(300), "the availableNow query did not stop by itself"
    finally:
        q.stop()
    assert q.exception() is None
    rows = spark.read.json(str(out)).collect()
    seen: dict[str, list[int]] = {}
    for r in rows:
        seen.setdefault(r.node, []).append(r.seq)
    for nid in start:
        seqs = sorted(seen.get(nid, []))
        # From where it started, without a gap, at least up to what was there.
        assert seqs[: there[nid] - start[nid]] == list(range(start[nid], there[nid])), nid
    assert sum(1 for r in rows if r.queue == "avnow" and r.kind == "enqueued") == 36
    # The offsets log: each batch within the limit, and advancing every node still behind.
    ends = []
    for f in sorted(
        (ck / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    ):
        if f.name.isdigit():
            ends.append(json.loads(f.read_text().strip().splitlines()[-1]))
    final = ends[-1]
    prev = start
    for end in ends:
        assert sum(end[n] - prev.get(n, end[n]) for n in end) <= 9
        for n in start:
            if prev[n] < final[n]:
                assert end[n] > prev[n], (n, prev, end)
        prev = end
    assert len(ends) >= 4  # 36 events or more, 9 a batch


def _stream_once(spark: Any, lab: Lab, out: Path, ck: Path, **options: str) -> None:
    """Run the events query until it has read everything there is now, then stop it."""
    r = spark.readStream.format("disq-events").option("nodes", nodes(lab))
    for k, v in options.items():
        r = r.option(k, v)
    q = (
        r.load()
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def test_events_stream_replays_from_its_checkpoint(spark: Any, lab3: Lab, tmp_path: Path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    # The other tests' events are in the logs too: start this query at the end of them.
    _stream_once(spark, lab3, out, ck, startingOffsets="latest", maxOffsetsPerTrigger="3")
    with Client(f"127.0.0.1:{lab3.node(0).bus_port}", discover=False) as c:
        first = [c.add_job("evstream", f"{k}", replicate=1) for k in range(5)]
    _stream_once(spark, lab3, out, ck, maxOffsetsPerTrigger="3")
    seen = spark.read.json(str(out)).where("queue = 'evstream' AND kind = 'enqueued'")
    assert sorted(r.job_id for r in seen.collect()) == sorted(first)
    batches = len([p for p in (ck / "offsets").iterdir() if p.name.isdigit()])
    assert batches >= 2  # 5 events, at most 3 per micro-batch
    # More events; the query restarts from its checkpoint: the new ones once, nothing twice.
    with Client(f"127.0.0.1:{lab3.node(1).bus_port}", discover=False) as c:
        later = [c.add_job("evstream", f"{k}", replicate=1) for k in range(3)]
    _stream_once(spark, lab3, out, ck, maxOffsetsPerTrigger="3")
    rows = spark.read.json(str(out)).collect()
    keys = [(r.node, r.seq) for r in rows]
    assert len(keys) == len(set(keys))  # every (node, seq) once
    enq = sorted(r.job_id for r in rows if r.queue == "evstream" and r.kind == "enqueued")
    assert enq == sorted(first + later)
    # Per node, sequence numbers without a gap from where the stream started.
    by_node: dict[str, list[int]] = {}
    for node_id, seq in keys:
        by_node.setdefault(node_id, []).append(seq)
    for seqs in by_node.values():
        seqs.sort()
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_events_stream_starting_offsets_latest_skips_the_past(
    spark: Any, lab3: Lab, tmp_path: Path
) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    _stream_once(spark, lab3, out, ck, startingOffsets="latest")
    with Client(f"127.0.0.1:{lab3.node(2).bus_port}", discover=False) as c:
        new = c.add_job("evlatest", "x", replicate=1)
    _stream_once(spark, lab3, out, ck)
    rows = spark.read.json(str(out)).collect()
    assert [(r.kind, r.job_id) for r in rows] == [("enqueued", new)]


def test_streaming_into_disq_survives_a_restart_of_the_query(
    spark: Any, lab3: Lab, tmp_path: Path
) -> None:
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()

    def add_file(name: str, first: int, n: int) -> None:
        rows = "".join(f'{{"body": "s-{i}"}}\n' for i in range(first, first + n))
        (src / name).write_text(rows)

    def run(**options: str) -> None:
        w = (
            spark.readStream.schema("body STRING")
            .json(str(src))
            .writeStream.format("disq")
            .option("nodes", nodes(lab3))
            .option("queue", "streamed")
            .option("replicate", "2")
            .option("checkpointLocation", str(ck))
        )
        for k, v in options.items():
            w = w.option(k, v)
        q = w.start()
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    add_file("a.json", 0, 4000)
    add_file("b.json", 4000, 4000)
    # The first run dies in its first batch, after part of it was added (every attempt of
    # partition 0 fails after 1000 rows).
    with pytest.raises(Exception, match="injected failure"):
        run(_failAfter="1000")
    # Restarted on the same checkpoint: the batch runs again with the same keys.
    run()
    add_file("c.json", 8000, 2000)
    run()  # and a later batch after another restart
    bodies = drain(lab3, "streamed")
    assert len(bodies) == 10_000
    assert set(bodies) == {f"s-{i}".encode() for i in range(10_000)}


# ----------------------------------------------------------------------------- analytics
from disq.testing.events import exact_percentile, seeded_events  # noqa: E402


def _event(node: str, seq: int, t: int, kind: str, queue: str, job: str) -> dict[str, Any]:
    return {"node": node, "seq": seq, "time_ms": t, "kind": kind, "queue": queue,
            "job_id": job, "attempt": 1, "size": 1}  # fmt: skip


def _ack_rates(
    events: list[dict[str, Any]], window_s: int
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], float]]:
    """Without Spark: per (queue, window of the ack) the jobs first acked then, and those
    per second of the part of the window the events cover."""
    first: dict[str, tuple[int, str]] = {}
    for e in events:
        if e["kind"] == "acked":
            t = first.get(e["job_id"], (e["time_ms"], e["queue"]))[0]
            first[e["job_id"]] = (min(t, e["time_ms"]), e["queue"])
    w_ms = window_s * 1000
    t0 = min(e["time_ms"] for e in events)
    t1 = max(e["time_ms"] for e in events)
    counts: dict[tuple[str, int], int] = {}
    for t, queue in first.values():
        key = (queue, t // w_ms * w_ms)
        counts[key] = counts.get(key, 0) + 1
    rates = {
        (q, w): n / max(1.0, (min(w + w_ms, t1 + 1) - max(w, t0)) / 1000)
        for (q, w), n in counts.items()
    }
    return counts, rates


def test_analytics_job_gives_exact_counts_and_percentiles(spark: Any, tmp_path: Path) -> None:
    import json

    from disq.spark import analytics

    events, expect = seeded_events(7)
    # A dead-letter queue (disq.Worker's): 5 jobs moved there, 2 of them handled later.
    w = min(window for _, window in expect)
    dead_row = {"enqueued": 5, "acked": 2, "deliv": [], "ack": [], "delivered": 2, "retried": 0}
    for k in range(5):
        job = f"D-00000007-dlq{k:021d}-05a1"
        t = w + 1000 * k
        events.append(_event("n3", 90_000 + 3 * k, t, "enqueued", "alpha-dead", job))
        if k < 2:
            events.append(_event("n3", 90_001 + 3 * k, t + 100, "delivered", "alpha-dead", job))
            events.append(_event("n3", 90_002 + 3 * k, t + 300, "acked", "alpha-dead", job))
            dead_row["deliv"].append(100)  # type: ignore[attr-defined]
            dead_row["ack"].append(300)  # type: ignore[attr-defined]
    dead_row["dead"] = [f"D-00000007-dlq{k:021d}-05a1" for k in (2, 3, 4)]
    expect[("alpha-dead", w)] = dead_row
    src = tmp_path / "events"
    src.mkdir()
    with open(src / "events-all.jsonl", "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
    out = tmp_path / "out"
    rows = analytics.run(spark, str(src), out, 3600, dead_letter_queues=("alpha-dead",))
    got = {(r["queue"], r["window_start_ms"]): r for r in rows}
    acks, rates = _ack_rates(events, 3600)
    assert set(got) == set(expect) | set(acks)  # a window of acks alone has a row too
    for key in set(got) - set(expect):
        assert got[key]["enqueued"] == 0 and got[key]["acks_in_window"] == acks[key]
    for key in got:
        assert got[key]["acks_in_window"] == acks.get(key, 0)
        assert got[key]["ack_rate_per_s"] == pytest.approx(rates.get(key, 0.0))
    for key, e in expect.items():
        r = got[key]
        assert (r["enqueued"], r["acked"], r["dead"]) == (e["enqueued"], e["acked"], len(e["dead"]))
        assert r["dead_ids"] == sorted(e["dead"])
        assert r["retry_rate"] == pytest.approx(e["retried"] / e["delivered"])
        for name, values in (("delivery", e["deliv"]), ("ack", e["ack"])):
            for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                want = exact_percentile(values, q)
                assert r[f"{name}_ms_{p}"] == pytest.approx(want), (key, name, p)
    assert (out / "chart.png").stat().st_size > 1000
    text = (out / "summary.txt").read_text()
    assert "alpha" in text and "beta" in text and "DELIV p50/p95/p99 ms" in text
    assert "ACK/S        ACKS per second of the window" in text  # the legend
    back = spark.read.parquet(str(out / "summary.parquet")).count()
    assert back == len(expect)


def test_analytics_counts_dead_lettered_jobs_by_their_event(spark: Any, tmp_path: Path) -> None:
    """The ``deadlettered`` event counts a job dead-lettered once (an event exported twice, or
    logged by two deciders, is one job), in its source queue, as dead and never acked; the
    dead letters in the policy's DEADLETTER queue are not counted again, and one QREDRIVE moved
    back (``redriven``) is not dead when that queue is named in ``dead_letter_queues``."""
    import json

    from disq.spark import analytics

    w = 500_001 * 3_600_000  # an hour boundary
    acked, dead_lettered, expired = range(0, 6), range(6, 9), range(9, 10)
    twice = 7  # its deadlettered event exported twice
    two_deciders = 8  # logged by two nodes
    redriven = 6  # its dead letter moved back by QREDRIVE

    def job(k: int) -> str:
        return f"D-0000000a-pay{k:021d}-05a1"

    def dead_letter(k: int) -> str:
        return f"D-0000000a-dl{k:022d}-05a1"

    events: list[dict[str, Any]] = []

    def ev(node: str, t: int, kind: str, queue: str, job_id: str) -> None:
        events.append(_event(node, len(events) + 1, t, kind, queue, job_id))

    for k in [*acked, *dead_lettered, *expired]:
        t = w + 1000 * k
        ev("n1", t, "enqueued", "pay", job(k))
        if k in acked:
            ev("n1", t + 10, "delivered", "pay", job(k))
            ev("n1", t + 20, "acked", "pay", job(k))
        elif k in dead_lettered:
            ev("n1", t + 10, "delivered", "pay", job(k))
            ev("n2", t + 30, "delivered", "pay", job(k))
            ev("n2", t + 40, "deadlettered", "pay", job(k))
            if k == twice:
                events.append(dict(events[-1]))  # the same (node, seq): an export's repeat
            if k == two_deciders:
                ev("n3", t + 45, "deadlettered", "pay", job(k))
            ev("n2", t + 41, "enqueued", "pay-parked", dead_letter(k))
            if k == redriven:
                ev("n2", t + 500, "redriven", "pay-parked", dead_letter(k))
        else:
            ev("n1", t + 60_000, "expired", "pay", job(k))
    src = tmp_path / "events"
    src.mkdir()
    (src / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    loaded = analytics.load_events(spark, str(src))
    stories = {r["job_id"]: r for r in analytics.job_stories(loaded).collect()}
    assert {j for j, r in stories.items() if r["dead_lettered"]} == {job(k) for k in dead_lettered}
    assert {j for j, r in stories.items() if r["redriven"]} == {dead_letter(redriven)}

    def by_queue(*dlq: str) -> dict[str, Any]:
        rows = analytics.summarize(loaded, 3600, dlq).collect()
        return {r["queue"]: r for r in rows if r["window_start_ms"] == w}

    got = by_queue()
    pay, parked = got["pay"], got["pay-parked"]
    enqueued = len(acked) + len(dead_lettered) + len(expired)
    assert (pay["enqueued"], pay["acked"]) == (enqueued, len(acked))
    assert pay["dead_lettered"] == len(dead_lettered)
    assert pay["dead_lettered_ratio"] == pytest.approx(len(dead_lettered) / enqueued)
    assert pay["dead_ids"] == sorted(job(k) for k in [*dead_lettered, *expired])
    assert pay["dead"] == len(dead_lettered) + len(expired)
    assert (parked["enqueued"], parked["dead_lettered"], parked["dead"]) == (
        len(dead_lettered),
        0,
        0,
    )
    # Named as a dead-letter queue (as for disq.Worker's): its unacked, not redriven jobs.
    parked = by_queue("pay-parked")["pay-parked"]
    assert parked["dead_ids"] == sorted(dead_letter(k) for k in dead_lettered if k != redriven)
    head, line = analytics.render([pay]).splitlines()[:2]
    assert "DLQ'D" in head
    assert f"{len(dead_lettered)} ({len(dead_lettered) / enqueued:.1%})" in line


def test_analytics_chart_of_one_window_shows_its_points(spark: Any, tmp_path: Path) -> None:
    """The default 1 h window over a 20 s run: one point per series. The chart had no
    markers (a single point drew nothing), an x-axis over years, and an ack rate divided by
    the whole hour. Now: markers inside both plots of the PNG, an x-axis of one window, and
    the rate of the 20 s the events cover."""
    import json

    import matplotlib.image as mpimg

    from disq.spark import analytics

    base = 500_000 * 3_600_000 + 600_000  # 10 min into an hour
    events = []
    for k in range(200):
        job = f"D-00000009-one{k:021d}-05a1"
        t = base + 100 * k  # 200 jobs over 20 s, each acked 50 ms later
        events += [_event("n1", 3 * k + 1, t, "enqueued", "one", job),
                   _event("n1", 3 * k + 2, t + 20, "delivered", "one", job),
                   _event("n1", 3 * k + 3, t + 50, "acked", "one", job)]  # fmt: skip
    src, out = tmp_path / "events", tmp_path / "out"
    src.mkdir()
    (src / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    [row] = analytics.run(spark, str(src), out, 3600)
    assert row["acks_in_window"] == 200
    # The events cover 19.95 s and the last one's millisecond: 200 acks in 19.951 s.
    assert row["ack_rate_per_s"] == pytest.approx(200 / 19.951)  # not 200 / 3600
    rows = [row.asDict()]
    drawn = analytics.chart(rows, tmp_path / "again.png", 3600)
    lo, hi = drawn["span"]
    assert hi - lo == pytest.approx(1 / 24)  # days: one window wide, not years
    png = mpimg.imread(out / "chart.png")[:, :, :3]
    # Coloured pixels (the frames, ticks and text are black, grey or white).
    coloured = (png.max(axis=2) - png.min(axis=2)) > 0.3
    for left, top, right, bottom in drawn["plots_px"]:
        inside = coloured[top + 2 : bottom - 2, left + 2 : right - 2]
        assert inside.sum() > 20, "no point drawn inside a plot"


def test_snapshot_read_of_a_queue_takes_nothing(spark: Any, lab3: Lab) -> None:
    with Client(nodes(lab3)) as c:
        ids = {c.add_job("snap", f"b{k}", replicate=2, retry_s=600): f"b{k}" for k in range(50)}
    before = qlen_all(lab3, "snap")
    reader = spark.read.format("disq").option("nodes", nodes(lab3)).option("queue", "snap")
    rows = reader.load().collect()
    assert {r.id: bytes(r.body).decode() for r in rows} == ids
    assert {r.state for r in rows} == {"queued"} and len(rows) == 50
    assert reader.load().count() == 50  # again: nothing was taken
    copies = reader.option("states", "queued,active").load()
    assert copies.count() == 100 and copies.select("id").distinct().count() == 50
    after = qlen_all(lab3, "snap")
    assert before == after == 50


def test_queue_stream_consumes_and_acks_on_commit(spark: Any, lab3: Lab, tmp_path: Path) -> None:
    with Client(nodes(lab3)) as c:
        ids = {c.add_job("consumed", f"c{k}", replicate=2, retry_s=600) for k in range(300)}
    out, ck = tmp_path / "out", tmp_path / "ck"
    q = (
        spark.readStream.format("disq")
        .option("nodes", nodes(lab3))
        .option("queue", "consumed")
        .option("maxJobsPerTrigger", "120")
        .load()
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.read.json(str(out)).collect()
    assert {r.id for r in rows} == ids and len(rows) == 300
    assert {r.state for r in rows} == {"delivered"}
    assert qlen_all(lab3, "consumed") == 0
    # Acked when the batches were committed: the acks reach every node holding a copy.
    sample = sorted(ids)[:30]

    def all_acked() -> bool:
        for i in range(lab3.n):
            with Client(f"127.0.0.1:{lab3.node(i).bus_port}", discover=False) as c:
                for job_id in sample:
                    info = c.show(job_id)
                    if info is not None and info["state"] != "acked":
                        return False
        return True

    eventually(all_acked, "the acks to reach every holder")


def test_row_columns_override_the_options(spark: Any, lab3: Lab) -> None:
    df = spark.createDataFrame(
        [
            ("a", "rows-a", 1, 30, None),
            ("b", "rows-b", 2, 90, "my-key"),
            ("c", None, None, None, None),
        ],
        "body STRING, queue STRING, replicate INT, retry_s INT, idempotency_key STRING",
    )
    (
        df.write.format("disq")
        .mode("append")
        .option("nodes", nodes(lab3))
        .option("queue", "rows-default")
        .option("retry", "600")
        .save()
    )
    found = spark.read.format("disq").option("nodes", nodes(lab3))
    got = {}
    for queue in ("rows-a", "rows-b", "rows-default"):
        for r in found.option("queue", queue).load().collect():
            got[bytes(r.body).decode()] = (r.queue, r.retry_s)
    assert got == {"a": ("rows-a", 30), "b": ("rows-b", 90), "c": ("rows-default", 600)}
    with Client(nodes(lab3)) as c:
        # The row's own key is the one used: repeating it adds nothing.
        again = c.add_job("rows-b", "b", replicate=2, idempotency_key="my-key")
        [b] = [r for r in found.option("queue", "rows-b").load().collect()]
        assert again == b.id


def test_events_stream_fail_on_data_loss(spark: Any, server_factory: Any, tmp_path: Path) -> None:
    from conftest import free_port

    port = free_port()
    # A tiny event log: old segments go quickly.
    server_factory.new("--grpc-port", str(port), "--events-max-bytes", "4096")
    addr = f"127.0.0.1:{port}"

    def run(ck: Path, out: Path, **options: str) -> None:
        r = spark.readStream.format("disq-events").option("nodes", addr)
        for k, v in options.items():
            r = r.option(k, v)
        q = r.load().writeStream.format("json").option("path", str(out))
        q = q.option("checkpointLocation", str(ck)).start()
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    with Client(addr, discover=False) as c:
        c.add_job("loss", "x", replicate=1)
        strict, lenient = tmp_path / "strict", tmp_path / "lenient"
        run(strict / "ck", strict / "out")  # both queries now stand after this first event
        run(lenient / "ck", lenient / "out", failOnDataLoss="false")
        first_next = c.read_events(addr, 0).next_seq
        for k in range(200):  # one frame per add: far more than the log keeps
            c.add_job("loss", f"{k}", replicate=1)
        assert c.read_events(addr, 0).first_seq > first_next  # what the queries need is gone
    with pytest.raises(Exception, match="are gone"):
        run(strict / "ck", strict / "out")
    run(lenient / "ck", lenient / "out", failOnDataLoss="false")
    rows = spark.read.json(str(lenient / "out")).collect()
    seqs = sorted(r.seq for r in rows)
    assert seqs[0] == 1 and seqs[1] > first_next  # the first event, then a gap, then the rest
