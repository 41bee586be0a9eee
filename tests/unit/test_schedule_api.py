"""Schedules through the gRPC API's conversions and the SDK's, over real cores in memory.

An AddScheduleRequest becomes the definition SCHEDULE ADD would build, travels to the other
node of disq.testing.mesh's cluster, comes back from there as ShowSchedule's message and as
the SDK's ``Schedule``; a keyed job's SHOW fills JobInfo.idempotency_key. The RPC handlers
themselves run against real nodes in tests/integration/test_schedule_grpc.py.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from disq.client import Schedule
from disq.client.schedules import schedule_from_proto as sdk_schedule
from disq.core.disque.api import PENDING, AddOptions
from disq.core.messages import MISFIRE_CATCHUP, MISFIRE_SKIP
from disq.core.schedule.scheduler import Scheduler
from disq.proto_gen import api_pb2
from disq.server.api_service import ApiError, _job_info, _schedule, _schedule_def
from disq.testing.mesh import Mesh


def _wire(msg: api_pb2.AddScheduleRequest) -> api_pb2.AddScheduleRequest:
    return api_pb2.AddScheduleRequest.FromString(msg.SerializeToString())


def _sched(mesh: Mesh, i: int) -> Scheduler:
    sched = mesh.nodes[i].scheduler
    assert sched is not None
    return sched


def _shown(mesh: Mesh, i: int, name: str) -> Schedule:
    sched = _sched(mesh, i)
    d = sched.get(name)
    pairs = sched.describe(name, mesh.now)
    assert d is not None and pairs is not None
    msg = _schedule(d, pairs)
    return sdk_schedule(api_pb2.Schedule.FromString(msg.SerializeToString()))


def test_the_sdk_schedule_reads_every_field_of_the_message() -> None:
    msg = api_pb2.Schedule(
        name="n",
        spec="@daily",
        zone="Europe/Berlin",
        queue="q",
        body=b"b",
        replicate=2,
        retry_s=5,
        ttl_s=60,
        misfire="skip",
        catchup=3,
        paused=True,
        next_fire_times=[7],
        last_tick=6,
        last_job_id="D-1",
        last_job_state="queued",
        last_error="e",
        owner="o",
        version="v",
    )
    setattr(msg, "async", True)
    s = sdk_schedule(msg)
    blank = Schedule(name="", spec="", tz="", queue="", body=b"")
    left_at_default = [
        f.name for f in dataclasses.fields(Schedule) if getattr(s, f.name) == getattr(blank, f.name)
    ]
    assert left_at_default == []
    assert (s.tz, s.async_, s.next_fire_times, s.misfire) == ("Europe/Berlin", True, (7,), "skip")


def test_every_option_round_trips_to_the_sdk_through_another_node() -> None:
    mesh = Mesh(2)
    req = api_pb2.AddScheduleRequest(
        name="nightly",
        spec="0 3 * * *",
        zone="Europe/Berlin",
        queue="reports",
        body=b"\xffrun",
        replicate=2,
        retry_s=30,
        ttl_s=3600,
        misfire="SKIP",
    )
    setattr(req, "async", True)
    d = _schedule_def(_wire(req))
    assert (d.repl, d.retry_s, d.ttl_s, d.async_, d.misfire) == (2, 30, 3600, True, MISFIRE_SKIP)
    _sched(mesh, 0).add(mesh.now, d)
    mesh.pump()
    s = _shown(mesh, 1, "nightly")
    assert (s.name, s.spec, s.tz, s.queue, s.body) == (
        "nightly",
        "0 3 * * *",
        "Europe/Berlin",
        "reports",
        b"\xffrun",
    )
    assert (s.replicate, s.retry_s, s.ttl_s, s.async_, s.misfire) == (2, 30, 3600, True, "skip")
    assert not s.paused and len(s.next_fire_times) == 5 and s.last_tick == 0
    assert s.owner in mesh.ids and s.version.endswith(mesh.ids[0])


def test_unset_options_are_the_add_defaults_both_ways() -> None:
    mesh = Mesh(2)
    d = _schedule_def(_wire(api_pb2.AddScheduleRequest(name="e", spec="@every 5s", queue="q")))
    assert (d.zone, d.repl, d.retry_s, d.ttl_s, d.misfire, d.catchup) == (
        "UTC",
        0,
        -1,
        -1,
        MISFIRE_CATCHUP,
        1,
    )
    # RETRY 0 is at-most-once, not "unset"; CATCHUP 0 fires no missed tick.
    zero = api_pb2.AddScheduleRequest(name="z", spec="@every 5s", queue="q", retry_s=0)
    zero.catchup = 0
    assert (_schedule_def(_wire(zero)).retry_s, _schedule_def(_wire(zero)).catchup) == (0, 0)
    _sched(mesh, 0).add(mesh.now, d)
    s = _shown(mesh, 0, "e")
    shown = (s.replicate, s.retry_s, s.ttl_s, s.misfire, s.catchup)
    assert shown == (None, None, None, "catchup", 1)
    assert s.next_fire_times[1] - s.next_fire_times[0] == 5


def test_a_misfire_policy_other_than_skip_or_catchup_is_syntax() -> None:
    req = api_pb2.AddScheduleRequest(name="m", spec="@hourly", queue="q", misfire="later")
    with pytest.raises(ApiError) as info:
        _schedule_def(req)
    assert info.value.reason == api_pb2.SYNTAX
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "MISFIRE" in info.value.message


def test_job_info_carries_a_keyed_jobs_key_only() -> None:
    mesh = Mesh(3)
    core = mesh.disque(0)
    keyed = core.add_job(
        mesh.now, 1, "q", b"k", AddOptions(timeout_ms=5000, idem_key="schedule:s:60")
    )
    plain = core.add_job(mesh.now, 2, "q", b"p", AddOptions(timeout_ms=5000))
    mesh.pump()
    ids = {tok: r for tok, r in mesh.replies[mesh.ids[0]]}
    keyed_id = ids[1] if keyed is PENDING else keyed
    plain_id = ids[2] if plain is PENDING else plain
    assert isinstance(keyed_id, str) and isinstance(plain_id, str)
    pairs = core.inspect.show(mesh.now, keyed_id)
    assert pairs is not None
    info = api_pb2.JobInfo.FromString(_job_info(pairs).SerializeToString())
    assert info.HasField("idempotency_key") and info.idempotency_key == "schedule:s:60"
    plain_pairs = core.inspect.show(mesh.now, plain_id)
    assert plain_pairs is not None
    assert not _job_info(plain_pairs).HasField("idempotency_key")
