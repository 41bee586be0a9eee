"""The job lane (disq/server/job_lane.py) beside the gRPC links, over real sockets on 127.0.0.1.

Job messages take the lane once a link's handshake announced one; membership stays on the
stream; a node without a lane gets everything on the stream; a connection to the lane port
that does not know the token delivers nothing; a lane that breaks takes its link down, and
both come back.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import grpc
import pytest
from test_peer_link import A, B, C, Node, run, until

from disq.core.messages import GotJob, JobData, Ping, ReplJob
from disq.server import job_lane
from disq.server.job_lane import (
    HELLO_ACK,
    HELLO_SIZE,
    LANE_KEY,
    MAGIC,
    hello,
    parse_announcement,
)
from disq.server.peer_link import _LINK_METHOD as LINK_METHOD
from disq.server.peer_wire import WireCounters, encode_frame


def _job(i: int, body: bytes = b"body") -> ReplJob:
    return ReplJob.of(JobData(f"D-{i:08x}-{i:024x}-0e10", "q", body, 3, i, 0, 300, 3600))


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


# ------------------------------------------------------------------ issue 32: the lane's bounds
async def open_link(port: int) -> tuple[Any, Any, int, bytes]:
    """A Link stream to ``port``, as a peer opens one: (call, channel, lane port, the token
    its handshake announced)."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    call = channel.stream_stream(LINK_METHOD)()
    metadata = await asyncio.wait_for(call.initial_metadata(), 10)
    at = parse_announcement(metadata.get(LANE_KEY))
    assert at is not None
    return call, channel, at[0], at[1]


def framed(msgs: list[Any], seq: int = 1, sender: str = B) -> bytes:
    frame = encode_frame(sender, seq, msgs, WireCounters(), True)
    return len(frame).to_bytes(4, "big") + frame


def test_each_link_stream_gets_its_own_token_good_for_one_lane_and_dropped_with_it() -> None:
    async def main() -> None:
        a = await Node(A).start()
        calls: list[Any] = []
        channels: list[Any] = []
        writers: list[asyncio.StreamWriter] = []

        async def lane(hello_bytes: bytes) -> asyncio.StreamReader:
            r, w = await asyncio.open_connection("127.0.0.1", lane_port)
            writers.append(w)
            w.write(hello_bytes)
            return r

        try:
            call1, ch1, lane_port, t1 = await open_link(a.port)
            call2, ch2, _, t2 = await open_link(a.port)
            calls += [call1, call2]
            channels += [ch1, ch2]
            assert t1 != t2
            r1 = await lane(hello(B, t1) + framed([_job(1)]))
            assert await asyncio.wait_for(r1.readexactly(1), 5) == HELLO_ACK  # hello taken
            await a.wait_messages(B, 1)
            # One lane per token: a second connection with t1 is closed, delivering nothing.
            r = await lane(hello(C, t1) + framed([_job(2)], sender=C))
            assert await asyncio.wait_for(r.read(), 5) == b""
            # The stream ends: its lane is closed by the receiver, and its token is gone.
            call1.cancel()
            assert await asyncio.wait_for(r1.read(), 5) == b""
            r = await lane(hello(B, t1) + framed([_job(3)]))
            assert await asyncio.wait_for(r.read(), 5) == b""
            # So is t2's once its stream ends, before it was ever used.
            call2.cancel()
            await until(lambda: not a.links._lane.grants)  # type: ignore[union-attr]
            r = await lane(hello(B, t2) + framed([_job(4)]))
            assert await asyncio.wait_for(r.read(), 5) == b""
            assert a.messages_from(B) == [_job(1)] and a.messages_from(C) == []
            assert a.links.stats()["lane_pending_closed_refused"] == 3
        finally:
            for w in writers:
                w.close()
            # Each call's status before its channel closes: a completion that arrived after
            # this test's loop closed would land in the next test's loop.
            for call in calls:
                call.cancel()
                await asyncio.wait_for(call.code(), 5)
            for ch in channels:
                await ch.close()

    run(main)


def test_lane_sockets_keep_alive_on_both_ends() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await b.connect(a)
        lane = b.links._peers[A].lane
        assert lane is not None and lane.transport is not None
        [inbound] = a.links._lane.inbound  # type: ignore[union-attr]
        assert inbound.transport is not None
        for transport in (lane.transport, inbound.transport):
            sock = transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3

    run(main)


