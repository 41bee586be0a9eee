"""The client API (proto/disq/v1/api.proto, service disq.v1.Queue) on the node's gRPC port.

The third front door to the same job core as the RESP door: the same core calls, the same
checks and Disque's error texts, so ADDJOB over RESP and AddJob over gRPC cannot disagree.
What differs is only the envelope: errors are gRPC status codes with a machine-readable
:class:`ErrorInfo` in the trailing metadata key ``disq-error-bin``.

A call that blocks in the core (a sync AddJob, a GetJobs with nothing queued) takes a token
from the node-wide counter the RESP connections use and waits on a future; the node's reply
router calls back with the answer after the AOF write that the answer depends on. A call that
goes away (deadline, cancel, the client died) cancels its token in the core: a sync add
nobody will learn about is deleted, as Disque does for a client that disconnects while
waiting for replication.

The standard health service (``grpc.health.v1.Health``, overall and per service) and server
reflection are served on the same port, so grpcurl and Kubernetes probes work unchanged.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import grpc

from disq.core.disque.api import PENDING, AddOptions, DeferredResult, DisqueError, Pending
from disq.core.disque.job import STATE_BY_NAME, DJob
from disq.core.ids import BadJobId, validate_job_id
from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP, PAUSE_IN, PAUSE_OUT, ScheduleDef
from disq.core.schedule.scheduler import ScheduleError
from disq.doors.disque import NodeApi, info_dict, queue_bytes, queue_name
from disq.doors.disque.jobs import NACK_DELAY_MAX_S
from disq.logging import get_logger
from disq.proto_gen import api_pb2, api_pb2_grpc

if TYPE_CHECKING:
    from disq.core.routes.table import Routes
    from disq.core.schedule.scheduler import Scheduler
    from disq.persistence.event_log import EventLog
    from disq.server.router import Waiter

SERVICE_NAME = "disq.v1.Queue"
ERROR_KEY = "disq-error-bin"
PASSWORD_KEY = "disq-password"

# Bounds of one call: a batch or a fetch past these is refused, not half served.
MAX_BATCH_JOBS = 10_000
MAX_GET_COUNT = 10_000
MAX_IDS = 100_000
MAX_QUEUES = 1_000
MAX_QUEUE_NAME_BYTES = 64 << 10

# Disque's error codes -> (reason, gRPC status code). Everything the core can raise is here;
# ERR (an argument Disque refuses) is SYNTAX.
REASONS: dict[str, tuple[int, grpc.StatusCode]] = {
    "NOREPL": (api_pb2.NOREPL, grpc.StatusCode.UNAVAILABLE),
    "LEAVING": (api_pb2.LEAVING, grpc.StatusCode.UNAVAILABLE),
    "MAXLEN": (api_pb2.MAXLEN, grpc.StatusCode.FAILED_PRECONDITION),
    "PAUSED": (api_pb2.PAUSED, grpc.StatusCode.FAILED_PRECONDITION),
    "TOOLATE": (api_pb2.TOOLATE, grpc.StatusCode.FAILED_PRECONDITION),
    "OOM": (api_pb2.OOM, grpc.StatusCode.RESOURCE_EXHAUSTED),
    "BADID": (api_pb2.BADID, grpc.StatusCode.INVALID_ARGUMENT),
    "ERR": (api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT),
    "NOJOB": (api_pb2.NOJOB, grpc.StatusCode.NOT_FOUND),
}
_PAUSE_FLAGS = {"none": 0, "in": PAUSE_IN, "out": PAUSE_OUT, "all": PAUSE_IN | PAUSE_OUT}
_PAUSE_NAMES = ("none", "in", "out", "all")

T = TypeVar("T")


class ApiNode(NodeApi, Protocol):
    """What the API needs from the node on top of the RESP commands' :class:`NodeApi`
    (``disq.server.node_services.NodeServices`` is both)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def my_id(self) -> str: ...

    @property
    def event_log(self) -> EventLog: ...

    @property
    def scheduler(self) -> Scheduler | None: ...

    @property
    def routes(self) -> Routes | None: ...

    def member_grpc_port(self, node_id: str) -> int: ...

    def new_token(self) -> int: ...

    def wait_reply(self, token: int, waiter: Waiter) -> None: ...

    def cancel(self, token: int) -> None: ...

    def after_commands(self) -> None: ...

    def durable(self) -> asyncio.Future[None]: ...


