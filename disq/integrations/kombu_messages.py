"""What the kombu transport reads in a message before it adds the job: a Celery ETA's
delay (the node's DELAYMS), the job's TTL (kombu's ``expiration``, not a Celery task's) and
its idempotency key (the message property ``disq_idempotency_key``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from disq.integrations.common import delay_ms_from_seconds, ttl_from_ms

# A message property (kombu's ``Producer.publish(..., disq_idempotency_key=...)``, Celery's
# ``apply_async(..., disq_idempotency_key=...)``, which passes unknown options on as
# properties): the add carries it as its IDEMPOTENCY-KEY, so a repeated publish with the same
# key on the same queue within the node's window adds nothing. A property, not a header: a
# Celery task's headers travel on to its retries, which must not be swallowed as repeats.
IDEMPOTENCY_PROPERTY = "disq_idempotency_key"


def eta_delay_ms(headers: dict[str, Any] | None, now_s: float | None = None) -> int:
    """The delay of a Celery message, in ms (the node's DELAYMS): its ``eta`` header
    (protocol 2, ISO 8601, microseconds) from now, rounded up; 0 without one or when it has
    passed. A countdown keeps its precision (1.5 s is 1,500 ms, not Disque's 2 s). A naive
    ETA is UTC (Celery writes aware ones unless ``enable_utc`` is off and no timezone is
    set)."""
    eta = (headers or {}).get("eta")
    if not eta:
        return 0
    try:
        when = datetime.fromisoformat(str(eta))
    except ValueError:
        return 0  # not ours to refuse: the worker reads (and judges) the header itself
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now_s is None else now_s
    return delay_ms_from_seconds(when.timestamp() - now)


def message_ttl_s(message: dict[str, Any]) -> int | None:
    """The job's TTL from the message's ``expiration`` (ms), or None. Not for a Celery task
    (its ``expires`` header, protocol 2): the worker must receive it to mark it REVOKED, as
    on Redis, which ignores expiration; a job that vanished would leave its result pending
    forever."""
    headers = message.get("headers") or {}
    if headers.get("task") and headers.get("expires"):
        return None
    return ttl_from_ms((message.get("properties") or {}).get("expiration"))


def idempotency_key(message: dict[str, Any]) -> str | None:
    """The message's ``disq_idempotency_key`` property, or None (absent or empty)."""
    key = (message.get("properties") or {}).get(IDEMPOTENCY_PROPERTY)
    return str(key) if key else None
