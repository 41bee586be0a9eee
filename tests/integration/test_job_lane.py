"""The job lane (disq/server/job_lane.py) beside the gRPC links, over real sockets on 127.0.0.1.

Job messages take the lane once a link's handshake announced one; membership stays on the
stream; a node without a lane gets everything on the stream; a connection to the lane port
that does not know the token delivers nothing; a lane that breaks takes its link down, and
both come back.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from test_peer_link import A, B, C, Node, run, until

from disq.core.messages import GotJob, JobData, Ping, ReplJob
from disq.server import job_lane
from disq.server.job_lane import HELLO_SIZE, MAGIC, hello, parse_announcement


def _job(i: int) -> ReplJob:
    return ReplJob(JobData(f"D-{i:08x}-{i:024x}-0e10", "q", b"body", 3, i, 0, 300, 3600))


def test_job_messages_take_the_lane_and_membership_the_stream() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await a.connect(b)
        await b.connect(a)
        assert a.links.stats()["links_lane"] == 1 and b.links.stats()["links_lane"] == 1

        ping = Ping(7, [])
        a.links.send_many(B, [_job(1), ping, _job(2)])
        await b.wait_messages(A, 3)
        got = b.messages_from(A)
        # The two paths do not order against each other; each keeps its own order.
        assert [m for m in got if isinstance(m, ReplJob)] == [_job(1), _job(2)]
        assert [m for m in got if isinstance(m, Ping)] == [ping]
        sa, sb = a.links.stats(), b.links.stats()
        assert (sa["frames_sent"], sa["lane_frames_sent"]) == (2, 1)
        assert (sb["frames_received"], sb["lane_frames_received"]) == (2, 1)

        b.links.send(A, GotJob(_job(1).job.id))
        await a.wait_messages(B, 1)
        assert a.messages_from(B) == [GotJob(_job(1).job.id)]
        assert a.links.stats()["lane_frames_received"] == 1

    run(main)


def test_a_node_without_a_lane_gets_every_message_on_the_stream() -> None:
    async def main() -> None:
        a, c = await Node(A).start(), await Node(C, lane_port=None).start()
        await a.connect(c)
        await c.connect(a)
        assert a.links.stats()["links_lane"] == 0 and c.links.stats()["links_lane"] == 0

        a.links.send(C, _job(1))
        c.links.send(A, GotJob(_job(1).job.id))
        await c.wait_messages(A, 1)
        await a.wait_messages(C, 1)
        assert c.messages_from(A) == [_job(1)]
        assert a.messages_from(C) == [GotJob(_job(1).job.id)]
        assert a.links.stats()["lane_frames_sent"] == 0
        assert c.links.stats()["lane_frames_received"] == 0

    run(main)


def test_a_lane_connection_without_the_token_is_closed_and_delivers_nothing() -> None:
    async def main() -> None:
        a = await Node(A).start()
        port = a.links.lane_port
        assert port

        def intruder(hello_bytes: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                frame = b"\x00\x00\x00\x05hello"
                s.sendall(hello_bytes + frame)
                return s.recv(100)  # b"": the lane closed the connection

        wrong_token = hello(B, b"\x00" * 16)
        assert await asyncio.to_thread(intruder, wrong_token) == b""
        bad_magic = b"X" * len(MAGIC) + wrong_token[len(MAGIC) :]
        assert len(bad_magic) == HELLO_SIZE
        assert await asyncio.to_thread(intruder, bad_magic) == b""
        st = a.links.stats()
        assert (st["frames_received"], st["lane_frames_received"]) == (0, 0)
        assert a.received == []

    run(main)


def test_a_silent_connection_to_the_lane_port_is_closed_after_the_hello_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_lane, "HELLO_TIMEOUT_S", 0.2)

    async def main() -> None:
        a = await Node(A).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", a.links.lane_port)
        writer.write(MAGIC)  # a start of a hello, and then nothing
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the lane
        writer.close()
        assert a.received == []

    run(main)


def test_a_lane_frame_length_past_the_bound_ends_that_lane() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await b.connect(a)
        lane = b.links._peers[A].lane  # b's lane to a
        assert lane is not None and lane.transport is not None
        lane.transport.write(b"\xff\xff\xff\xff")  # a length no frame of ours has
        # a closes it; b's link sees its lane lost, goes down and comes back with a new one.
        assert await b.link_event() == (A, False)
        assert await b.link_event() == (A, True)
        await until(lambda: a.links.stats()["frames_dropped"] >= 1)
        b.links.send(A, _job(3))
        await a.wait_messages(B, 1)
        assert a.messages_from(B) == [_job(3)]
        assert b.links.stats()["links_lane"] == 1

    run(main)


def test_announcements_are_parsed_strictly() -> None:
    token = "ab" * 16
    assert parse_announcement(f"4242,{token}") == (4242, bytes.fromhex(token))
    for bad in (None, 4242, "", "4242", f"0,{token}", f"70000,{token}", "4242,abcd", "x,y"):
        assert parse_announcement(bad) is None