def test_the_bytes_all_inbound_lanes_buffer_are_bounded_together() -> None:
    async def main() -> None:
        a, b, c = await Node(A).start(), await Node(B).start(), await Node(C).start()
        assert a.links._lane is not None
        a.links._lane.max_buffered_bytes = 10_000
        await b.connect(a)
        await c.connect(a)
        half = (8000).to_bytes(4, "big") + b"x" * 6000  # the start of an 8000-byte frame
        for n in (b, c):
            lane = n.links._peers[A].lane
            assert lane is not None and lane.transport is not None
            lane.transport.write(half)
            if n is b:
                await until(lambda: a.links.stats()["lane_buffered_bytes"] == 6004)
        # c's half frame takes the sum past 10,000: its lane is closed (b's is kept), its
        # link goes down and comes back with a new one.
        assert await c.link_event() == (A, False)
        assert await c.link_event() == (A, True)
        st = a.links.stats()
        assert (st["lane_closed_buffer_full"], st["lane_buffered_bytes"]) == (1, 6004)
        assert b.link_events.empty() and b.links.stats()["links_lane"] == 1
        c.links.send(A, _job(5))
        await a.wait_messages(C, 1)

    run(main)


def test_the_sender_splits_frames_under_the_receivers_limit_and_refuses_a_bigger_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_lane, "MAX_FRAME_BYTES", 1 << 20)  # announced in a's handshake

    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await b.connect(a)
        big = [_job(i, b"y" * (600 << 10)) for i in (1, 2)]
        too_big = _job(3, b"z" * (2 << 20))
        b.links.send_many(A, [big[0], big[1], too_big, _job(4)])
        await a.wait_messages(B, 3)
        assert a.messages_from(B) == [big[0], big[1], _job(4)]
        st = b.links.stats()
        assert (st["messages_too_large"], st["lane_frames_sent"]) == (1, 2)
        # No link failure: the lane and its stream stayed up.
        assert b.link_events.empty() and st["links_lane"] == 1
        assert a.links.stats()["frames_dropped"] == 0

    run(main)


def test_connections_without_a_hello_are_capped_per_port_and_per_process() -> None:
    async def main() -> None:
        a, c = await Node(A).start(), await Node(C).start()
        for n in (a, c):
            assert n.links._lane is not None
            n.links._lane.max_pending, n.links._lane.max_pending_total = 3, 5
        opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

        def seen() -> int:  # connections the two lane ports accepted so far
            return sum(
                x.links.stats()["lane_pending"] + x.links.stats()["lane_pending_closed_cap"]
                for x in (a, c)
            )

        async def flood(n: Node, count: int) -> None:
            for _ in range(count):
                opened.append(await asyncio.open_connection("127.0.0.1", n.links.lane_port))
                await until(lambda: seen() == len(opened))  # one at a time: order is known

        # Four to a: at its cap of 3, the oldest is closed for the newest.
        await flood(a, 4)
        assert await asyncio.wait_for(opened[0][0].read(), 5) == b""
        assert (a.links.stats()["lane_pending"], a.links.stats()["lane_pending_closed_cap"]) == (
            3,
            1,
        )
        # Three to c: the process's cap of 5 leaves it 2; the third is refused itself.
        await flood(c, 3)
        assert await asyncio.wait_for(opened[6][0].read(), 5) == b""
        assert (c.links.stats()["lane_pending"], c.links.stats()["lane_pending_closed_cap"]) == (
            2,
            1,
        )
        for _r, w in opened:
            w.close()

    run(main)


def test_a_lane_closed_before_its_hello_was_taken_leaves_the_link_up_on_its_stream() -> None:
    """Refused or dropped unread (the port's cap under a flood): the sender's link stays up
    and carries the job messages itself, instead of going down and up."""

    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        assert a.links._lane is not None
        # a's lane port refuses b's hello: it takes B for its own id (a hello from itself is
        # refused), an attribute the compiled LaneServer lets a test set, unlike a method.
        a.links._lane.my_id = B
        b.links.set_address(A, "127.0.0.1", a.port)
        assert await b.link_event() == (A, True)
        await until(lambda: b.links.stats()["lanes_refused"] == 1)
        assert b.links.stats()["links_lane"] == 0
        b.links.send(A, _job(6))
        await a.wait_messages(B, 1)
        assert a.messages_from(B) == [_job(6)]
        assert b.link_events.empty() and b.links.is_up(A)

    run(main)
