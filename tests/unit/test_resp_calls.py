"""disq.integrations.resp_calls without a node: the commands it writes (ADDJOB, GETJOB), the
replies it reads, the errors it maps, the option that turns it on."""

from __future__ import annotations

import hiredis
import pytest

from disq.client import (
    AuthError,
    DisqError,
    InvalidArgumentError,
    LeavingError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
)
from disq.integrations.common import OptionError, settings
from disq.integrations.resp_calls import addjob_command, getjob_command, jobs_of, refusal


def parse(cmd: bytes) -> list[bytes]:
    reader = hiredis.Reader()
    reader.feed(cmd)
    out = reader.gets()
    assert isinstance(out, list)
    return out


def test_the_defaults_leave_every_option_to_the_node() -> None:
    assert parse(addjob_command("q", b"body")) == [b"ADDJOB", b"q", b"body", b"5000"]


def test_every_option_is_sent_as_the_grpc_request_sets_it() -> None:
    cmd = addjob_command(
        "q\x06\x163",
        "b\u00e9",
        replicate=2,
        repl_timeout_ms=1500,
        delay_s=4,
        retry_s=0,  # RETRY 0 is an option of its own (no requeue), not "the default"
        ttl_s=86404,
        maxlen=10,
        async_=True,
        idempotency_key="k1",
        headers={"traceparent": "00-ab-cd-01", "bin": b"\x00\r\n"},
    )
    assert parse(cmd) == [
        b"ADDJOB",
        b"q\x06\x163",
        "b\u00e9".encode(),
        b"1500",
        b"REPLICATE",
        b"2",
        b"DELAY",
        b"4",
        b"RETRY",
        b"0",
        b"TTL",
        b"86404",
        b"MAXLEN",
        b"10",
        b"ASYNC",
        b"IDEMPOTENCY-KEY",
        b"k1",
        b"HEADERS",
        b"2",
        b"traceparent",
        b"00-ab-cd-01",
        b"bin",
        b"\x00\r\n",
    ]


@pytest.mark.parametrize("headers", [["k", "v"], {1: "v"}, {"k": 1}])
def test_headers_of_the_wrong_type_are_refused_before_anything_is_sent(headers: object) -> None:
    with pytest.raises(TypeError, match="headers"):
        addjob_command("q", b"x", headers=headers)  # type: ignore[typeddict-item]


def test_a_body_with_crlf_and_binary_bytes_is_one_bulk_string() -> None:
    body = b"\r\n$3\r\n\x00\xff"
    assert parse(addjob_command("q", body))[2] == body


@pytest.mark.parametrize(
    "options", [{"ttl_s": -1}, {"replicate": "2"}, {"delay_s": 1.5}, {"repl_timeout_ms": -5}]
)
def test_a_bad_option_is_refused_before_anything_is_sent(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"non-negative integer|between 1 and 65535"):
        addjob_command("q", b"x", **options)  # type: ignore[arg-type]


def test_an_unknown_option_is_a_type_error_as_on_the_client() -> None:
    with pytest.raises(TypeError):
        addjob_command("q", b"x", replicas=2)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("line", "cls"),
    [
        ("NOREPL Timeout reached before replicating to the requested number of nodes", NoReplError),
        ("PAUSED Queue paused in input, try later", PausedError),
        ("OOM disk full", OutOfMemoryError),
        ("LEAVING This node is going to leave the cluster", LeavingError),
        ("NOAUTH Authentication required.", AuthError),
        ("WRONGPASS invalid username-password pair or user is disabled.", AuthError),
        ("ERR TTL must be a number > 0", InvalidArgumentError),
        ("WHATEVER something new", DisqError),
    ],
)
def test_a_refusal_is_the_sdks_class_of_its_code(line: str, cls: type[DisqError]) -> None:
    err = refusal(hiredis.ReplyError(line), "127.0.0.1:7710")
    assert type(err) is cls
    assert err.message == line  # the whole line, as the gRPC door's message
    assert err.node == "127.0.0.1:7710"


def test_publish_over_is_resp_by_default_and_grpc_on_request() -> None:
    assert settings(["h:1"], {}).over_resp
    assert not settings(["h:1"], {"publish_over": "grpc"}).over_resp
    assert settings(["h:1"], {"publish_over": "RESP"}).over_resp
    with pytest.raises(OptionError, match="publish_over"):
        settings(["h:1"], {"publish_over": "amqp"})


def test_a_tls_connection_never_publishes_over_plaintext_resp() -> None:
    assert not settings(["h:1"], {"tls": True}).over_resp
    assert not settings(["h:1"], {"tls_ca": "/ca.pem"}).over_resp
    assert settings(["h:1"], {"tls": False}).over_resp


def test_getjob_is_written_as_the_sdk_asks_it() -> None:
    assert parse(
        getjob_command(["q", "q\x06\x169"], count=4, timeout_s=1.5, nohang=False, in_order=True)
    ) == [
        b"GETJOB",
        b"TIMEOUT",
        b"1500",
        b"COUNT",
        b"4",
        b"WITHCOUNTERS",
        b"INORDER",
        b"FROM",
        b"q",
        b"q\x06\x169",
    ]
    assert parse(getjob_command(["q"], count=1, timeout_s=None, nohang=True, in_order=False)) == [
        b"GETJOB",
        b"NOHANG",
        b"COUNT",
        b"1",
        b"WITHCOUNTERS",
        b"FROM",
        b"q",
    ]
    # A wait under a millisecond is one, not "forever" (TIMEOUT 0 blocks until a job comes).
    assert b"TIMEOUT\r\n$1\r\n1\r\n" in getjob_command(
        ["q"], count=1, timeout_s=0.0001, nohang=False, in_order=False
    )


def test_getjob_replies_are_the_sdks_jobs() -> None:
    jid = "D-12345678-" + "a" * 24 + "-0e10"
    reply = [[b"q", jid.encode(), b"\x00body", b"nacks", 2, b"additional-deliveries", 1]]
    (job,) = jobs_of(reply)
    assert (job.id, job.queue, job.body, job.nacks, job.additional_deliveries) == (
        jid,
        "q",
        b"\x00body",
        2,
        1,
    )
    assert jobs_of(None) == []  # nothing came in time
    for bad in (b"OK", [[b"q", jid.encode(), b"body"]], [b"flat"]):
        with pytest.raises(hiredis.ProtocolError):
            jobs_of(bad)