class ApiError(Exception):
    """A refused call: its reason, status code and Disque's message."""

    def __init__(self, reason: int, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code
        self.message = message

    @classmethod
    def from_disque(cls, exc: DisqueError) -> ApiError:
        reason, code = REASONS.get(
            exc.code, (api_pb2.ERROR_REASON_UNSPECIFIED, grpc.StatusCode.INTERNAL)
        )
        return cls(reason, code, f"{exc.code} {exc.message}")

    @classmethod
    def from_schedule(cls, exc: ScheduleError) -> ApiError:
        """A SCHEDULE refusal (its code is ERR: the argument named in the message)."""
        reason, code = REASONS.get(exc.code, (api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT))
        return cls(reason, code, f"{exc.code} {exc.message}")

    def info(self) -> api_pb2.ErrorInfo:
        return api_pb2.ErrorInfo(
            reason=api_pb2.ErrorReason.Name(self.reason),
            message=self.message,
        )


def syntax(message: str) -> ApiError:
    return ApiError(api_pb2.SYNTAX, grpc.StatusCode.INVALID_ARGUMENT, f"ERR {message}")


def _queue(name: str) -> str:
    """A queue name from the API as the core's ``str``: the UTF-8 bytes a RESP client would
    send for it, so both doors name the same queue."""
    raw = name.encode("utf-8", "surrogatepass")
    if not raw:
        raise syntax("queue name must not be empty")
    if len(raw) > MAX_QUEUE_NAME_BYTES:
        raise syntax(f"queue name longer than {MAX_QUEUE_NAME_BYTES} bytes")
    return queue_name(raw)


def _kept(part: T | None, what: str) -> T:
    """A part a node may run without (its routes, its schedules), or UNIMPLEMENTED."""
    if part is None:
        raise ApiError(
            api_pb2.ERROR_REASON_UNSPECIFIED,
            grpc.StatusCode.UNIMPLEMENTED,
            f"ERR this node keeps no {what}",
        )
    return part


def _start_add(
    req: api_pb2.AddJobRequest,
    now: int,
    queue: str,
    new_token: Callable[[], int],
    add_job: Callable[[int, int, str, bytes, AddOptions], str | Pending],
) -> tuple[int, str | None]:
    """Start one add of a checked queue: (token, id) when it is done at once, (token, None)
    when pending. The node's disk state is the caller's to check."""
    if req.replicate > 65535:
        raise syntax("REPLICATE must be between 1 and 65535")
    has = req.HasField
    if has("ttl_s") and req.ttl_s == 0:
        raise syntax("TTL must be a number > 0")
    if req.delay_s and req.delay_ms:
        raise syntax("DELAY and DELAYMS exclude each other")
    token = new_token()
    opts = AddOptions(
        req.timeout_ms,
        req.replicate or None,
        req.delay_s,
        req.retry_s if has("retry_s") else None,
        req.ttl_s if has("ttl_s") else None,
        req.maxlen or None,
        getattr(req, "async"),  # a Python keyword
        req.idempotency_key,
        req.delay_ms,
        tuple(req.headers.items()) if req.headers else None,  # bounds: the core's
    )
    r = add_job(now, token, queue, req.body, opts)
    return token, (None if r is PENDING else str(r))


def _api_queue(name: str) -> str:
    return queue_bytes(name).decode("utf-8", "replace")


def _ids(ids: Any) -> list[str]:
    if len(ids) > MAX_IDS:
        raise syntax(f"at most {MAX_IDS} ids per call")
    out = list(ids)
    try:
        for job_id in out:
            validate_job_id(job_id)
    except BadJobId as exc:
        raise ApiError(
            api_pb2.BADID, grpc.StatusCode.INVALID_ARGUMENT, "BADID Invalid Job ID format."
        ) from exc
    return out


def _add_jobs(out: Any, jobs: list[DJob], with_counters: bool) -> None:
    """Append jobs to a repeated QueuedJob field, in place (no copy per job)."""
    add = out.add
    for j in jobs:
        if with_counters:
            q = add(
                id=j.id,
                queue=_api_queue(j.queue),
                body=j.body,
                nacks=j.nacks,
                additional_deliveries=j.add_deliveries,
                retry_s=j.retry_s,
            )
        else:
            q = add(id=j.id, queue=_api_queue(j.queue), body=j.body, retry_s=j.retry_s)
        if j.idem_key:  # rare: a keyed job (a schedule's tick, a Spark row)
            q.idempotency_key = j.idem_key
        headers = j.headers
        if headers:  # rare too: most jobs have none
            q.headers.update(headers)


def _job_info(pairs: list[tuple[str, object]]) -> api_pb2.JobInfo:
    d = dict(pairs)
    info = api_pb2.JobInfo(
        found=True,
        id=str(d["id"]),
        queue=_api_queue(str(d["queue"])) if d["queue"] is not None else "",
        state=str(d["state"]),
        repl=int(d["repl"]),  # type: ignore[call-overload]
        ttl_s=int(d["ttl"]),  # type: ignore[call-overload]
        ctime=int(d["ctime"]),  # type: ignore[call-overload]
        delay_s=int(d["delay"]),  # type: ignore[call-overload]
        retry_s=int(d["retry"]),  # type: ignore[call-overload]
        nacks=int(d["nacks"]),  # type: ignore[call-overload]
        additional_deliveries=int(d["additional-deliveries"]),  # type: ignore[call-overload]
        nodes_delivered=list(d["nodes-delivered"]),  # type: ignore[call-overload]
        nodes_confirmed=list(d["nodes-confirmed"]),  # type: ignore[call-overload]
        body=d["body"] if isinstance(d["body"], bytes) else b"",
    )
    if d["next-requeue-within"] is not None:
        info.next_requeue_within_ms = int(d["next-requeue-within"])  # type: ignore[call-overload]
    if d["next-awake-within"] is not None:
        info.next_awake_within_ms = int(d["next-awake-within"])  # type: ignore[call-overload]
    key = d.get("idempotency-key")
    if key:
        info.idempotency_key = _api_queue(str(key))
    result = d.get("result")
    if isinstance(result, bytes):
        info.result = result
    headers = d.get("headers")
    if isinstance(headers, list):  # SHOW's flat [k1, v1, ...]
        info.headers.update(zip(headers[::2], headers[1::2], strict=True))
    return info


_MISFIRE = {"": MISFIRE_CATCHUP, "catchup": MISFIRE_CATCHUP, "skip": MISFIRE_SKIP}


def _schedule_def(req: api_pb2.AddScheduleRequest) -> ScheduleDef:
    """AddSchedule's definition as SCHEDULE ADD would build it; the scheduler checks the
    rest (name, spec, zone, options against the cluster)."""
    misfire = _MISFIRE.get(req.misfire.lower())
    if misfire is None:
        raise syntax(f"MISFIRE must be skip or catchup, not {req.misfire!r}")
    has = req.HasField
    return ScheduleDef(
        req.name,
        req.spec,
        req.zone or "UTC",
        _queue(req.queue),
        req.body,
        repl=req.replicate,
        retry_s=req.retry_s if has("retry_s") else -1,
        ttl_s=req.ttl_s if has("ttl_s") else -1,
        async_=getattr(req, "async"),
        misfire=misfire,
        catchup=req.catchup if has("catchup") else 1,
    )


def _schedule(d: ScheduleDef, pairs: list[tuple[str, object]]) -> api_pb2.Schedule:
    """SCHEDULE SHOW as a message: the definition, then this node's view of its firing."""
    shown: dict[str, Any] = dict(pairs)
    out = api_pb2.Schedule(
        name=_api_queue(d.name),
        spec=d.spec,
        zone=d.zone,
        queue=_api_queue(d.queue),
        body=d.body,
        replicate=d.repl,
        misfire="skip" if d.misfire == MISFIRE_SKIP else "catchup",
        catchup=d.catchup,
        paused=d.paused,
        next_fire_times=[int(t) for t in shown["next"]],
        last_tick=int(shown["last-tick"]),
        last_job_id=str(shown["last-job-id"]),
        last_job_state=str(shown["last-job-state"]),
        last_error=str(shown["last-error"]),
        owner=str(shown["owner"]),
        version=str(shown["version"]),
    )
    setattr(out, "async", d.async_)  # a Python keyword
    if d.retry_s >= 0:
        out.retry_s = d.retry_s
    if d.ttl_s >= 0:
        out.ttl_s = d.ttl_s
    return out


class QueueApi(api_pb2_grpc.QueueServicer):
    """The servicer. Runs on the node's loop, like every other door."""

    def __init__(self, node: ApiNode) -> None:
        self.node = node
        self._waiters: dict[int, asyncio.Future[DeferredResult]] = {}
        self.log = get_logger("disq.api")
        self.calls = 0
        self.errors = 0

    # ------------------------------------------------------------------ plumbing
    def register(self, server: Any) -> None:
        """Add the Queue service, health and reflection to a grpc.aio server (before start)."""
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        from grpc_reflection.v1alpha import reflection

        api_pb2_grpc.add_QueueServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names = (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, server)
        self._health_pb2 = health_pb2

    async def set_serving(self, serving: bool) -> None:
        status = (
            self._health_pb2.HealthCheckResponse.SERVING
            if serving
            else self._health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    def _deliver(self, token: int, result: DeferredResult) -> None:
        """A deferred core answer for one of our tokens (the node's router calls it)."""
        fut = self._waiters.pop(token, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _done(self) -> None:
        """After any core call: AOF records, peer messages, deferred replies, timers."""
        self.node.after_commands()

    async def _wait(self, tokens: list[int]) -> list[DeferredResult]:
        """The core's deferred answers for ``tokens``, in order."""
        futs: list[asyncio.Future[DeferredResult]] = []
        for token in tokens:
            fut: asyncio.Future[DeferredResult] = self.node.loop.create_future()
            self._waiters[token] = fut
            self.node.wait_reply(token, self._deliver)
            futs.append(fut)
        self._done()
        try:
            return list(await asyncio.gather(*futs))
        except asyncio.CancelledError:
            # The call is gone (deadline, cancel, disconnect): nobody will read the answers.
            for token in tokens:
                if self._waiters.pop(token, None) is not None:
                    self.node.cancel(token)
            self._done()
            raise

    async def _call(
        self,
        context: Any,
        body: Callable[[], Awaitable[T]],
    ) -> T:
        self.calls += 1
        self.node.resp_stats.commands += 1  # INFO's total_commands_processed
        try:
            self._check_auth(context)
            error = self.node.aof_error
            if error is not None:
                raise ApiError(
                    api_pb2.ERROR_REASON_UNSPECIFIED,
                    grpc.StatusCode.UNAVAILABLE,
                    f"MISCONF Errors writing to the AOF file: {error}",
                )
            return await body()
        except DisqueError as exc:
            await self._abort(context, ApiError.from_disque(exc))
        except ApiError as exc:
            await self._abort(context, exc)

    async def _abort(self, context: Any, exc: ApiError) -> NoReturn:
        self.errors += 1
        await context.abort(
            exc.code, exc.message, trailing_metadata=((ERROR_KEY, exc.info().SerializeToString()),)
        )
        raise AssertionError("context.abort returned")  # pragma: no cover

    def _check_auth(self, context: Any) -> None:
        password = self.node.requirepass
        if not password:
            return
        given = ""
        for key, value in context.invocation_metadata() or ():
            if key == PASSWORD_KEY:
                given = value if isinstance(value, str) else value.decode("utf-8", "replace")
        if not hmac.compare_digest(given.encode(), password.encode()):
            raise ApiError(
                api_pb2.ERROR_REASON_UNSPECIFIED,
                grpc.StatusCode.UNAUTHENTICATED,
                "NOAUTH Authentication required.",
            )

    def _now(self) -> int:
        return self.node.now_ms()

    def _check_disk(self) -> None:
        """The RESP door's -OOM while the disk is full: nothing is added (the SDK raises
        OutOfMemoryError)."""
        full = self.node.disk_full
        if full is not None:
            raise ApiError(api_pb2.OOM, grpc.StatusCode.RESOURCE_EXHAUSTED, f"OOM {full}")

    # ------------------------------------------------------------------ adding
    def _start_add(self, req: api_pb2.AddJobRequest, now: int) -> tuple[int, str | None]:
        """Start one add: (token, id) when it is done at once, (token, None) when pending."""
        self._check_disk()
        return _start_add(req, now, _queue(req.queue), self.node.new_token, self.node.core.add_job)

    async def AddJob(self, request: api_pb2.AddJobRequest, context: Any) -> Any:
        async def body() -> api_pb2.AddJobResponse:
            token, job_id = self._start_add(request, self._now())
            if job_id is None:
                job_id = _added((await self._wait([token]))[0])
            else:
                await self.node.durable()  # an ASYNC add's id: its record is on disk
            return api_pb2.AddJobResponse(id=job_id)

        return await self._call(context, body)

    async def AddJobs(self, request: api_pb2.AddJobsRequest, context: Any) -> Any:
        async def body() -> api_pb2.AddJobsResponse:
            if len(request.jobs) > MAX_BATCH_JOBS:
                raise syntax(f"at most {MAX_BATCH_JOBS} jobs per AddJobs")
            response = api_pb2.AddJobsResponse()
            # A batch is one call on the loop: the token counter and the core are looked up
            # once, and each distinct queue name is checked once (a producer's batch names
            # one or a few queues).
            queues: dict[str, str] = {}

            def prepare(req: api_pb2.AddJobRequest) -> tuple[api_pb2.AddJobRequest, str]:
                self._check_disk()
                queue = queues.get(req.queue)
                if queue is None:
                    queue = queues[req.queue] = _queue(req.queue)
                return req, queue

            await self._add_each(response, request.jobs, prepare)
            return response

        return await self._call(context, body)

    async def _add_each(
        self,
        response: Any,
        items: Iterable[T],
        prepare: Callable[[T], tuple[api_pb2.AddJobRequest, str]],
    ) -> None:
        """Starts one add per item (its request and checked queue from ``prepare``), in
        order, each outcome into its place in ``response.results`` (AddJobs' and Publish's):
        an error at once, the id of an add done at once, or, once every sync add of the
        batch has replicated (they replicate at once), the id or the error."""
        now = self._now()
        new_token = self.node.new_token
        add_job = self.node.core.add_job
        result = response.results.add  # in place: no message copied per job
        waits: list[tuple[int, int]] = []  # (index, token)
        for index, item in enumerate(items):
            try:
                req, queue = prepare(item)
                token, job_id = _start_add(req, now, queue, new_token, add_job)
            except (DisqueError, ApiError) as exc:
                err = exc if isinstance(exc, ApiError) else ApiError.from_disque(exc)
                result().error.CopyFrom(err.info())
                continue
            if job_id is None:
                waits.append((index, token))
                result()
            else:
                result().id = job_id
        if waits:
            await self._wait_adds(response, waits)
        else:
            await self.node.durable()  # the adds' records on disk, as the policy promises

    async def _wait_adds(self, response: Any, waits: list[tuple[int, int]]) -> None:
        """Each waiting add's outcome into its place in ``response.results`` (AddJobs' and
        Publish's): the job id, or the error the RESP door would give."""
        done = await self._wait([token for _, token in waits])
        results = response.results
        for (index, _), outcome in zip(waits, done, strict=True):
            if isinstance(outcome, str):
                results[index].id = outcome
            else:
                err = (
                    ApiError.from_disque(outcome)
                    if isinstance(outcome, DisqueError)
                    else ApiError(
                        api_pb2.ERROR_REASON_UNSPECIFIED,
                        grpc.StatusCode.INTERNAL,
                        f"unexpected add result {outcome!r}",
                    )
                )
                results[index].error.CopyFrom(err.info())

    # ------------------------------------------------------------------ getting
    def _get_args(self, req: api_pb2.GetJobsRequest) -> tuple[list[str], int]:
        if not req.queues:
            raise syntax("at least one queue is needed")
        if len(req.queues) > MAX_QUEUES:
            raise syntax(f"at most {MAX_QUEUES} queues per call")
        count = req.count or 1
        if count > MAX_GET_COUNT:
            raise syntax(f"COUNT must be at most {MAX_GET_COUNT}")
        return [_queue(q) for q in req.queues], count

    async def _get(
        self, req: api_pb2.GetJobsRequest, queues: list[str], count: int, timeout_ms: int
    ) -> list[DJob]:
        token = self.node.new_token()
        r = self.node.core.get_job(
            self._now(),
            token,
            queues,
            nohang=req.nohang,
            timeout_ms=timeout_ms,
            count=count,
            in_order=req.in_order,
        )
        if r is None:
            self._done()
            return []
        if r is PENDING:
            (result,) = await self._wait([token])
            if isinstance(result, DisqueError):
                raise result
            return result if isinstance(result, list) else []
        self._done()
        assert isinstance(r, list)
        return r

    async def GetJobs(self, request: api_pb2.GetJobsRequest, context: Any) -> Any:
        async def body() -> api_pb2.GetJobsResponse:
            queues, count = self._get_args(request)
            jobs = await self._get(request, queues, count, request.timeout_ms)
            wc = request.with_counters
            response = api_pb2.GetJobsResponse()
            _add_jobs(response.jobs, jobs, wc)
            return response

        return await self._call(context, body)

    async def StreamJobs(
        self, request: api_pb2.GetJobsRequest, context: Any
    ) -> AsyncIterator[api_pb2.GetJobsResponse]:
        self.calls += 1
        try:
            self._check_auth(context)
            queues, count = self._get_args(request)
        except ApiError as exc:
            await self._abort(context, exc)
        wc = request.with_counters
        while True:
            try:
                # Block without a timeout: the stream lasts until the client cancels it.
                jobs = await self._get(request, queues, count, 0)
            except DisqueError as exc:
                await self._abort(context, ApiError.from_disque(exc))
            if jobs:
                response = api_pb2.GetJobsResponse()
                _add_jobs(response.jobs, jobs, wc)
                yield response
            elif request.nohang:
                return

    # ------------------------------------------------------------------ acking and friends
    def _ids_call(self, method: Callable[[int, list[str]], int]) -> Callable[..., Any]:
        async def handler(request: api_pb2.JobIds, context: Any) -> Any:
            async def body() -> api_pb2.Count:
                n = method(self._now(), _ids(request.ids))
                await self.node.durable()  # the acks' records first, as the RESP door's
                return api_pb2.Count(count=n)

            return await self._call(context, body)

        return handler

    async def Ack(self, request: api_pb2.JobIds, context: Any) -> Any:
        return await self._ids_call(self.node.core.ack_job)(request, context)

    async def FastAck(self, request: api_pb2.JobIds, context: Any) -> Any:
        return await self._ids_call(self.node.core.fast_ack)(request, context)

    async def Nack(self, request: api_pb2.NackRequest, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            delay_ms = request.delay_ms
            if delay_ms > NACK_DELAY_MAX_S * 1000:
                raise syntax(f"DELAY must be between 0 and {NACK_DELAY_MAX_S} seconds")
            n = self.node.core.nack(self._now(), _ids(request.ids), delay_ms)
            await self.node.durable()  # the nacks' records first, as the RESP door's
            return api_pb2.Count(count=n)

        return await self._call(context, body)

    async def Working(self, request: api_pb2.JobId, context: Any) -> Any:
        async def body() -> api_pb2.WorkingResponse:
            (job_id,) = _ids([request.id])
            retry = self.node.core.working(self._now(), job_id)
            self._done()
            return api_pb2.WorkingResponse(retry_s=retry)

        return await self._call(context, body)

    # ------------------------------------------------------------------ inspecting
    async def Show(self, request: api_pb2.JobId, context: Any) -> Any:
        async def body() -> api_pb2.JobInfo:
            (job_id,) = _ids([request.id])
            pairs = self.node.core.show(self._now(), job_id)
            return api_pb2.JobInfo(found=False) if pairs is None else _job_info(pairs)

        return await self._call(context, body)

    async def QLen(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.Count:
            return api_pb2.Count(count=self.node.core.qlen(_queue(request.queue)))

        return await self._call(context, body)

    async def QStat(self, request: api_pb2.QueueName, context: Any) -> Any:
        async def body() -> api_pb2.QueueStats:
            pairs = self.node.core.qstat(self._now(), _queue(request.queue))
            if pairs is None:
                return api_pb2.QueueStats(found=False)
            d: dict[str, Any] = dict(pairs)
            return api_pb2.QueueStats(
                found=True,
                name=_api_queue(d["name"]),
                len=d["len"],
                age_s=d["age"],
                idle_s=d["idle"],
                blocked=d["blocked"],
                import_from=list(d["import-from"]),
                import_rate=d["import-rate"],
                jobs_in=d["jobs-in"],
                jobs_out=d["jobs-out"],
                pause=d["pause"],
                jobs=d["jobs"],
                active=d["active"],
                delayed=d["delayed"],
            )

        return await self._call(context, body)

    async def QPeek(self, request: api_pb2.QPeekRequest, context: Any) -> Any:
        async def body() -> api_pb2.Jobs:
            if abs(request.count) > MAX_GET_COUNT:
                raise syntax(f"count must be at most {MAX_GET_COUNT} either way")
            jobs = self.node.core.qpeek(_queue(request.queue), request.count)
            response = api_pb2.Jobs()
            _add_jobs(response.jobs, jobs, False)
            return response

        return await self._call(context, body)

    async def QScan(self, request: api_pb2.QScanRequest, context: Any) -> Any:
        async def body() -> api_pb2.QScanResponse:
            nxt, names = self.node.core.qscan(
                self._now(),
                request.cursor,
                request.count or 100,
                busyloop=request.busyloop,
                minlen=request.minlen if request.HasField("minlen") else None,
                maxlen=request.maxlen if request.HasField("maxlen") else None,
                importrate=request.importrate if request.HasField("importrate") else None,
            )
            return api_pb2.QScanResponse(cursor=nxt, queues=[_api_queue(q) for q in names])

        return await self._call(context, body)

    async def JScan(self, request: api_pb2.JScanRequest, context: Any) -> Any:
        async def body() -> api_pb2.JScanResponse:
            states: set[int] = set()
            for name in request.states:
                st = STATE_BY_NAME.get(name.lower())
                if st is None:
                    raise syntax("Invalid job state name")
                states.add(st)
            core = self.node.core
            nxt, jobs = core.jscan(
                request.cursor,
                request.count or 100,
                busyloop=request.busyloop,
                queue=_queue(request.queue) if request.queue else None,
                states=states or None,
            )
            now = self._now()
            infos = []
            for j in jobs:
                if not j.delivered:
                    continue
                pairs = core.show(now, j.id)
                if pairs is not None:
                    infos.append(_job_info(pairs))
            return api_pb2.JScanResponse(cursor=nxt, jobs=infos)

        return await self._call(context, body)

    async def Pause(self, request: api_pb2.PauseRequest, context: Any) -> Any:
        async def body() -> api_pb2.PauseResponse:
            flags: int | None = None
            if request.HasField("state"):
                flags = _PAUSE_FLAGS.get(request.state.lower())
                if flags is None:
                    raise syntax("state must be one of none, in, out, all")
            r = self.node.core.pause(self._now(), _queue(request.queue), flags, request.bcast)
            self._done()
            return api_pb2.PauseResponse(state=_PAUSE_NAMES[r & (PAUSE_IN | PAUSE_OUT)])

        return await self._call(context, body)

    # ------------------------------------------------------------------ schedules
    def _scheduler(self) -> Scheduler:
        return _kept(self.node.scheduler, "schedules")

    async def AddSchedule(self, request: api_pb2.AddScheduleRequest, context: Any) -> Any:
        async def body() -> api_pb2.AddScheduleResponse:
            self._check_disk()
            sched = self._scheduler()
            d = _schedule_def(request)
            replaced = sched.get(d.name) is not None
            try:
                sched.add(self._now(), d)
            except ScheduleError as exc:
                raise ApiError.from_schedule(exc) from None
            self._done()  # the SCHEDULE record, then the change to every peer
            return api_pb2.AddScheduleResponse(replaced=replaced)

        return await self._call(context, body)

    def _schedule_change(self, change: Callable[[Scheduler], bool]) -> Callable[..., Any]:
        async def handler(request: api_pb2.ScheduleName, context: Any) -> Any:
            async def body() -> api_pb2.ScheduleChangeResponse:
                found = change(self._scheduler())
                if found:
                    self._done()
                return api_pb2.ScheduleChangeResponse(found=found)

            return await self._call(context, body)

        return handler

    async def DeleteSchedule(self, request: api_pb2.ScheduleName, context: Any) -> Any:
        return await self._schedule_change(lambda s: s.delete(self._now(), request.name))(
            request, context
        )

    async def PauseSchedule(self, request: api_pb2.ScheduleName, context: Any) -> Any:
        return await self._schedule_change(lambda s: s.pause(self._now(), request.name))(
            request, context
        )

    async def ResumeSchedule(self, request: api_pb2.ScheduleName, context: Any) -> Any:
        return await self._schedule_change(lambda s: s.resume(self._now(), request.name))(
            request, context
        )

    async def ListSchedules(self, request: api_pb2.ListSchedulesRequest, context: Any) -> Any:
        async def body() -> api_pb2.ListSchedulesResponse:
            return api_pb2.ListSchedulesResponse(
                names=[_api_queue(n) for n in self._scheduler().names()]
            )

        return await self._call(context, body)

    async def ShowSchedule(self, request: api_pb2.ScheduleName, context: Any) -> Any:
        async def body() -> api_pb2.ShowScheduleResponse:
            sched = self._scheduler()
            d = sched.get(request.name)
            pairs = sched.describe(request.name, self._now())
            if d is None or pairs is None:
                return api_pb2.ShowScheduleResponse(found=False)
            return api_pb2.ShowScheduleResponse(found=True, schedule=_schedule(d, pairs))

        return await self._call(context, body)

    # ------------------------------------------------------------------ the node
    async def Hello(self, request: api_pb2.HelloRequest, context: Any) -> Any:
        async def body() -> api_pb2.HelloResponse:
            nodes = []
            for e in self.node.cluster_nodes():
                nodes.append(
                    api_pb2.NodeInfo(
                        id=e.node_id,
                        host=e.host,
                        resp_port=e.client_port,
                        grpc_port=self.node.member_grpc_port(e.node_id),
                        priority=e.priority,
                    )
                )
            return api_pb2.HelloResponse(my_id=self.node.my_id, nodes=nodes)

        return await self._call(context, body)

    async def Info(self, request: api_pb2.InfoRequest, context: Any) -> Any:
        async def body() -> api_pb2.InfoResponse:
            fields = info_dict(self.node, request.section or "default")
            return api_pb2.InfoResponse(fields=fields)

        return await self._call(context, body)

    # ------------------------------------------------------------------ events
    async def ReadEvents(self, request: api_pb2.ReadEventsRequest, context: Any) -> Any:
        async def body() -> api_pb2.ReadEventsResponse:
            log = self.node.event_log  # every command batch and timer drains into it
            response = api_pb2.ReadEventsResponse(
                node_id=self.node.my_id, first_seq=log.first_seq, next_seq=log.next_seq
            )
            add = response.events.add
            for e in log.read(request.from_seq, request.max_events or 1000, request.since_ms):
                add(
                    seq=e.seq,
                    time_ms=e.time_ms,
                    kind=e.kind,
                    queue=_api_queue(e.queue),
                    job_id=e.job_id,
                    attempt=e.attempt,
                    size=e.size,
                )
            return response

        return await self._call(context, body)


def _added(result: DeferredResult) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, DisqueError):
        raise result
    raise ApiError(
        api_pb2.ERROR_REASON_UNSPECIFIED,
        grpc.StatusCode.INTERNAL,
        f"unexpected add result {result!r}",
    )
