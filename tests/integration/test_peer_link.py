"""PeerLinks over real gRPC on 127.0.0.1: two and three nodes in one process, plus a child
process for the deaths (SIGSTOP, kill -9) that cannot be staged in-process.

Every test runs its own event loop (uvloop, as the node does; the first test also on stock
asyncio) and fails if anything reached the loop's exception handler: a link must never leak
an exception, whatever its peer does. Waiting is on events (callbacks resolving futures), with
timeouts; the only polling is for drops, which have no event by design.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest
import uvloop

from disq.core.messages import GotJob, JobData, Message, Ping, ReplJob, Working
from disq.proto_gen import cluster_pb2 as pb
from disq.server.peer_link import PeerLinks
from disq.server.peer_wire import decode_frame, encode_frame

A = "a" * 40
B = "b" * 40
C = "c" * 40
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0


def run(main: Callable[[], Coroutine[Any, Any, None]], loop: str = "uvloop") -> None:
    """Run ``main`` on a fresh loop; fail on anything that reached the exception handler."""
    leaked: list[dict[str, Any]] = []
    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop

    async def wrapper() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: leaked.append(ctx))
        try:
            async with asyncio.timeout(TIMEOUT):
                await main()
        finally:
            # A failed test still stops its servers on their own loop (idempotent close).
            while _LIVE:
                await _LIVE.pop().close()

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(wrapper())
    assert not [ctx for ctx in leaked if not _another_loops_grpc_event(ctx)], leaked


def _another_loops_grpc_event(ctx: dict[str, Any]) -> bool:
    """grpc.aio's poller hands every loop of the process the events of all of them: an event
    of an earlier test's loop, closed since, raises "Event loop is closed" in this loop's
    reader. Not this test's doing (a node has one loop for its life), so not counted."""
    exc = ctx.get("exception")
    return (
        isinstance(exc, RuntimeError)
        and str(exc) == "Event loop is closed"
        and "PollerCompletionQueue._handle_events" in str(ctx.get("message", ""))
    )


_LIVE: list[PeerLinks] = []


