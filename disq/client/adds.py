"""An add's options, declared once: :class:`AddOptions` is what ``add_job`` takes as keyword
arguments on every SDK path (the async client's batched AddJobs, the blocking add, a
Publish's job) and on the integrations' RESP path (ADDJOB's arguments,
disq/integrations/resp_calls.py), and what the integrations' settings produce. One check
(:func:`check_add_options`) answers a bad option the same way on each: TypeError for an
unknown name, ValueError for a bad value, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from disq.client.tracing import with_trace
from disq.proto_gen import api_pb2

REPL_TIMEOUT_MS = 5000  # how long a sync add waits for its copies, unless told


class AddOptions(TypedDict, total=False):
    """``add_job``'s options (all optional; Disque's ADDJOB names in brackets).

    - ``replicate`` [REPLICATE]: copies the add waits for, 1-65535; unset: the node's
      default, min(3, cluster size).
    - ``repl_timeout_ms`` [TIMEOUT]: how long it waits for them (NoReplError after), 5000.
    - ``delay_s`` [DELAY] or ``delay_ms`` (disq's DELAYMS): queued that much later.
    - ``retry_s`` [RETRY]: delivered again after this long unacked; 0: at most once.
    - ``ttl_s`` [TTL]: deleted after this long whatever its state; ``maxlen`` [MAXLEN].
    - ``async_`` [ASYNC]: answered once one copy exists, the others made after.
    - ``idempotency_key`` (disq's IDEMPOTENCY-KEY): a repeat within the window adds nothing
      and answers the first job's id.
    - ``headers`` (disq's HEADERS): ``{key: value}`` the job carries (``Job.headers``,
      ``show()``), values str (sent as UTF-8) or bytes; the node's bounds: at most 64, a
      key 1..256 bytes, 16 KiB in all (else InvalidArgument). With OpenTelemetry in use, the
      current trace context is added (``traceparent``...; a key given here wins).
    """

    replicate: int | None
    repl_timeout_ms: int
    delay_s: int
    delay_ms: int
    retry_s: int | None
    ttl_s: int | None
    maxlen: int | None
    async_: bool
    idempotency_key: str | None
    headers: Mapping[str, str | bytes] | None


ADD_OPTION_NAMES = frozenset(AddOptions.__annotations__)
_COUNTS = ("repl_timeout_ms", "delay_s", "delay_ms", "retry_s", "ttl_s", "maxlen")


def check_add_options(options: AddOptions) -> None:
    """TypeError for a name add_job does not take, ValueError for a value the node would
    refuse (or protobuf could not carry): raised before anything is sent."""
    for name in options:
        if name not in ADD_OPTION_NAMES:
            raise TypeError(f"add_job() got an unexpected keyword argument {name!r}")
    for name in _COUNTS:
        value = options.get(name)
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"add_job {name}: a non-negative integer, got {value!r}")
    replicate = options.get("replicate")
    if replicate is not None and not (isinstance(replicate, int) and 1 <= replicate <= 65535):
        # RESP's REPLICATE bounds; 0 is not "the default"
        raise ValueError(f"replicate must be between 1 and 65535, not {replicate!r}")
    if options.get("delay_s") and options.get("delay_ms"):
        raise ValueError("add_job: delay_s or delay_ms, not both")
    headers = options.get("headers")
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise TypeError(f"add_job headers: a mapping, got {type(headers).__name__}")
        for k, v in headers.items():
            if not isinstance(k, str) or not isinstance(v, str | bytes):
                raise TypeError(f"add_job headers: str keys, str or bytes values: {k!r}")


def header_items(headers: Mapping[str, str | bytes]) -> list[tuple[str, bytes]]:
    """An add's headers as they travel: values as bytes (a str as UTF-8)."""
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in headers.items()]


def fill_add(
    req: api_pb2.AddJobRequest, queue: str, body: bytes | str, options: AddOptions
) -> None:
    """Set an AddJobRequest's fields (in place: a batch adds its messages with
    ``jobs.add()``, which saves a copy per job), after :func:`check_add_options`."""
    check_add_options(options)
    req.queue = queue
    req.body = body.encode() if isinstance(body, str) else body
    req.timeout_ms = options.get("repl_timeout_ms", REPL_TIMEOUT_MS)
    if (replicate := options.get("replicate")) is not None:
        req.replicate = replicate
    if delay_s := options.get("delay_s"):
        req.delay_s = delay_s
    if delay_ms := options.get("delay_ms"):
        req.delay_ms = delay_ms
    if maxlen := options.get("maxlen"):
        req.maxlen = maxlen
    if options.get("async_"):
        setattr(req, "async", True)  # a Python keyword
    if (retry_s := options.get("retry_s")) is not None:
        req.retry_s = retry_s
    if (ttl_s := options.get("ttl_s")) is not None:
        req.ttl_s = ttl_s
    if idempotency_key := options.get("idempotency_key"):
        req.idempotency_key = idempotency_key
    # The caller's trace context goes along when OpenTelemetry is in use (disq/client/tracing.py).
    if headers := with_trace(options.get("headers")):
        req.headers.update(header_items(headers))
