"""The sink's rows, as the Arrow batches Spark hands the writer: checked before any is sent,
then turned into add_jobs' dicts.

Checks are column-wise (pyarrow.compute), so a partition's rows are looked at once, cheaply,
before its first add; ``BadRow`` names the first bad row by its position in the partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Row columns that override an option for that row (named as add_job's arguments), and the
# lowest value each takes (the node's own bounds: ADDJOB's REPLICATE 1..65535, TTL > 0).
ROW_OPTIONS = {"replicate": 1, "retry_s": 0, "ttl_s": 1, "delay_s": 0}
MAX_REPLICATE = 65535
MAX_QUEUE_NAME_BYTES = 64 << 10  # the API's bound (disq/server/api_service.py)
MAX_KEY_BYTES = 256  # the core's bound on an idempotency key
DEFAULT_TTL_S = 86400  # the core's, when neither the option nor the row gives one


class BadRow(Exception):
    """Row ``index`` (in its partition) cannot be added: ``problem`` says why."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(f"row {index}: {problem}")
        self.index = index
        self.problem = problem


@dataclass
class RowRules:
    """What a row must satisfy, from the writer's checked options."""

    body_column: str
    queue: str | None  # the option; rows without a queue (null or empty) use it
    defaults: dict[str, Any]  # replicate, retry_s, ttl_s, delay_s, ... (None: the node's)
    default_replicate: int  # what the node uses when neither option nor row gives one
    max_body_bytes: int


def _first(mask: Any) -> int | None:
    """The index of the first true of a boolean array (nulls are false), or None. A scalar
    (every operand was one) is a row-independent answer the driver checked already."""
    if not isinstance(mask, pa.Array | pa.ChunkedArray):
        return None
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return None
    return int(pc.index(mask, True).as_py())


def check_batch(batch: pa.RecordBatch, first_row: int, rules: RowRules) -> None:
    """Raise BadRow for the first row of ``batch`` the node would refuse or the sink cannot
    send; ``first_row`` is the batch's first row's position in the partition."""
    names = batch.schema.names
    problems: list[tuple[int, str]] = []

    def find(mask: Any, problem: str) -> None:
        i = _first(mask)
        if i is not None:
            problems.append((i, problem))

    body = batch.column(names.index(rules.body_column))
    if body.null_count:
        find(pc.is_null(body), f"null body (column {rules.body_column!r})")
    # Bytes, as sent: binary_length counts a string's UTF-8 bytes.
    find(
        pc.greater(pc.binary_length(body), rules.max_body_bytes),
        f"body over maxBodyBytes ({rules.max_body_bytes} bytes)",
    )
    if "queue" in names:
        queue = batch.column(names.index("queue"))
        if rules.queue is None:
            find(
                pc.or_kleene(pc.is_null(queue), pc.equal(queue, "")),
                "no queue (the column is null or empty and option queue is not set)",
            )
        find(
            pc.greater(pc.binary_length(queue), MAX_QUEUE_NAME_BYTES),
            f"queue name over {MAX_QUEUE_NAME_BYTES} bytes",
        )
    if "idempotency_key" in names:
        key = batch.column(names.index("idempotency_key"))
        find(
            pc.greater(pc.binary_length(key), MAX_KEY_BYTES),
            f"idempotency_key over {MAX_KEY_BYTES} bytes",
        )
    present: dict[str, Any] = {}
    for column, low in ROW_OPTIONS.items():
        if column in names:
            values = batch.column(names.index(column))
            present[column] = values
            find(pc.less(values, low), f"{column} below {low}")
            if column == "replicate":
                find(pc.greater(values, MAX_REPLICATE), f"replicate over {MAX_REPLICATE}")

    def effective(column: str, fallback: int | None) -> Any:
        """The column with the option (else ``fallback``) for its nulls, or that scalar."""
        default = rules.defaults.get(column)
        fill = default if default is not None else fallback
        values = present.get(column)
        if values is None:
            return fill
        return values if fill is None else pc.fill_null(values, fill)

    # The node's checks that combine options (disq/core/disque/core.py's add_job); with
    # options alone the driver checked them already.
    if "ttl_s" in present or "delay_s" in present:
        ttl, delay = effective("ttl_s", DEFAULT_TTL_S), effective("delay_s", 0)
        find(pc.greater_equal(delay, ttl), "delay_s not below ttl_s")
    if "retry_s" in present or "replicate" in present:
        retry = effective("retry_s", None)  # null: the node's default, never 0
        repl = effective("replicate", rules.default_replicate)
        if retry is not None:
            find(pc.and_(pc.equal(retry, 0), pc.greater(repl, 1)),
                 "retry_s 0 needs replicate 1 (at-most-once delivery)")  # fmt: skip
    if problems:
        index, problem = min(problems)
        raise BadRow(first_row + index, problem)


def body_bytes(batch: pa.RecordBatch, body_column: str) -> int:
    return int(batch.column(batch.schema.names.index(body_column)).nbytes)


def jobs_of(
    batch: pa.RecordBatch, first_row: int, rules: RowRules, key_prefix: str | None
) -> Iterator[dict[str, Any]]:
    """add_jobs' dicts for the rows of a checked batch, in order. ``key_prefix``: each row
    without its own idempotency_key gets ``<key_prefix>/<row position>``; None: no key."""
    columns = batch.to_pydict()
    bodies = columns.pop(rules.body_column)
    queues = columns.pop("queue", None)
    keys = columns.pop("idempotency_key", None)
    overrides = [(c, columns[c]) for c in ROW_OPTIONS if c in columns]
    base = {k: v for k, v in rules.defaults.items() if v is not None}
    queue = rules.queue
    for i, body in enumerate(bodies):
        job = dict(base)
        job["queue"] = (queues[i] or queue) if queues is not None else queue
        job["body"] = body
        for column, values in overrides:
            v = values[i]
            if v is not None:
                job[column] = v
        key = keys[i] if keys is not None else None
        if key:
            job["idempotency_key"] = key
        elif key_prefix is not None:
            job["idempotency_key"] = f"{key_prefix}/{first_row + i}"
        yield job
