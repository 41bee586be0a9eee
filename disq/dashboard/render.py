"""Pure helpers of the dashboard: how a body is shown, how a job's timeline is merged from the
event logs of several nodes, dead-letter queues (by name, by queue policy), the rows of
queue policies, ages, a schedule's row. No IO;
unit-tested on their own (tests/unit/test_dashboard.py).

Nothing here escapes HTML: the templates do (Jinja2 with autoescaping on), so every string
these helpers return is plain text, whatever bytes it came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# A body is shown up to this many bytes; the page says how many more there were.
BODY_PREVIEW_BYTES = 4096
# Bytes per hex dump line.
HEX_WIDTH = 16

# Disque job ids: D-<node8>-<24 chars>-<ttl 4 hex> (40 characters in all).
JOB_ID_RE = re.compile(r"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")

# Queue names a worker dead-letters into, by convention (disq.Worker takes any name): the
# suffix is stripped to guess the original queue. Exact names (no original) come last.
_DEAD_SUFFIXES = ("-dead", "_dead", ".dead", ":dead", "-dlq", "_dlq", ".dlq", ":dlq")
_DEAD_NAMES = ("dead_letter", "dead-letter", "dead_letters", "dead-letters", "dlq")


@dataclass(frozen=True, slots=True)
class RenderedBody:
    """A job body made safe to show: ``kind`` is ``text`` (valid UTF-8 with no control
    characters but tab and newline) or ``hex`` (a dump with offsets); ``shown`` bytes of
    ``size`` are rendered."""

    kind: str
    text: str
    size: int
    shown: int

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def _is_printable_text(s: str) -> bool:
    return all(c in "\t\n\r" or (c >= " " and c != "\x7f") for c in s)


def render_body(body: bytes, limit: int = BODY_PREVIEW_BYTES) -> RenderedBody:
    """Text when the first ``limit`` bytes decode as printable UTF-8 (a multi-byte character
    cut by the limit is dropped), a hex dump otherwise."""
    size = len(body)
    head = body[:limit]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Only a character cut at the end by the limit is forgiven.
        if size > limit and exc.start >= len(head) - 3 and exc.reason.startswith("unexpected end"):
            head = head[: exc.start]
            text = head.decode("utf-8", errors="strict")
        else:
            return RenderedBody("hex", hex_dump(head), size, len(head))
    if not _is_printable_text(text):
        return RenderedBody("hex", hex_dump(head), size, len(head))
    return RenderedBody("text", text, size, len(head))


def hex_dump(data: bytes, width: int = HEX_WIDTH) -> str:
    """``offset  hex bytes  |ascii|`` lines, as ``hexdump -C`` (non-printables as dots)."""
    lines = []
    for off in range(0, len(data), width):
        chunk = data[off : off + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<{width * 3 - 1}}  |{ascii_}|")
    return "\n".join(lines)


def body_preview(body: bytes, limit: int = 80) -> str:
    """One short line for a table cell: text with control characters as ``\\xNN``."""
    text = body[:limit].decode("utf-8", errors="backslashreplace")
    out = "".join(c if c >= " " and c != "\x7f" else f"\\x{ord(c):02x}" for c in text)
    return out + ("…" if len(body) > limit else "")


def is_job_id(s: str) -> bool:
    return bool(JOB_ID_RE.match(s))


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One lifecycle event of a job as one node logged it."""

    time_ms: int
    node: str  # the logging node's id
    seq: int  # its sequence number in that node's log
    kind: str
    queue: str
    attempt: int
    size: int


def merge_timeline(per_node: Mapping[str, Iterable[Any]], job_id: str) -> list[TimelineEvent]:
    """The events of ``job_id`` from every node's log (objects with ``seq``, ``time_ms``,
    ``kind``, ``queue``, ``job_id``, ``attempt``, ``size``: the API's Event), in time order;
    ties by node then sequence, so the order is the same on every page load. Clocks of
    different nodes differ: events closer than the skew may show in either order."""
    out = [
        TimelineEvent(
            int(e.time_ms), node, int(e.seq), str(e.kind), str(e.queue), int(e.attempt), int(e.size)
        )
        for node, events in per_node.items()
        for e in events
        if e.job_id == job_id
    ]
    out.sort(key=lambda t: (t.time_ms, t.node, t.seq))
    return out


def dead_letter_origin(name: str) -> str | None:
    """The queue a dead-letter queue's jobs came from, by its name (``jobs-dead`` ->
    ``jobs``); "" for a dead-letter queue with no original in its name (``dead_letter``);
    None if the name is not a dead-letter queue's."""
    lower = name.lower()
    for suffix in _DEAD_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    if lower in _DEAD_NAMES:
        return ""
    return None


# Headers of a job the cluster moved to its queue policy's dead-letter queue.
SOURCE_HEADER = "disq-source-queue"
REASON_HEADER = "disq-dead-reason"


@dataclass(frozen=True, slots=True)
class PolicyRow:
    """One queue policy as the Policies page shows it (None, "": the field is not set)."""

    queue: str
    max_deliveries: int | None
    dead_letter: str
    backoff_base_s: int | None
    backoff_max_s: int | None


