"""The committed generated code matches the .proto files, and the proto matches the core's classes.

Fails when someone edited proto/disq/v1/*.proto without running scripts/gen_proto.sh, edited a
generated file by hand, or changed a message on one side (proto or disq/core/messages.py) only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from disq.core import messages as m
from disq.proto_gen import cluster_pb2 as pb
from disq.server.peer_wire import BATCH_FORMS, ONEOF_CLASSES, RECORD_FORMS

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "disq" / "proto_gen"


def _generated_files(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in (".py", ".pyi")
    }


def test_committed_code_is_what_the_generator_produces(tmp_path: Path) -> None:
    # The script itself is run, so that the test checks what a developer would commit.
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    fresh = _generated_files(tmp_path)
    committed = _generated_files(GENERATED)
    assert fresh, "the generator produced nothing"
    assert sorted(committed) == sorted(fresh), "generated file set differs: run gen_proto.sh"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"{stale} differ from the .proto files: run scripts/gen_proto.sh"


def test_generated_grpc_module_imports_the_package_copy() -> None:
    from disq.proto_gen import cluster_pb2_grpc

    assert cluster_pb2_grpc.disq_dot_v1_dot_cluster__pb2 is pb


# The core's class for each proto message type that is not itself a oneof member.
NESTED = {"Job": m.JobData, "Member": m.Member}


def _check_fields(descriptor: Descriptor, cls: type) -> None:
    proto_fields = {f.name: f for f in descriptor.fields}
    # Fields a record keeps only in the AOF (disq.core.messages.AOF_ONLY_FIELDS) never travel.
    local = m.AOF_ONLY_FIELDS.get(cls, ())
    class_fields = [f for f in m.FIELDS[cls] if f not in local]
    assert sorted(class_fields) == sorted(proto_fields), f"{descriptor.name} vs {cls.__name__}"
    for f in proto_fields.values():
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            nested = f.message_type
            assert nested.name in NESTED, f"{descriptor.name}.{f.name}: no core class"
            _check_fields(nested, NESTED[nested.name])


def test_proto_messages_match_the_core_classes() -> None:
    body = pb.Message.DESCRIPTOR.oneofs_by_name["body"]
    assert [f.name for f in body.fields] == [f.name for f in pb.Message.DESCRIPTOR.fields]
    assert sorted(f.name for f in body.fields) == sorted(
        [*ONEOF_CLASSES, *BATCH_FORMS, *RECORD_FORMS]
    )
    for f in body.fields:
        if f.name in BATCH_FORMS or f.name in RECORD_FORMS:
            continue
        cls = ONEOF_CLASSES[f.name]
        assert f.message_type.name == cls.__name__
        if cls is m.ReplJob or cls is m.YourJobs:
            # The core's classes hold the jobs' records; the proto's older forms, each job
            # field by field, as JobData reads it (YourJobs: the records, or those jobs).
            # Those forms are frozen: JobData reads every field of theirs, and may have more
            # (a field newer than the older builds travels only in the record).
            job_fields = {f.name for f in pb.Job.DESCRIPTOR.fields}
            assert job_fields <= set(m.FIELDS[m.JobData]) - set(m.AOF_ONLY_FIELDS[m.JobData])
            if cls is m.YourJobs:
                assert {x.name for x in f.message_type.fields} == {"jobs", "records"}
            continue
        _check_fields(f.message_type, cls)
    assert set(ONEOF_CLASSES.values()) == set(typing.get_args(m.Message))


def test_batch_forms_are_columns_of_their_single_message() -> None:
    # ReplJobs has one column per field of Job (plus the flattening counts), GotJobs one per
    # field of GotJob, and so on: a field added to Job without its column would not travel
    # in a batch.
    body = pb.Message.DESCRIPTOR.oneofs_by_name["body"]
    batch = {f.name: f.message_type for f in body.fields if f.name in BATCH_FORMS}
    assert set(batch) == set(BATCH_FORMS)
    singles = {
        "repl_jobs": pb.Job.DESCRIPTOR,
        "got_jobs": pb.GotJob.DESCRIPTOR,
        "set_acks": pb.SetAck.DESCRIPTOR,
        "got_acks": pb.GotAck.DESCRIPTOR,
    }
    for name, desc in batch.items():
        assert desc.name == BATCH_FORMS[name].__name__ + "s"
        columns = {f.name: f for f in desc.fields}
        for field_ in singles[name].fields:
            col = columns.pop(field_.name)
            assert col.is_repeated and col.type == field_.type, field_.name
        assert set(columns) <= {"nodes_delivered_count"}


def test_record_forms_carry_records_only() -> None:
    body = pb.Message.DESCRIPTOR.oneofs_by_name["body"]
    for f in body.fields:
        if f.name in RECORD_FORMS:
            [record] = f.message_type.fields
            assert record.is_repeated and record.type == FieldDescriptor.TYPE_BYTES


def test_member_states_match_the_proto_enum() -> None:
    values = {v.name: v.number for v in pb.MemberState.DESCRIPTOR.values}
    assert values == {
        "MEMBER_STATE_UNSPECIFIED": 0,
        "ALIVE": m.ALIVE,
        "SUSPECT": m.SUSPECT,
        "DEAD": m.DEAD,
        "LEFT": m.LEFT,
    }


def test_the_link_service_streams_frames_both_ways() -> None:
    link = pb.DESCRIPTOR.services_by_name["Cluster"].methods_by_name["Link"]
    assert link.input_type.name == link.output_type.name == "Frame"
    assert link.client_streaming and link.server_streaming
