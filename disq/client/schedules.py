"""The SDK's recurring schedules (issue 25): :class:`Schedule` and the SCHEDULE methods of
:class:`~disq.client.AsyncClient`, as a mixin (aio.py stays within its size; calls.py says
how the mixin reaches the client's calls). Every node holds every schedule, so any node
answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from disq.client.calls import NodeCalls
from disq.proto_gen import api_pb2


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule as ShowSchedule gives it: its definition, then how the node
    that answered sees its firing. ``replicate``, ``retry_s``, ``ttl_s`` None: the add's
    defaults. Times are Unix seconds; ``last_tick`` 0: no tick bound yet."""

    name: str
    spec: str
    tz: str
    queue: str
    body: bytes
    replicate: int | None = None
    retry_s: int | None = None
    ttl_s: int | None = None
    async_: bool = False
    misfire: str = "catchup"  # or "skip"
    catchup: int = 1
    paused: bool = False
    next_fire_times: tuple[int, ...] = ()
    last_tick: int = 0
    last_job_id: str = ""
    last_job_state: str = ""
    last_error: str = ""
    owner: str = ""
    version: str = ""


# The fields ShowSchedule's message carries under the Schedule's own names and types.
_SAME_FIELDS = (
    "name",
    "spec",
    "queue",
    "body",
    "misfire",
    "catchup",
    "paused",
    "last_tick",
    "last_job_id",
    "last_job_state",
    "last_error",
    "owner",
    "version",
)


def schedule_from_proto(s: api_pb2.Schedule) -> Schedule:
    """The SDK's Schedule from ShowSchedule's message: the fields both spell alike, then
    those the message spells its own way."""
    return Schedule(
        **{name: getattr(s, name) for name in _SAME_FIELDS},
        tz=s.zone,
        replicate=s.replicate or None,
        retry_s=s.retry_s if s.HasField("retry_s") else None,
        ttl_s=s.ttl_s if s.HasField("ttl_s") else None,
        async_=getattr(s, "async"),
        next_fire_times=tuple(s.next_fire_times),
    )


class AsyncSchedulesMixin:
    """The schedule methods of AsyncClient."""

    async def add_schedule(
        self: NodeCalls,
        name: str,
        spec: str,
        queue: str,
        body: bytes | str,
        *,
        tz: str = "UTC",
        replicate: int | None = None,
        retry_s: int | None = None,
        ttl_s: int | None = None,
        async_: bool = False,
        misfire: str = "catchup",
        catchup: int = 1,
    ) -> bool:
        """SCHEDULE ADD: every tick of ``spec`` (cron, ``@daily``..., ``@every 30s``) in
        zone ``tz`` adds one job to ``queue`` (key ``schedule:<name>:<tick>``) with the add's
        options. ``misfire``: ``"catchup"`` fires the last ``catchup`` ticks missed while the
        cluster was down, ``"skip"`` none. Replaces a schedule of the same name (True then).
        A bad spec, zone or option raises InvalidArgumentError and stores nothing."""
        req = api_pb2.AddScheduleRequest(
            name=name,
            spec=spec,
            zone=tz,
            queue=queue,
            body=body.encode() if isinstance(body, str) else body,
            misfire=misfire,
        )
        if replicate:
            req.replicate = replicate
        if retry_s is not None:
            req.retry_s = retry_s
        if ttl_s is not None:
            req.ttl_s = ttl_s
        if async_:
            setattr(req, "async", True)  # a Python keyword
        if misfire.lower() == "catchup":
            req.catchup = catchup
        r = await self._call("AddSchedule", req)
        return bool(r.replaced)

    async def delete_schedule(self: NodeCalls, name: str) -> bool:
        """SCHEDULE DEL; False when there was no such schedule."""
        return await _schedule_change(self, "DeleteSchedule", name)

    async def pause_schedule(self: NodeCalls, name: str) -> bool:
        """SCHEDULE PAUSE: no tick fires until resumed; False when no such schedule."""
        return await _schedule_change(self, "PauseSchedule", name)

    async def resume_schedule(self: NodeCalls, name: str) -> bool:
        """SCHEDULE RESUME: fires again from the next tick (the paused ones are not fired);
        False when no such schedule."""
        return await _schedule_change(self, "ResumeSchedule", name)

    async def list_schedules(self: NodeCalls) -> list[str]:
        """SCHEDULE LIST: every schedule's name, sorted (every node holds every one)."""
        r = await self._call("ListSchedules", api_pb2.ListSchedulesRequest())
        return list(r.names)

    async def show_schedule(self: NodeCalls, name: str) -> Schedule | None:
        """SCHEDULE SHOW; None when there is no such schedule."""
        r = await self._call("ShowSchedule", api_pb2.ScheduleName(name=name))
        return schedule_from_proto(r.schedule) if r.found else None


async def _schedule_change(calls: NodeCalls, method: str, name: str) -> bool:
    r = await calls._call(method, api_pb2.ScheduleName(name=name))
    return bool(r.found)