class Node:
    """A PeerLinks plus what it received, with awaitable conditions."""

    def __init__(self, node_id: str, **kwargs: Any) -> None:
        self.id = node_id
        self.received: list[tuple[str, list[Message]]] = []
        self.link_events: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
        self._changed = asyncio.Condition()
        self.links = PeerLinks(
            node_id,
            self._on_messages,
            on_link_change=lambda peer, up: self.link_events.put_nowait((peer, up)),
            **kwargs,
        )
        _LIVE.append(self.links)
        self.port = 0

    def _on_messages(self, sender: str, msgs: list[Message]) -> None:
        self.received.append((sender, msgs))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def start(self) -> Node:
        self.port = await self.links.start()
        return self

    def messages_from(self, sender: str) -> list[Message]:
        return [msg for s, msgs in self.received if s == sender for msg in msgs]

    async def wait_messages(self, sender: str, count: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.messages_from(sender)) >= count)

    async def link_event(self, timeout: float = 10.0) -> tuple[str, bool]:
        async with asyncio.timeout(timeout):
            return await self.link_events.get()

    async def connect(self, other: Node) -> None:
        self.links.set_address(other.id, "127.0.0.1", other.port)
        assert await self.links.wait_link_up(other.id, timeout=10.0)
        assert await self.link_event() == (other.id, True)


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """For counters that have no event (drops are silent by design): poll, bounded."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


async def next_iterations(n: int = 2) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _job(i: int, body: bytes = b"x" * 100) -> ReplJob:
    return ReplJob.of(JobData(f"D-00000000-{i:024x}-0e10", "q", body, 2, i, 0, 300, 3600))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_two_nodes_exchange_messages_in_order(loop: str) -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await a.connect(b)
        await b.connect(a)
        sent_ab: list[Message] = []
        sent_ba: list[Message] = []
        for it in range(20):  # 20 iterations, so 20 frames each way, interleaved
            for i in range(50):
                msg_ab, msg_ba = GotJob(f"ab-{it}-{i}"), Working(f"ba-{it}-{i}")
                a.links.send(B, msg_ab)
                b.links.send(A, msg_ba)
                sent_ab.append(msg_ab)
                sent_ba.append(msg_ba)
            await asyncio.sleep(0)
        await b.wait_messages(A, len(sent_ab))
        await a.wait_messages(B, len(sent_ba))
        assert b.messages_from(A) == sent_ab
        assert a.messages_from(B) == sent_ba
        for n, other in ((a, b), (b, a)):
            st = n.links.stats()
            assert st["messages_sent"] == 1000 and st["frames_sent"] == 20
            assert st["messages_received"] == 1000 and st["frames_dropped"] == 0
            # Coalescing may merge queued frames on the wire, never split or lose them.
            assert 1 <= other.links.stats()["frames_received"] <= 20
        t0 = time.monotonic()
        await a.links.close()
        await b.links.close()
        assert time.monotonic() - t0 < 0.4, "close() must not sit out the server grace"

    run(main, loop)


def test_one_frame_per_iteration_per_peer() -> None:
    async def main() -> None:
        a, b, c = [await Node(x).start() for x in (A, B, C)]
        await a.connect(b)
        await a.connect(c)
        jobs = [_job(i) for i in range(1000)]
        for j in jobs:
            a.links.send(B, j)
            a.links.send(C, j)
        assert a.links.stats()["frames_sent"] == 0  # buffered until the flush
        await next_iterations()
        st = a.links.stats()
        assert (st["frames_sent"], st["messages_sent"]) == (2, 2000)  # one frame per peer
        await b.wait_messages(A, 1000)
        await c.wait_messages(A, 1000)
        assert b.received == [(A, jobs)] and c.received == [(A, jobs)]
        assert b.links.stats()["frames_received"] == 1
        for x in (a, b, c):
            await x.links.close()

    run(main)


def test_three_nodes_full_mesh() -> None:
    async def main() -> None:
        nodes = [await Node(x).start() for x in (A, B, C)]
        for n in nodes:
            for other in nodes:
                if other is not n:
                    await n.connect(other)
        for rnd in range(5):
            for n in nodes:
                for other in nodes:
                    if other is not n:
                        n.links.send(other.id, Ping(rnd))
            await asyncio.sleep(0)
        for n in nodes:
            for other in nodes:
                if other is not n:
                    await n.wait_messages(other.id, 5)
                    assert n.messages_from(other.id) == [Ping(r) for r in range(5)]
        assert [n.links.stats()["links_up"] for n in nodes] == [2, 2, 2]
        for n in nodes:
            await n.links.close()

    run(main)


def test_link_comes_back_after_the_peer_restarts_on_the_same_port() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await a.connect(b)
        a.links.send(B, GotJob("before"))
        await b.wait_messages(A, 1)

        await b.links.close()
        assert await a.link_event() == (B, False)
        assert not a.links.is_up(B)
        a.links.send(B, GotJob("while down"))  # dropped: the protocol above retries
        await next_iterations()
        assert a.links.stats()["frames_dropped"] == 1

        b2 = await Node(B, port=b.port).start()
        assert b2.port == b.port
        assert await a.link_event() == (B, True)  # reconnected by the backoff loop
        a.links.send(B, GotJob("after"))
        await b2.wait_messages(A, 1)
        assert b2.messages_from(A) == [GotJob("after")]
        await a.links.close()
        await b2.links.close()

    run(main)


def test_block_and_unblock_drop_and_restore_both_directions() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await a.connect(b)
        await b.connect(a)

        a.links.block({B})
        a.links.send(B, GotJob("a->b blocked"))
        a.links.flush()
        assert a.links.stats()["frames_blocked"] == 1  # outbound: dropped at the flush
        b.links.send(A, GotJob("b->a blocked"))
        await until(lambda: a.links.stats()["frames_blocked"] == 2)  # inbound: at receipt
        st = a.links.stats()
        assert (st["frames_dropped"], st["frames_sent"], st["frames_received"]) == (2, 0, 0)
        assert a.links.is_up(B) and b.links.is_up(A)  # silent: the streams stay up

        a.links.unblock_all()
        a.links.send(B, GotJob("a->b open"))
        b.links.send(A, GotJob("b->a open"))
        await b.wait_messages(A, 1)
        await a.wait_messages(B, 1)
        assert b.messages_from(A) == [GotJob("a->b open")]
        assert a.messages_from(B) == [GotJob("b->a open")]
        await a.links.close()
        await b.links.close()

    run(main)


def test_unknown_unreachable_and_silent_peers_never_raise_or_block() -> None:
    async def main() -> None:
        a = await Node(A, max_queued_frames=4).start()
        # A socket that accepts TCP and never speaks HTTP/2: the handshake hangs there.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        try:
            a.links.set_address(B, "127.0.0.1", _closed_port())  # refused
            a.links.set_address(C, "127.0.0.1", silent.getsockname()[1])
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for it in range(50):
                for i in range(100):
                    a.links.send(B, _job(i))
                    a.links.send(C, _job(i))
                    a.links.send("f" * 40, _job(i))  # no address at all
                a.links.send_to_address("127.0.0.1", _closed_port(), [Ping(it)])
                await asyncio.sleep(0)
            await next_iterations()
            assert loop.time() - t0 < 5.0  # nothing waited for a peer
            st = a.links.stats()
            assert st["frames_sent"] == 0
            # What a first dial holds (at most max_queued_frames per peer) is dropped when
            # the dial fails; the silent peer's dial runs until the handshake timeout.
            assert st["frames_held"] <= 2 * 4
            await until(
                lambda: (
                    a.links.stats()["frames_dropped"] + a.links.stats()["frames_held"] == 150 + 50
                )
            )
            assert not a.links.is_up(B) and not a.links.is_up(C)
            t0 = loop.time()
            await a.links.close()  # with a handshake still pending towards C
            assert loop.time() - t0 < 1.0
        finally:
            silent.close()

    run(main)


def test_send_to_address_teaches_the_receiver_our_id() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        # B knows nothing of A: A contacts it by address, as --join / CLUSTER MEET do.
        a.links.send_to_address("127.0.0.1", b.port, [Ping(1), Ping(2)])
        await b.wait_messages(A, 2)
        assert b.received == [(A, [Ping(1), Ping(2)])]
        await until(lambda: a.links.stats()["frames_sent"] == 1)
        # Frames from ourselves are ignored (a join aimed at our own address).
        a.links.send_to_address("127.0.0.1", a.port, [Ping(3)])
        await until(lambda: a.links.stats()["frames_sent"] == 2)  # the stream was served
        assert a.received == [] and a.links.stats()["frames_received"] == 0
        await a.links.close()
        await b.links.close()

    run(main)


def test_forget_closes_the_link_and_set_address_moves_it() -> None:
    async def main() -> None:
        a, b, b_new = await Node(A).start(), await Node(B).start(), await Node(B).start()
        await a.connect(b)
        a.links.forget(B)
        assert await a.link_event() == (B, False)
        a.links.send(B, GotJob("forgotten"))
        await next_iterations()
        assert a.links.stats()["frames_dropped"] == 1
        # Same id, new address (the node restarted elsewhere): the link follows.
        await a.connect(b_new)
        a.links.set_address(B, "127.0.0.1", b_new.port)  # unchanged: keeps the link
        assert a.links.is_up(B)
        a.links.send(B, GotJob("moved"))
        await b_new.wait_messages(A, 1)
        assert b.messages_from(A) == [] and b_new.messages_from(A) == [GotJob("moved")]
        for n in (a, b, b_new):
            await n.links.close()

    run(main)


def test_addresses_set_before_start_open_at_start() -> None:
    # The node restores its cluster view before its loop serves anything.
    b_links = PeerLinks(B, lambda s, m: None)
    b_links.set_address(A, "127.0.0.1", 1)  # no running loop needed
    # Held for the link's first dial (a restored node greets its peers this way), no loop
    # needed either; a one-shot before start is dropped, counted.
    b_links.send(A, GotJob("too early"))
    b_links.send_to_address("127.0.0.1", 1, [Ping(0)])
    assert b_links.stats()["frames_dropped"] == 1
    assert b_links.stats()["frames_held"] == 1

    async def main() -> None:
        a = await Node(A).start()
        b_links.set_address(A, "127.0.0.1", a.port)  # the real address, still before start
        # What was held for the old address is dropped with it; the new one holds afresh.
        assert b_links.stats()["frames_dropped"] == 2
        b_links.send(A, GotJob("held"))
        changes: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
        b_links.on_link_change = lambda peer, up: changes.put_nowait((peer, up))
        _LIVE.append(b_links)
        await b_links.start()
        async with asyncio.timeout(10):
            assert await changes.get() == (A, True)
        b_links.send(A, GotJob("now"))
        await a.wait_messages(B, 2)
        assert a.messages_from(B) == [GotJob("held"), GotJob("now")]
        assert b_links.stats()["frames_held"] == 0

    run(main)


def test_a_link_to_an_address_that_now_belongs_to_another_node_stays_down() -> None:
    async def main() -> None:
        a, c = await Node(A).start(), await Node(C).start()
        a.links.set_address(B, "127.0.0.1", c.port)  # stale: C listens there now
        assert not await a.links.wait_link_up(B, timeout=0.5)
        a.links.send(B, GotJob("for B only"))
        await next_iterations()
        assert a.links.stats()["frames_dropped"] == 1
        assert c.received == []
        await a.links.close()
        await c.links.close()

    run(main)


def test_a_failing_callback_or_a_malformed_frame_does_not_break_the_link() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        calls: list[list[Message]] = []

        def on_messages(sender: str, msgs: list[Message]) -> None:
            calls.append(msgs)
            if len(calls) == 1:
                raise RuntimeError("bug in a core")
            b._on_messages(sender, msgs)

        b.links.on_messages = on_messages
        await a.connect(b)
        a.links.send(B, GotJob("first"))
        await asyncio.sleep(0)
        a.links.send(B, GotJob("second"))
        await b.wait_messages(A, 1)
        assert b.messages_from(A) == [GotJob("second")]

        # Garbage on a raw stream costs that frame only; the stream goes on.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{b.port}") as channel:
            call = channel.stream_stream("/disq.v1.Cluster/Link")()
            await call.write(b"\xff\xff\xff")
            await call.write(encode_frame(C, 1, [Working("after garbage")]))
            await call.done_writing()
            assert await call.code() == grpc.StatusCode.OK
        assert b.messages_from(C) == [Working("after garbage")]
        assert b.links.stats()["frames_malformed"] == 1
        await a.links.close()
        await b.links.close()

    run(main)


class OldBuild:
    """A Link server as a build of another version answers it: the node id, and the wire
    features given (None: the header is absent, as from builds before batch forms). It keeps
    the raw frames, to see what actually crossed the wire."""

    def __init__(self, node_id: str, features: str | None) -> None:
        self.id = node_id
        self.features = features
        self.frames: list[bytes] = []
        self.arrived = asyncio.Event()
        self.port = 0
        self.server: Any = None

    async def start(self) -> OldBuild:
        async def link(request_iterator: Any, context: Any) -> Any:
            md = [("disq-node-id", self.id)]
            if self.features is not None:
                md.append(("disq-wire-features", self.features))
            await context.send_initial_metadata(md)
            async for raw in request_iterator:
                self.frames.append(raw)
                self.arrived.set()
            return
            yield  # an async generator: the server side never writes

        handler = grpc.method_handlers_generic_handler(
            "disq.v1.Cluster",
            {"Link": grpc.stream_stream_rpc_method_handler(link)},  # raw bytes both ways
        )
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    def kinds(self) -> list[str | None]:
        return [
            x.WhichOneof("body") for raw in self.frames for x in pb.Frame.FromString(raw).messages
        ]


@pytest.mark.parametrize(
    ("features", "columnar", "records"),
    [
        (None, False, False),
        ("", False, False),
        ("other", False, False),
        ("columnar", True, False),
        ("x,columnar,y", True, False),
        ("columnar,records", True, True),
    ],
)
def test_batch_forms_go_only_to_a_peer_whose_handshake_announced_them(
    features: str | None, columnar: bool, records: bool
) -> None:
    async def main() -> None:
        a = await Node(A).start()
        peer = await OldBuild(B, features).start()
        try:
            a.links.set_address(B, "127.0.0.1", peer.port)
            assert await a.links.wait_link_up(B, timeout=10.0)
            assert a.links.stats()["links_columnar"] == int(columnar)
            sent: list[Message] = [_job(i) for i in range(5)]
            sent += [GotJob(f"D-{i}") for i in range(3)]
            for msg in sent:
                a.links.send(B, msg)
            async with asyncio.timeout(10):
                await peer.arrived.wait()
            if records:  # the jobs' records, as this node's AOF and the peer's keep them
                assert peer.kinds() == ["job_records", "got_jobs"]
            elif columnar:
                assert peer.kinds() == ["repl_jobs", "got_jobs"]
            else:  # an older build reads one message per job, exactly as before
                assert peer.kinds() == ["repl_job"] * 5 + ["got_job"] * 3
            assert [msg for raw in peer.frames for msg in decode_frame(raw)[2]] == sent
        finally:
            await peer.server.stop(None)
            await a.links.close()

    run(main)


@pytest.mark.parametrize("features", ["columnar,records", "columnar,records,headers"])
def test_job_headers_go_only_to_a_peer_whose_handshake_announced_them(features: str) -> None:
    """A build before job headers refuses a record with them (job_record.py): it gets the
    record without them, the job otherwise whole."""
    headers = (("traceparent", b"00-ab-cd-01"),)

    async def main() -> None:
        a = await Node(A).start()
        peer = await OldBuild(B, features).start()
        try:
            a.links.set_address(B, "127.0.0.1", peer.port)
            assert await a.links.wait_link_up(B, timeout=10.0)
            data = JobData("D-00000000-" + "1" * 24 + "-0e10", "q", b"b", 2, 1, 0, 300, 3600)
            data.headers = headers
            a.links.send(B, ReplJob.of(data))
            async with asyncio.timeout(10):
                await peer.arrived.wait()
            [got] = [msg for raw in peer.frames for msg in decode_frame(raw)[2]]
            assert isinstance(got, ReplJob)
            assert got.job.headers == (headers if features.endswith("headers") else None)
            assert got.job.body == b"b" and got.job.id == data.id
        finally:
            await peer.server.stop(None)
            await a.links.close()

    run(main)


def test_nodes_of_this_build_use_batch_forms_both_ways() -> None:
    async def main() -> None:
        a, b = await Node(A).start(), await Node(B).start()
        await a.connect(b)
        await b.connect(a)
        assert a.links.stats()["links_columnar"] == b.links.stats()["links_columnar"] == 1
        jobs: list[Message] = [_job(i) for i in range(300)]
        for j in jobs:
            a.links.send(B, j)
            b.links.send(A, GotJob(j.job.id))  # type: ignore[attr-defined]
        await b.wait_messages(A, 300)
        await a.wait_messages(B, 300)
        assert b.messages_from(A) == jobs
        assert a.messages_from(B) == [GotJob(j.job.id) for j in jobs]  # type: ignore[attr-defined]
        await a.links.close()
        await b.links.close()

    run(main)


# ---------------------------------------------------------------- a peer in another process
CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from disq.core.messages import GotJob
    from disq.logging import configure_logging
    from disq.server.peer_link import PeerLinks

    async def main() -> None:
        configure_logging()  # logs to stderr: stdout carries the port
        links = PeerLinks("b" * 40, lambda sender, msgs: None, port=int(sys.argv[1]))
        port = await links.start()
        sys.stdout.write(f"{port}\\n")
        sys.stdout.flush()
        if len(sys.argv) > 2:  # also stream GotJobs to node A at that port, forever
            links.set_address("a" * 40, "127.0.0.1", int(sys.argv[2]))
            await links.wait_link_up("a" * 40, 10)
            i = 0
            while True:
                links.send("a" * 40, GotJob(str(i)))
                i += 1
                await asyncio.sleep(0.001)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


class Remote(Node):
    """Address book entry for node B living in a child process (kill -9 and SIGSTOP need one)."""

    def __init__(self, port: int = 0) -> None:  # deliberately no PeerLinks of its own
        self.id = B
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None

    async def spawn(self, send_to: int | None = None) -> Remote:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            str(self.port),
            *([] if send_to is None else [str(send_to)]),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        port = int(await asyncio.wait_for(self.proc.stdout.readline(), 15))
        assert self.port in (0, port)
        self.port = port
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def reap(self) -> None:
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.kill()
            await self.proc.wait()


def test_a_stopped_then_killed_peer_fills_the_queue_then_drops_the_link() -> None:
    async def main() -> None:
        a = await Node(A, max_queued_frames=4).start()
        b = await Remote().spawn()
        try:
            await a.connect(b)
            b.signal(signal.SIGSTOP)
            # 1 MiB frames into a stopped reader: HTTP/2 flow control stalls the writer,
            # the queue reaches its bound, and later frames are dropped, not buffered.
            body = b"z" * (1 << 20)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i in range(64):
                a.links.send(B, _job(i, body))
                await asyncio.sleep(0)
            await next_iterations()
            assert loop.time() - t0 < 5.0
            st = a.links.stats()
            assert st["frames_dropped"] > 0, st
            assert st["frames_sent"] + st["frames_dropped"] == 64
            assert a.links.is_up(B)  # stopped is not dead (keepalive would tell, later)

            b.signal(signal.SIGKILL)
            await b.reap()
            assert await a.link_event() == (B, False)
            assert not a.links.is_up(B)
        finally:
            await b.reap()
        await a.links.close()

    run(main)


def test_a_peer_killed_mid_stream_is_only_a_link_down() -> None:
    async def main() -> None:
        a = await Node(A).start()
        b = await Remote().spawn()
        try:
            await a.connect(b)
            for i in range(20):
                for j in range(200):
                    a.links.send(B, _job(i * 200 + j))
                await asyncio.sleep(0)
                if i == 10:
                    b.signal(signal.SIGKILL)  # kill -9 while frames are flowing
            await b.reap()
            assert await a.link_event() == (B, False)
            # A keeps retrying quietly, and the link is up again once B is back.
            await b.spawn()
            assert await a.link_event() == (B, True)
        finally:
            await b.reap()
        await a.links.close()

    run(main)


def test_a_client_killed_mid_stream_leaves_the_server_serving() -> None:
    async def main() -> None:
        a = await Node(A).start()
        b = Remote()
        try:
            await b.spawn(send_to=a.port)
            await a.wait_messages(B, 20)
            b.signal(signal.SIGKILL)  # kill -9 of a sender: our inbound stream just ends
            await b.reap()
            seen = len(a.messages_from(B))
            b.port = 0
            await b.spawn(send_to=a.port)
            await a.wait_messages(B, seen + 20)
            # The new process counts from 0 again, and its frames arrive in its order (after,
            # maybe, the last bytes of the dead one that were already in our socket).
            fresh = a.messages_from(B)[seen:]
            start = fresh.index(GotJob("0"))
            assert fresh[start : start + 5] == [GotJob(str(i)) for i in range(5)]
        finally:
            await b.reap()
        await a.links.close()

    run(main)


def test_port_clash_is_an_error() -> None:
    async def main() -> None:
        a = await Node(A).start()
        clash = PeerLinks(B, lambda s, m: None, port=a.port)
        _LIVE.append(clash)
        with pytest.raises(OSError):
            await clash.start()
        await a.links.close()

    run(main)
