"""Job headers: ADDJOB's HEADERS, GETJOB's WITHHEADERS and SHOW on the RESP door over a real
core, and the record that carries them (job_record.py) to peers, federation and the AOF."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from test_disque_commands import FakeNode, add, cmd, err, make_door, route

from disq.core.disque.api import AddOptions, DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.disque.job import DJob, deserialize, serialize
from disq.core.job_record import (
    HEADER_KEY_MAX_BYTES,
    HEADERS_MAX,
    HEADERS_MAX_BYTES,
    JobRecordError,
    decode_trailer,
    without_headers,
)
from disq.core.messages import JobData, data_of, record_of
from disq.doors.resp_door import RespDoor
from disq.protocol import resp
from disq.testing.mesh import Mesh

TRACE = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEADERS = (("traceparent", TRACE), ("tenant", b"acme"), ("bin", b"\x00\xff\r\n"))


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def door(node: FakeNode) -> RespDoor:
    return make_door(node, itertools.count(1))


def _flat(headers: tuple[tuple[str, bytes], ...]) -> list[bytes]:
    return [x for k, v in headers for x in (k.encode(), v)]


def _add_with_headers(door: RespDoor, body: bytes = b"b") -> bytes:
    return add(door, "q", body, "HEADERS", len(HEADERS), *_flat(HEADERS))


# ------------------------------------------------------------------ the RESP grammar
def test_addjob_headers_are_kept_in_order_and_getjob_withheaders_gives_them_last(
    door: RespDoor, node: FakeNode
) -> None:
    job_id = _add_with_headers(door, b"hi")
    assert node.disque.jobs[job_id.decode()].headers == HEADERS
    plain = add(door, "q", b"plain", "HEADERS", 0)  # a count of 0: no headers
    assert node.disque.jobs[plain.decode()].headers is None
    assert door.feed(cmd("GETJOB", "COUNT", 2, "WITHHEADERS", "FROM", "q")) == resp.encode(
        [[b"q", job_id, b"hi", _flat(HEADERS)], [b"q", plain, b"plain", []]]
    )


def test_withheaders_comes_after_withcounters_fields(door: RespDoor) -> None:
    job_id = add(door, "q", b"hi", "TTL", 60, "HEADERS", 1, "tenant", "acme", "RETRY", 5)
    reply = door.feed(cmd("GETJOB", "WITHHEADERS", "WITHCOUNTERS", "FROM", "q"))
    assert reply == resp.encode(
        [[b"q", job_id, b"hi", b"nacks", 0, b"additional-deliveries", 0, [b"tenant", b"acme"]]]
    )


def test_getjob_without_withheaders_is_disques_shape(door: RespDoor) -> None:
    job_id = _add_with_headers(door, b"hi")
    assert door.feed(cmd("GETJOB", "FROM", "q")) == resp.encode([[b"q", job_id, b"hi"]])


def test_a_blocked_getjob_keeps_withheaders(node: FakeNode) -> None:
    tokens = itertools.count(1)
    consumer, producer = make_door(node, tokens), make_door(node, tokens)
    assert consumer.feed(cmd("GETJOB", "WITHHEADERS", "FROM", "q")) == b""
    job_id = add(producer, "q", b"x", "HEADERS", 1, "k", "v")
    assert route(node, consumer) == {0: resp.encode([[b"q", job_id, b"x", [b"k", b"v"]]])}


def test_resp3_getjob_and_show_carry_the_headers(node: FakeNode) -> None:
    d = make_door(node, itertools.count(1))
    assert d.feed(cmd("HELLO", 3)).startswith(b"%7\r\n")
    job_id = add(d, "q", b"x", "HEADERS", 1, "k", "v")
    # The job's entry stays an array in RESP3 (Disque's shape), the headers an array in it.
    assert d.feed(cmd("GETJOB", "WITHHEADERS", "FROM", "q")) == (
        b"*1\r\n*4\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$1\r\nx\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n"
    )
    show = d.feed(cmd("SHOW", job_id))
    assert show.startswith(b"%16\r\n")  # a map: Disque's 15 fields and the headers
    assert show.endswith(b"$7\r\nheaders\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n")


def test_show_lists_headers_only_for_a_job_that_has_them(door: RespDoor) -> None:
    with_h = _add_with_headers(door)
    without = add(door)
    shown = door.feed(cmd("SHOW", with_h))
    assert shown.startswith(b"*32\r\n")  # Disque's 15 pairs, then the headers pair
    assert shown.endswith(b"$7\r\nheaders\r\n" + resp.encode(_flat(HEADERS)))
    shown = door.feed(cmd("SHOW", without))
    assert shown.startswith(b"*30\r\n") and b"headers" not in shown


@pytest.mark.parametrize(
    ("opts", "error"),
    [
        (("HEADERS",), "ERR syntax error"),
        (("HEADERS", "x", "k", "v"), f"ERR HEADERS count must be between 0 and {HEADERS_MAX}"),
        (("HEADERS", -1), f"ERR HEADERS count must be between 0 and {HEADERS_MAX}"),
        (("HEADERS", HEADERS_MAX + 1), f"ERR HEADERS count must be between 0 and {HEADERS_MAX}"),
        (("HEADERS", 2, "k", "v"), "ERR HEADERS needs 2 key/value pairs"),
        (("HEADERS", 1, "k"), "ERR HEADERS needs 1 key/value pairs"),  # odd: a key alone
        (("HEADERS", 1, "k", "v", "orphan"), "ERR syntax error"),  # one too many
        (("HEADERS", 1, "", "v"), f"ERR HEADERS key must have 1 to {HEADER_KEY_MAX_BYTES} bytes"),
        (
            ("HEADERS", 1, "k" * (HEADER_KEY_MAX_BYTES + 1), "v"),
            f"ERR HEADERS key must have 1 to {HEADER_KEY_MAX_BYTES} bytes",
        ),
        (("HEADERS", 1, b"\xff", "v"), "ERR HEADERS key is not valid UTF-8"),
        (("HEADERS", 2, "k", "v", "k", "w"), "ERR HEADERS key given twice"),
        (
            ("HEADERS", 1, "k", "v" * HEADERS_MAX_BYTES),
            f"ERR HEADERS keys and values exceed {HEADERS_MAX_BYTES} bytes",
        ),
    ],
)
def test_bad_headers_are_refused_change_nothing_and_the_connection_serves(
    door: RespDoor, node: FakeNode, opts: tuple[str | int | bytes, ...], error: str
) -> None:
    assert door.feed(cmd("ADDJOB", "q", "b", 0, *opts) + cmd("PING")) == err(error) + b"+PONG\r\n"
    assert node.disque.jobs == {}


def test_the_bounds_themselves_are_taken(door: RespDoor, node: FakeNode) -> None:
    many = [x for i in range(HEADERS_MAX) for x in (f"k{i}", "v")]
    job_id = add(door, "q", b"b", "HEADERS", HEADERS_MAX, *many)
    assert len(node.disque.jobs[job_id.decode()].headers or ()) == HEADERS_MAX
    big = "v" * (HEADERS_MAX_BYTES - HEADER_KEY_MAX_BYTES)
    add(door, "q", b"b", "HEADERS", 1, "k" * HEADER_KEY_MAX_BYTES, big)


def test_headers_count_in_the_memory_estimate(door: RespDoor, node: FakeNode) -> None:
    before = node.disque.memory.used_bytes
    plain = add(door)
    one = node.disque.memory.used_bytes - before
    add(door, "q", b"body", "HEADERS", 1, "k", "v" * 10_000)
    assert node.disque.memory.used_bytes - before - one > 10_000
    door.feed(cmd("ACKJOB", plain))  # REPLICATE 1: gone at once
    j = next(iter(node.disque.jobs.values()))
    assert node.disque.memory.used_bytes - before == j.mem_bytes()


def test_the_core_refuses_headers_from_any_door() -> None:
    core = DisqueCore(FakeNode().view, random.Random(1), 0)
    with pytest.raises(DisqueError, match="HEADERS key given twice"):
        core.add_job(0, 1, "q", b"b", AddOptions(headers=(("k", b"1"), ("k", b"2"))))
    assert core.jobs == {}


# ------------------------------------------------------------------ the record
def _data(**kw: object) -> JobData:
    d = JobData("D-" + "1" * 38, "q", b"body", 2, 17, 0, 60, 600, nodes_delivered=["a" * 40])
    for k, v in kw.items():
        setattr(d, k, v)
    return d


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"headers": HEADERS},
        {"idempotency_key": "order-42", "headers": HEADERS},
        {"idempotency_key": "order-42"},
        {"headers": (("k", b""),)},  # an empty value is a value
    ],
)
def test_the_record_round_trips_with_and_without_headers(kw: dict[str, object]) -> None:
    d = _data(**kw)
    record = record_of(d)
    assert data_of(record) == d
    j = deserialize(record, 0, len(record), 1_000, {}, b"")
    assert j.headers == d.headers and j.idem_key == d.idempotency_key
    assert serialize(j, 600_000, 0) == record


def test_a_record_of_an_older_build_reads_as_before() -> None:
    # Written before headers existed: the key trailer alone, or nothing after the body.
    for key in ("", "order-42"):
        old = record_of(_data(idempotency_key=key))
        assert data_of(old).headers is None and data_of(old).idempotency_key == key
        assert deserialize(old, 0, len(old), 1, {}, b"").headers is None


def test_a_build_without_headers_gets_the_record_without_them() -> None:
    for key in ("", "order-42"):
        full = record_of(_data(idempotency_key=key, headers=HEADERS))
        assert without_headers(full) == record_of(_data(idempotency_key=key))
    plain = record_of(_data())
    assert without_headers(plain) is plain


@pytest.mark.parametrize(
    "trailer",
    [
        b"H",
        b"H\x01\x00",
        b"H\x01\x00\x01\x00k",
        b"H\x01\x00\x01\x00k\x05\x00v",
        b"X",
        b"H\x00\x00x",
    ],
)
def test_headers_that_do_not_add_up_refuse_the_record(trailer: bytes) -> None:
    with pytest.raises(JobRecordError):
        decode_trailer(trailer)


def test_a_djob_without_headers_costs_what_it_did() -> None:
    j = DJob("D-x", "q", b"b", 1, 1, 0, 60, 1000)
    assert j._rare is None and j.headers is None
    j.delay_s = 5  # a rare field: the plain DJobRare, not the one with headers' slots
    assert type(j._rare).__name__ == "DJobRare"
    j.headers = HEADERS
    assert j.headers == HEADERS and j.delay_s == 5  # what the plain one held is kept


def _rare_slots() -> list[str]:
    """DJobRare's __slots__ read from its source: compiled (mypyc), the class has none."""
    import ast
    import inspect

    from disq.core.disque import job as job_module

    source = Path(inspect.getfile(job_module)).parent / "job.py"  # not the compiled .so
    tree = ast.parse(source.read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DJobRare"]
    [slots] = [
        n.value
        for n in cls.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__slots__"
    ]
    assert isinstance(slots, ast.Tuple)
    return [ast.literal_eval(e) for e in slots.elts]


def test_every_rare_field_survives_the_move_to_the_headers_part() -> None:
    # A slot added to DJobRare must be copied by DJob.headers' setter too.
    j = DJob("D-x", "q", b"b", 1, 1, 0, 60, 1000)
    values = {name: (f"v-{name}" if name == "idem_key" else 7) for name in _rare_slots()}
    for name, v in values.items():
        setattr(j, name, v)
    j.headers = HEADERS
    assert {name: getattr(j, name) for name in values} == values


# ------------------------------------------------------------------ copies, federation, AOF
def _mesh_add(m: Mesh, i: int, repl: int) -> str:
    opts = AddOptions(timeout_ms=5000, repl=repl, retry_s=30, ttl_s=600, headers=HEADERS)
    job_id = m.disque(i).add_job(m.now, 1, "q", b"body", opts)
    m.pump()
    if not isinstance(job_id, str):  # a sync add: answered once its copies exist
        job_id = m.replies[m.ids[i]][-1][1]
    assert isinstance(job_id, str)
    return job_id


def test_every_copy_on_a_peer_keeps_the_headers() -> None:
    m = Mesh(3)
    job_id = _mesh_add(m, 0, 3)
    assert [m.disque(i).jobs[job_id].headers for i in range(3)] == [HEADERS] * 3


def test_an_aof_restart_keeps_the_headers() -> None:
    m = Mesh(3)
    job_id = _mesh_add(m, 0, 3)
    for i in (0, 1):
        fresh = m.restart_disque(i, b"".join(m.aof[m.ids[i]]), seed=5)
        assert fresh.jobs[job_id].headers == HEADERS
        assert fresh.memory.used_bytes == fresh.jobs[job_id].mem_bytes()


def test_a_job_taken_by_federation_keeps_the_headers() -> None:
    m = Mesh(3)
    job_id = _mesh_add(m, 1, 1)
    assert m.disque(0).get_job(m.now, 9, ["q"], timeout_ms=0) is not None
    m.advance(3000)
    served = [r for t, r in m.replies[m.ids[0]] if t == 9]
    assert served and isinstance(served[0], list)
    assert served[0][0].id == job_id and served[0][0].headers == HEADERS


# ------------------------------------------------------------------ toward peers of older builds
@pytest.mark.parametrize("columnar", [False, True])
def test_a_peer_without_the_headers_feature_gets_the_job_without_them(columnar: bool) -> None:
    from disq.core.messages import ReplJob, YourJobs
    from disq.server.peer_wire import decode_frame, encode_frame

    plain_record = record_of(_data(idempotency_key="k"))
    msgs = [ReplJob(record_of(_data(idempotency_key="k", headers=HEADERS))) for _ in range(2)]
    msgs += [YourJobs([msgs[0].record])]
    # A build that reads records but announced no headers: they are cut, the rest kept.
    _, _, older = decode_frame(
        encode_frame("n", 1, msgs, columnar=columnar, records=True, headers=False)
    )
    assert [x.job.headers for x in older[:2]] == [None, None]
    assert isinstance(older[2], YourJobs) and older[2].records == [plain_record]
    if columnar:
        assert [x.record for x in older[:2]] == [plain_record] * 2
    # A build of the oldest forms (pb Job, ReplJobs' columns) never gets them.
    _, _, oldest = decode_frame(encode_frame("n", 1, msgs, columnar=columnar))
    assert [x.job.headers for x in oldest[:2]] == [None, None]
    assert oldest[2].jobs[0].headers is None  # type: ignore[union-attr]
    # A build with headers gets them, record for record (REPLJOBs travel as records only on
    # a columnar link: a build announces records with columnar).
    _, _, same = decode_frame(encode_frame("n", 1, msgs, columnar=columnar, records=True))
    assert [x.job.headers for x in same[:2]] == [HEADERS if columnar else None] * 2
    assert same[2].records == [msgs[0].record]  # type: ignore[union-attr]
