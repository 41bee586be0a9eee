"""Rendering for the ``disq`` CLI: aligned tables, job bodies as text or JSON, job dicts."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from disq.client import Job

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
    return out


def key_values(fields: dict[str, Any]) -> str:
    """``key  value`` lines, keys aligned."""
    width = max((len(k) for k in fields), default=0)
    return "".join(f"{k.ljust(width)}{GAP}{cell(v)}".rstrip() + "\n" for k, v in fields.items())


NODE_STATES = {1: "ok", 5: "no-link", 10: "suspect", 100: "down"}


def node_state(priority: int) -> str:
    """HELLO's priority in words: 1 ok, 5 no link, 10 suspect, 100 dead or leaving."""
    return NODE_STATES.get(priority, f"priority-{priority}")
