"""``disq events export``: every node's lifecycle events to files, one per node.

``--since`` is a sequence number (per node; 0: everything still in the logs), a time
(ISO 8601, e.g. ``2026-11-22T07:00:00Z``) or an age (``90s``, ``30m``, ``6h``, ``2d``).
Files: ``DIR/events-<node id>.jsonl`` (one JSON object per line) or ``.parquet`` (needs
pyarrow, the ``spark`` extra). Rows: node, seq, time_ms, kind, queue, job_id, attempt, size.
Reading pages through ReadEvents 10,000 events at a time, up to the node's ``next_seq`` at the
start, so a busy node does not keep the export going forever. At-least-once: an export
repeated from the same point writes the same events again (dedupe by node and seq).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import time
from pathlib import Path
from typing import Any

from disq.client import Client, DisqError

PAGE = 10_000
_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
FIELDS = ("node", "seq", "time_ms", "kind", "queue", "job_id", "attempt", "size")


class ExportError(DisqError):
    reason = "EXPORT"


def parse_since(text: str, now_ms: int) -> tuple[int, int]:
    """(from_seq, since_ms) for ``--since``."""
    if text.isdigit():
        return int(text), 0
    m = _AGE.match(text)
    if m:
        return 0, now_ms - int(m.group(1)) * _UNIT_MS[m.group(2)]
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--since: a sequence number, an ISO time or an age like 30m, not {text!r}"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return 0, int(when.timestamp() * 1000)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("events", help="job lifecycle events", parents=[common])
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")
    e = actions.add_parser("export", help="write every node's events to DIR", parents=[common])
    e.add_argument("--since", default="0", help="sequence number, ISO time or age (30m, 2d)")
    e.add_argument("--out", type=Path, required=True, help="directory for the files")
    e.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")


def export(args: argparse.Namespace, c: Client) -> list[dict[str, Any]]:
    """Write the files; one summary per node (node, file, events, first/last seq)."""
    from_seq, since_ms = parse_since(args.since, int(time.time() * 1000))
    writer = _parquet if args.format == "parquet" else _jsonl
    args.out.mkdir(parents=True, exist_ok=True)
    summaries = []
    for n in sorted(c.hello().nodes, key=lambda n: n.id):
        if not n.grpc_port:
            continue
        addr = f"{n.host}:{n.grpc_port}"
        rows: list[dict[str, Any]] = []
        seq = from_seq
        first = c.read_events(addr, seq, max_events=1, since_ms=since_ms)
        end = first.next_seq
        lost = max(0, first.first_seq - max(seq, 1)) if seq else 0
        while seq < end:
            page = c.read_events(addr, seq, max_events=PAGE, since_ms=since_ms)
            events = [e for e in page.events if e.seq < end]
            if not events:
                break
            for e in events:
                rows.append(
                    {
                        "node": page.node_id,
                        "seq": e.seq,
                        "time_ms": e.time_ms,
                        "kind": e.kind,
                        "queue": e.queue,
                        "job_id": e.job_id,
                        "attempt": e.attempt,
                        "size": e.size,
                    }
                )
            seq = events[-1].seq + 1
        path = args.out / f"events-{n.id}.{args.format}"
        writer(path, rows)
        summaries.append(
            {
                "node": n.id,
                "file": str(path),
                "events": len(rows),
                "first_seq": rows[0]["seq"] if rows else None,
                "last_seq": rows[-1]["seq"] if rows else None,
                "lost_before_first": lost,
            }
        )
    return summaries


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def _parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ExportError(
            "--format parquet needs pyarrow (pip install 'disq-server[spark]')"
        ) from exc
    table = pa.table({k: [r[k] for r in rows] for k in FIELDS})
    pq.write_table(table, path)
