"""Rendering for the ``disq`` CLI: aligned tables, job bodies as text or JSON, job dicts."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from disq.client import Job, Schedule

GAP = "  "


def cell(value: object) -> str:
    """A value as a table cell: None is "-", floats get one decimal, bytes are bodies."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, bytes):
        return body_text(value)
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) or "-"
    return str(value)


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned under their headers, numbers on the right; no trailing spaces."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    right = [
        any(_numeric(row[i]) for row in rows)
        and all(_numeric(row[i]) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    lines = []
    for row in [list(headers), *cells]:
        parts = [
            t.rjust(w) if r else t.ljust(w) for t, w, r in zip(row, widths, right, strict=True)
        ]
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines) + "\n"


def body_text(body: bytes) -> str:
    """The body as one line of text: UTF-8 when it decodes (control characters escaped),
    else its Python repr (``b'\\xff'``)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return repr(body)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def body_json(body: bytes) -> dict[str, str]:
    """``{"body": text}`` when the body is UTF-8, else ``{"body_b64": base64}``."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(body).decode("ascii")}


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        **body_json(job.body),
        "nacks": job.nacks,
        "additional_deliveries": job.additional_deliveries,
        "retry_s": job.retry_s,
    }


JOB_HEADERS = ("ID", "QUEUE", "NACKS", "ADD_DELIVERIES", "BODY")


def job_row(job: Job) -> tuple[object, ...]:
    return (job.id, job.queue, job.nacks, job.additional_deliveries, job.body)


def show_json(fields: dict[str, Any]) -> dict[str, Any]:
    """SHOW's fields with the body made JSON-safe."""
    out = {k: v for k, v in fields.items() if k != "body"}
    out.update(body_json(fields.get("body", b"")))
    headers = out.pop("headers", None)
    if headers:  # as the body: UTF-8 values as text, the others in headers_b64
        parts = [(k, body_json(v)) for k, v in headers.items()]
        out["headers"] = {k: j["body"] for k, j in parts if "body" in j}
        if binary := {k: j["body_b64"] for k, j in parts if "body_b64" in j}:
            out["headers_b64"] = binary
    return out


def key_values(fields: dict[str, Any]) -> str:
    """``key  value`` lines, keys aligned."""
    width = max((len(k) for k in fields), default=0)
    return "".join(f"{k.ljust(width)}{GAP}{cell(v)}".rstrip() + "\n" for k, v in fields.items())


NODE_STATES = {1: "ok", 5: "no-link", 10: "suspect", 100: "down"}


def node_state(priority: int) -> str:
    """HELLO's priority in words: 1 ok, 5 no link, 10 suspect, 100 dead or leaving."""
    return NODE_STATES.get(priority, f"priority-{priority}")


def unix_time(t_s: int) -> str:
    """Unix seconds as an ISO 8601 UTC time (``2026-11-27T06:30:00Z``); 0 is ``-``."""
    if not t_s:
        return "-"
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_json(s: Schedule) -> dict[str, Any]:
    """A schedule as JSON: the SDK's fields (times as Unix seconds), the body JSON-safe."""
    doc = dataclasses.asdict(s)
    del doc["body"]
    doc["async"] = doc.pop("async_")
    doc["next_fire_times"] = list(s.next_fire_times)
    doc.update(body_json(s.body))
    return doc


def schedule_fields(s: Schedule) -> dict[str, Any]:
    """A schedule for people: ``key value`` lines, times in UTC."""
    return {
        "name": s.name,
        "spec": s.spec,
        "tz": s.tz,
        "queue": s.queue,
        "body": body_text(s.body),
        "replicate": s.replicate,
        "retry_s": s.retry_s,
        "ttl_s": s.ttl_s,
        "async": int(s.async_),
        "misfire": s.misfire if s.misfire == "skip" else f"catchup {s.catchup}",
        "paused": int(s.paused),
        "next": [unix_time(t) for t in s.next_fire_times],
        "last_tick": f"{s.last_tick} ({unix_time(s.last_tick)})" if s.last_tick else None,
        "last_job_id": s.last_job_id or None,
        "last_job_state": s.last_job_state or None,
        "last_error": s.last_error or None,
        "owner": s.owner,
        "version": s.version,
    }
