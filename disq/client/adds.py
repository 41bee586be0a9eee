"""An add's options as every SDK path sends them: one function fills the AddJobRequest
(the async client's AddJobs batches, the blocking add's AddJob, a Publish's job), so the
options, their checks and their defaults are written once."""

from __future__ import annotations

from disq.proto_gen import api_pb2


def fill_add(
    req: api_pb2.AddJobRequest,
    queue: str,
    body: bytes | str,
    *,
    replicate: int | None = None,
    repl_timeout_ms: int = 5000,
    delay_s: int = 0,
    retry_s: int | None = None,
    ttl_s: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    idempotency_key: str | None = None,
    delay_ms: int = 0,
) -> None:
    """Set an AddJobRequest's fields (in place: a batch adds its messages with
    ``jobs.add()``, which saves a copy per job). ``delay_ms`` or ``delay_s``, not both."""
    req.queue = queue
    req.body = body.encode() if isinstance(body, str) else body
    req.timeout_ms = repl_timeout_ms
    if replicate is not None:
        if not 1 <= replicate <= 65535:  # RESP's REPLICATE bounds; 0 is not "the default"
            raise ValueError(f"replicate must be between 1 and 65535, not {replicate}")
        req.replicate = replicate
    if delay_s and delay_ms:
        raise ValueError("add_job: delay_s or delay_ms, not both")
    if delay_s:
        req.delay_s = delay_s
    if delay_ms:
        req.delay_ms = delay_ms
    if maxlen:
        req.maxlen = maxlen
    if async_:
        setattr(req, "async", True)  # a Python keyword
    if retry_s is not None:
        req.retry_s = retry_s
    if ttl_s is not None:
        req.ttl_s = ttl_s
    if idempotency_key:
        req.idempotency_key = idempotency_key