def policy_rows(policies: Iterable[tuple[object, Sequence[tuple[str, object]]]]) -> list[PolicyRow]:
    """Rows from QPOLICY LIST's entries (a queue and its set fields as QPOLICY GET names them:
    maxdeliveries, deadletter, backoff-base, backoff-max), by queue name."""

    def num(v: object) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    rows = []
    for queue, fields in policies:
        f = dict(fields)
        rows.append(
            PolicyRow(
                queue=plain(queue),
                max_deliveries=num(f.get("maxdeliveries")),
                dead_letter=plain(f.get("deadletter") or ""),
                backoff_base_s=num(f.get("backoff-base")),
                backoff_max_s=num(f.get("backoff-max")),
            )
        )
    rows.sort(key=lambda r: r.queue)
    return rows


def dead_letter_targets(rows: Iterable[PolicyRow]) -> dict[str, list[str]]:
    """Every queue some policy names as its DEADLETTER, with the queues whose policies name
    it (sorted)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r.dead_letter:
            out.setdefault(r.dead_letter, []).append(r.queue)
    return {dlq: sorted(origins) for dlq, origins in sorted(out.items())}


def header_text(headers: Mapping[str, bytes], key: str) -> str:
    """A job header's value as text ("" when the job has no such header)."""
    v = headers.get(key)
    return plain(v) if v is not None else ""


def fmt_age(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h03m``, ``4d02h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def rate(prev: int | None, cur: int, dt_s: float) -> float:
    """Per-second rate of a counter between two samples (0 after a reset or without one)."""
    if prev is None or dt_s <= 0 or cur < prev:
        return 0.0
    return (cur - prev) / dt_s


def sparkline_points(values: Sequence[float], width: int = 120, height: int = 24) -> str:
    """An SVG polyline's ``points`` for ``values`` (the server draws the first frame; the
    page's script redraws it the same way as samples come)."""
    if not values:
        return ""
    top = max(values) or 1.0
    n = len(values)
    step = width / max(1, n - 1)
    return " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(values)
    )


def iso_utc(unix_s: float) -> str:
    """``2026-05-01T12:00:00Z``."""
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_relative(delta_s: float) -> str:
    """``in 42s``, ``3m05s ago``, ``now`` (``delta_s``: the time minus now, to the nearest
    second)."""
    d = round(delta_s)
    if d == 0:
        return "now"
    return f"in {fmt_age(d)}" if d > 0 else f"{fmt_age(-d)} ago"


def plain(value: object) -> str:
    """Text of a name or queue from the core (``str`` that may hold surrogate escapes of bytes
    that were not UTF-8, or bytes): valid UTF-8, undecodable bytes as U+FFFD."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One schedule as the Schedules page shows it. Times are Unix seconds (None: none yet),
    with their UTC ISO form and their distance from the page's now; ``last_job_state`` is
    the job's state (``queued``, ``active``, ``acked``, ``wait-repl``), ``gone`` when no node
    asked holds it, "" before the first tick; ``last_job_node``: the node that said so."""

    name: str
    spec: str
    zone: str
    queue: str
    paused: bool
    misfire: str
    next_s: int | None
    next_iso: str
    next_rel: str
    later_iso: tuple[str, ...]  # the ticks after the next one
    last_tick_s: int | None
    last_tick_iso: str
    last_tick_rel: str
    last_job_id: str
    last_job_state: str
    last_job_node: str
    owner: str
    last_error: str


def schedule_row(fields: Sequence[tuple[str, object]], now_s: float, node: str = "") -> ScheduleRow:
    """A row from the Scheduler's ``describe`` (SCHEDULE SHOW's field/value pairs) read at
    ``now_s`` (wall clock, Unix s) on ``node`` (whose view the job state is)."""
    f = dict(fields)
    got = f.get("next")
    upcoming = [int(t) for t in got] if isinstance(got, list | tuple) else []
    nxt = upcoming[0] if upcoming else None
    got = f.get("last-tick")
    last = int(got) if isinstance(got, int) and got > 0 else None
    job = plain(f.get("last-job-id") or "")
    return ScheduleRow(
        name=plain(f.get("name", "")),
        spec=plain(f.get("spec", "")),
        zone=plain(f.get("tz", "")),
        queue=plain(f.get("queue", "")),
        paused=bool(f.get("paused")),
        misfire=plain(f.get("misfire", "")),
        next_s=nxt,
        next_iso=iso_utc(nxt) if nxt is not None else "",
        next_rel=fmt_relative(nxt - now_s) if nxt is not None else "",
        later_iso=tuple(iso_utc(t) for t in upcoming[1:]),
        last_tick_s=last,
        last_tick_iso=iso_utc(last) if last is not None else "",
        last_tick_rel=fmt_relative(last - now_s) if last is not None else "",
        last_job_id=job,
        last_job_state=plain(f.get("last-job-state") or ""),
        last_job_node=node if job else "",
        owner=plain(f.get("owner", "")),
        last_error=plain(f.get("last-error") or ""),
    )
