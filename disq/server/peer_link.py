"""Node-to-node links over gRPC (service ``disq.v1.Cluster``, rpc ``Link``; design.md section 4).

One gRPC message costs 0.15-0.7 ms in Python, so messages are never sent one per RPC: every
``send`` of one event-loop iteration is buffered, and a single ``loop.call_soon`` flush turns
them into ONE Frame per peer, written on a long-lived stream.

Streams, one direction each
    Each node sends only on the stream it opened itself (its outbound client call to the peer's
    server) and receives only on the streams other nodes opened to its server. So a pair of
    nodes has two streams, each carrying one direction; the server never writes a frame. This
    departs from the "one link per pair" note in cluster.proto on purpose: with one-way streams
    there is no race over which of two simultaneously opened links survives, a link's lifetime
    is owned by its sender alone, and reconnecting one side never disturbs the other's traffic.
    The receiver learns who is talking from ``Frame.from_node``, which is also how a node that
    was contacted by address (``--join``, ``CLUSTER MEET``) learns the id of the contacting node.

Never block, never grow
    Frames to a peer whose link is not up, or whose queue already holds ``max_queued_frames``,
    are dropped and counted: the protocols above (replication, acks, gossip) retry on their own
    timers, so a drop costs a retry, whereas blocking would stall the whole node and an
    unbounded queue would eat its memory while a peer is down.

Handshake
    A link is "up" once the peer's handler has answered the call with its initial metadata,
    i.e. a live disq server accepted the stream (not merely a TCP connection). That metadata
    carries the server's node id, and a link whose address now answers with another id is
    refused: after restarts on ephemeral ports an address can change hands, and frames meant
    for one node must not be taken by another. Until a link is up its frames are dropped, as
    above. The metadata also lists the wire features the server's build reads
    (``disq-wire-features``, comma-separated): ``columnar``, the batch forms ReplJobs,
    GotJobs, SetAcks and GotAcks, ``records``, JobRecords (a REPLJOB as the job's
    record, disq/core/job_record.py, which the receiver's AOF keeps as it is), and
    ``headers``, records with a job's headers (a build without it gets them cut). The sender
    uses a feature on a connection only if that connection's handshake announced it, so in
    a rolling restart a node of an older build keeps getting the forms it reads (one message
    per job from a build that announces nothing), and a peer restarted
    into another build is asked again when its link reconnects. A failed or broken link is
    retried with capped exponential backoff (50 ms doubling to 1 s; reset once a link came
    up) for as long as the peer's address is set.

Job lanes
    A stream whose handshake announced a job lane (job_lane.py) carries only membership
    messages: job messages go on the lane, a plain TCP connection whose round trip costs a
    fifth of the stream's. The lane opens right after the handshake and lives inside the
    stream; without one (``lane_port`` None here, an older build there, a lane that cannot
    be opened, or one closed before the peer acknowledged its hello) the stream carries
    everything, as before. Frames are cut under the peer's announced limit (frame_bound.py).

Coalescing
    When the peer's writer falls behind, the frames waiting in its queue are written as one
    gRPC message: concatenated serialized protobuf messages parse as their merge, so the
    receiver sees one Frame whose messages are all of theirs in order (``seq`` is the last
    one's). This keeps the per-message gRPC cost off the hot path exactly when it matters.

``frames_sent``/``messages_sent`` count what was handed to a live link at flush time;
``frames_dropped`` counts every frame discarded: at flush (link down, queue full, unknown or
blocked peer, sender stopped) and the ones still queued or in flight when a link broke.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from disq.core.messages import MEMBERSHIP_TYPES, Message
from disq.logging import get_logger
from disq.proto_gen import cluster_pb2
from disq.server.frame_bound import STREAM_MAX_FRAME_BYTES, encode_within
from disq.server.job_lane import (
    LANE_KEY,
    LANE_MAX_FRAME_KEY,
    LaneServer,
    OutboundLane,
    open_lane,
    parse_announcement,
    parse_max_frame,
)
from disq.server.listen_error import ListenError, reason_of
from disq.server.peer_conn import (
    BACKOFF_MAX_S,
    BACKOFF_MIN_S,
    CLOSE_GRACE_S,
    COALESCE_MAX_BYTES,
    HANDSHAKE_TIMEOUT_S,
    MAX_ONESHOTS,
    ONESHOT_TIMEOUT_S,
    SERVER_OPTIONS,
    OutboundPeer,
    close_channel,
    describe_error,
    make_channel,
    target_of,
)
from disq.server.peer_wire import FrameDecodeError, WireCounters, decode_frame, encode_frame

# disq.tls (with tempfile, shutil, bz2, lzma: 3-4 ms of a start) is imported by disq-node
# only when TLS is configured; the links only read the TlsConfig they are given.
if TYPE_CHECKING:
    from disq.tls import TlsConfig

__all__ = ["WIRE_COLUMNAR", "WIRE_FEATURES", "WIRE_RECORDS", "PeerLinks"]

_LINK_METHOD = "/{}/{}".format(
    cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].full_name,
    cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].methods_by_name["Link"].name,
)
_SERVICE = cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].full_name
_NODE_ID_KEY = "disq-node-id"  # initial metadata of the server side: who accepted the link
_FEATURES_KEY = "disq-wire-features"  # ... and which wire features its build reads
WIRE_COLUMNAR = "columnar"  # ReplJobs, GotJobs, SetAcks, GotAcks (peer_wire.py)
WIRE_RECORDS = "records"  # JobRecords (peer_wire.py)
WIRE_HEADERS = "headers"  # records with a headers section (job_record.py)
WIRE_FEATURES = (WIRE_COLUMNAR, WIRE_RECORDS, WIRE_HEADERS)


class PeerLinks:
    """The gRPC server for inbound streams plus one outbound stream per known peer.

    Addresses may be set before ``start()`` (e.g. from a saved cluster view): the links open
    when it runs. Everything else must be called on the event loop that ran ``start()``;
    ``send`` before it is held for the link's first dial (``send_to_address`` is dropped,
    counted). ``on_messages`` is called on
    that loop, once per received frame, in order per link.
    """

    def __init__(
        self,
        my_id: str,
        on_messages: Callable[[str, list[Message]], None],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_queued_frames: int = 1024,
        on_link_change: Callable[[str, bool], None] | None = None,
        tls: TlsConfig | None = None,
        lane_port: int | None = 0,
    ) -> None:
        self.my_id = my_id
        # TLS on the port (disq.tls): the server's certificate, and the one this node presents
        # on its outbound links, verifying the peer's against the CA. None: plaintext.
        self.tls = tls
        self.on_messages = on_messages
        # Called with (peer id, up) when an outbound link comes up or goes down: a hint for
        # failure detection, and what tests await instead of polling.
        self.on_link_change = on_link_change
        self.host = host
        self.port = port
        # The job lane's port (0: ephemeral; None: no lane, every message on the streams).
        self.lane_port = lane_port
        self._lane: LaneServer | None = None
        self._lane_ssl: Any = None  # (server context, client context) with TLS
        self.max_queued_frames = max(1, max_queued_frames)
        self._log = get_logger("disq.peer_link").bind(node=my_id[:8])
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self._peers: dict[str, OutboundPeer] = {}
        self._pending: dict[str, list[Message]] = {}
        self._flush_scheduled = False
        self._blocked: frozenset[str] = frozenset()
        self._inbound: set[asyncio.Task[Any]] = set()
        self._oneshots: set[asyncio.Task[None]] = set()
        self._oneshot_seq = 0
        self._closed = False
        self._wire = WireCounters()
        self._frames_sent = 0
        self._frames_received = 0
        self._messages_sent = 0
        self._messages_received = 0
        self._frames_dropped = 0
        self._frames_blocked = 0
        self._lane_frames_sent = 0  # of frames_sent, those on a job lane
        self._lane_frames_received = 0
        self._messages_too_large = 0  # refused, over their path's frame limit alone
        self._lanes_refused = 0  # outbound lanes closed before the peer took the hello
        # Called with the grpc.aio server before it starts: other services on the same port
        # (the client API, health, reflection).
        self.add_services: list[Callable[[Any], None]] = []

    # ----------------------------------------------------------------------------- lifecycle
    async def start(self) -> int:
        """Bind ``host:port`` (0 = ephemeral) and serve; returns the bound port."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        handler = grpc.method_handlers_generic_handler(
            _SERVICE,
            {
                # No (de)serializers: frames stay bytes, so the codec decides what a malformed
                # frame costs (one dropped frame) instead of gRPC failing the whole stream.
                "Link": grpc.stream_stream_rpc_method_handler(self._serve_link),
            },
        )
        server.add_generic_rpc_handlers((handler,))
        for add in self.add_services:
            add(server)
        if self.lane_port is not None:
            # Before the streams are served: their handshake announces the lane's port.
            await self._start_lane(self.lane_port)
        try:
            target = target_of(self.host, self.port)
            if self.tls is not None:
                port = server.add_secure_port(target, self.tls.server_credentials())
            else:
                port = server.add_insecure_port(target)
        except RuntimeError as exc:  # grpc reports a failed bind this way, without errno
            await server.stop(None)  # else its finaliser runs on a loop that may be gone
            if self._lane is not None:
                await self._lane.close()
            raise ListenError(
                "gRPC", self.host, self.port, "in use, or not an address of this host"
            ) from exc
        await server.start()
        self._server = server
        self._loop = asyncio.get_running_loop()
        self.port = port
        self._log.info(
            "peer_links_listening",
            host=self.host,
            port=port,
            tls=self.tls is not None,
            client_auth=self.tls is not None and self.tls.client_auth,
            job_lane_port=self._lane.port if self._lane is not None else None,
        )
        for peer in self._peers.values():  # addresses set before start
            self._spawn(peer)
        return int(port)

    async def _start_lane(self, port: int) -> None:
        if self.tls is not None:
            self._lane_ssl = self.tls.ssl_contexts()
        lane = LaneServer(self.my_id, self)
        try:
            await lane.start(self.host, port, self._lane_ssl[0] if self._lane_ssl else None)
        except OSError as exc:
            raise ListenError("job lane", self.host, port, reason_of(exc)) from exc
        self._lane = lane
        self.lane_port = lane.port

    async def close(self) -> None:
        """Stop every stream and the server. Queued frames are dropped."""
        if self._closed:
            return
        self._closed = True
        tasks: list[asyncio.Task[Any]] = []
        for peer in self._peers.values():
            if peer.task is not None:
                peer.task.cancel()
                tasks.append(peer.task)
        self._peers.clear()
        for t in (*self._oneshots, *self._inbound):
            t.cancel()
            tasks.append(t)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.stop(CLOSE_GRACE_S)
            self._server = None
        if self._lane is not None:
            await self._lane.close()
        self._log.info("peer_links_closed")

    # ------------------------------------------------------------------------------ peers
    def set_address(self, node_id: str, host: str, port: int) -> None:
        """Where ``node_id`` listens. Opens (and keeps reopening) the outbound link lazily."""
        if self._closed or node_id == self.my_id:
            return
        peer = self._peers.get(node_id)
        if peer is not None:
            if (peer.host, peer.port) == (host, port):
                return
            if peer.held:
                self._frames_dropped += len(peer.held)  # held for the old address
            self._stop_peer(peer, reason="address changed")
        peer = OutboundPeer(node_id, host, port)
        self._peers[node_id] = peer
        if self._loop is not None:
            self._spawn(peer)

    def rename(self, my_id: str) -> None:
        """This node's new id (CLUSTER RESET HARD, which forgot every peer first): what
        its frames, lane hellos and handshakes say from now on, so a peer that dials the
        old id here is refused."""
        self.my_id = my_id
        if self._lane is not None:
            self._lane.my_id = my_id
        self._log = get_logger("disq.peer_link").bind(node=my_id[:8])

    def _spawn(self, peer: OutboundPeer) -> None:
        assert self._loop is not None
        if peer.task is None:
            peer.task = self._loop.create_task(
                self._run_peer(peer), name=f"peer-link-{peer.node_id[:8]}"
            )

    def forget(self, node_id: str) -> None:
        """Close the outbound link to ``node_id`` and forget its address."""
        peer = self._peers.pop(node_id, None)
        if peer is not None:
            self._stop_peer(peer, reason="forgotten")

    def is_up(self, node_id: str) -> bool:
        peer = self._peers.get(node_id)
        return peer is not None and peer.up

    async def wait_link_up(self, node_id: str, timeout: float) -> bool:
        """Wait until the outbound link to ``node_id`` is up; False on timeout or unknown peer."""
        peer = self._peers.get(node_id)
        if peer is None:
            return False
        try:
            async with asyncio.timeout(timeout):
                await peer.up_event.wait()
        except TimeoutError:
            return False
        return peer.up

    async def wait_contacted(self, timeout: float) -> bool:
        """Wait until every known peer was dialled once (its link came up, or the attempt
        failed); False if ``timeout`` passed first. A peer that accepts nothing is a
        refused connect, over in a moment; only a silent one (SYN dropped) runs to the
        timeout."""
        waits = [p.tried.wait() for p in self._peers.values() if not p.tried.is_set()]
        if not waits:
            return True
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            return False
        return True

    def _link_changed(self, node_id: str, up: bool) -> None:
        if self.on_link_change is None:
            return
        try:
            self.on_link_change(node_id, up)
        except Exception:
            self._log.exception("peer_on_link_change_failed", peer=node_id[:8])

    def _stop_peer(self, peer: OutboundPeer, reason: str) -> None:
        if peer.task is not None:
            peer.task.cancel()  # its finally clause logs the link going down
        self._log.debug("peer_link_stopped", peer=peer.node_id[:8], reason=reason)

    # ------------------------------------------------------------------------------ sending
    def send(self, node_id: str, msg: Message) -> None:
        """Buffer ``msg``; everything buffered in this loop iteration leaves as one frame."""
        pending = self._pending.get(node_id)
        if pending is None:
            self._pending[node_id] = [msg]
        else:
            pending.append(msg)
        if not self._flush_scheduled:
            loop = self._loop
            if loop is None:  # not started: no link can be up, _flush drops it
                self._flush()
                return
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def send_many(self, node_id: str, msgs: list[Message]) -> None:
        """Buffer a Ready's messages for one peer (the node core's per-peer list)."""
        pending = self._pending.get(node_id)
        if pending is None:
            self._pending[node_id] = list(msgs)
        else:
            pending.extend(msgs)
        if not self._flush_scheduled:
            loop = self._loop
            if loop is None:
                self._flush()
                return
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def flush(self) -> None:
        """Hand what is buffered to the links now (the caller knows the iteration's sends
        are complete); saves the loop iteration a scheduled flush would wait for."""
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, {}
        for node_id, msgs in pending.items():
            peer = self._peers.get(node_id)
            if node_id in self._blocked:
                self._frames_blocked += 1
                self._frames_dropped += 1
            elif self._closed or peer is None:
                self._frames_dropped += 1
            elif not peer.up:
                if peer.tried.is_set():
                    self._frames_dropped += 1  # down: the protocol resends what matters
                else:
                    # The first dial is under way (a node just started, or just learned the
                    # peer): hold the frames for it, as a socket being connected would. A
                    # restarted node answering a REPLJOB that arrived before its own link to
                    # the sender was up would otherwise lose the GOTJOB, and the add would
                    # wait for its next resend. Dropped if that dial fails.
                    self._hold(peer, msgs)
            else:
                self._dispatch(peer, msgs)

    def _dispatch(self, peer: OutboundPeer, msgs: list[Message]) -> None:
        """One flush's messages to a peer whose link is up."""
        lane = peer.lane
        if lane is None or lane.lost:
            # A lost lane: its stream is about to end (an acknowledged lane) or to go on
            # alone (a refused one, _connect_and_pump): the stream takes the messages.
            self._enqueue(peer, msgs)
            return
        # Job messages take the lane; membership (rare: a few per probe period) stays on the
        # stream.
        gossip = [m for m in msgs if type(m) in MEMBERSHIP_TYPES]
        if gossip:
            msgs = [m for m in msgs if type(m) not in MEMBERSHIP_TYPES]
            self._enqueue(peer, gossip)
        if not msgs:
            return
        frames, refused = encode_within(msgs, lane.max_frame_bytes, self._encoder(peer, True))
        if refused:
            self._too_large(peer, refused, lane.max_frame_bytes, "lane")
        for frame, n_msgs in frames:
            if lane.send(frame):
                self._frames_sent += 1
                self._lane_frames_sent += 1
                self._messages_sent += n_msgs
            else:
                self._frames_dropped += 1

    def _hold(self, peer: OutboundPeer, msgs: list[Message]) -> None:
        if len(peer.held) >= self.max_queued_frames:
            self._frames_dropped += 1
            return
        peer.held.append(list(msgs))

    def _enqueue(self, peer: OutboundPeer, msgs: list[Message]) -> None:
        if len(peer.queue) >= self.max_queued_frames:
            self._frames_dropped += 1
            return
        frames, refused = encode_within(
            msgs, STREAM_MAX_FRAME_BYTES, self._encoder(peer, peer.columnar)
        )
        if refused:
            self._too_large(peer, refused, STREAM_MAX_FRAME_BYTES, "stream")
        for frame, n_msgs in frames:
            if len(peer.queue) >= self.max_queued_frames:
                self._frames_dropped += 1
                continue
            peer.queue.append(frame)
            self._frames_sent += 1
            self._messages_sent += n_msgs
        if frames:
            peer.wake()

    def _encoder(self, peer: OutboundPeer, columnar: bool) -> Callable[[list[Message]], bytes]:
        def encode(msgs: list[Message]) -> bytes:
            peer.seq += 1
            return encode_frame(
                self.my_id, peer.seq, msgs, self._wire, columnar, peer.records, peer.headers
            )

        return encode

    def _too_large(
        self, peer: OutboundPeer, refused: list[tuple[str, int]], limit: int, path: str
    ) -> None:
        """Messages over the frame limit of their path on their own: never sent (writing one
        would end the link, and the protocols' retry would resend it into the same failure);
        an error per flush, naming them."""
        self._messages_too_large += len(refused)
        self._log.error(
            "peer_message_too_large",
            peer=peer.node_id[:8],
            path=path,
            limit_bytes=limit,
            count=len(refused),
            first_type=refused[0][0],
            first_bytes=refused[0][1],
        )

    def send_to_address(self, host: str, port: int, msgs: list[Message]) -> None:
        """Send one frame to an address whose node id is not known yet (join, CLUSTER MEET).

        Best effort and bounded like everything else: it never raises nor blocks; failures are
        logged and counted as dropped frames.
        """
        if self._closed or self._loop is None or len(self._oneshots) >= MAX_ONESHOTS:
            self._frames_dropped += 1
            return
        self._oneshot_seq += 1
        data = encode_frame(self.my_id, self._oneshot_seq, msgs, self._wire)
        task = self._loop.create_task(
            self._oneshot(host, port, data, len(msgs)), name=f"peer-oneshot-{host}:{port}"
        )
        self._oneshots.add(task)
        task.add_done_callback(self._oneshots.discard)

    async def _oneshot(self, host: str, port: int, data: bytes, n_msgs: int) -> None:
        target = target_of(host, port)
        channel = make_channel(target, self.tls)
        call: Any = None
        try:
            async with asyncio.timeout(ONESHOT_TIMEOUT_S):
                call = channel.stream_stream(_LINK_METHOD)()
                await call.write(data)
                await call.done_writing()
                code = await call.code()
            if code != grpc.StatusCode.OK:
                raise ConnectionError(f"status {code}")
            self._frames_sent += 1
            self._messages_sent += n_msgs
            self._log.debug("peer_oneshot_sent", target=target, messages=n_msgs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Unreachable, refused, timed out: the caller (join/MEET) retries on its own.
            self._frames_dropped += 1
            self._log.info("peer_oneshot_failed", target=target, error=describe_error(exc))
        finally:
            if call is not None:
                call.cancel()
            await close_channel(channel)

    # ------------------------------------------------------------------------- outbound link
    async def _run_peer(self, peer: OutboundPeer) -> None:
        backoff = BACKOFF_MIN_S
        attempts = 0
        while True:
            attempts += 1
            came_up = await self._connect_and_pump(peer, attempts)
            if came_up:
                backoff = BACKOFF_MIN_S
                attempts = 0
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _connect_and_pump(self, peer: OutboundPeer, attempt: int) -> bool:
        """One connection: handshake, then write queued frames until the call ends.

        Returns whether the link came up. Never raises except CancelledError.
        """
        target = target_of(peer.host, peer.port)
        channel = make_channel(target, self.tls)
        call: Any = None
        came_up = False
        in_flight = 0
        try:
            call = channel.stream_stream(_LINK_METHOD)()
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                metadata = await call.initial_metadata()  # the peer's handler answers at once
            if call.done():
                raise ConnectionError(f"status {await call.code()}")
            their_id = metadata.get(_NODE_ID_KEY) if metadata is not None else None
            if their_id != peer.node_id:
                raise ConnectionError(f"{target} is node {their_id!r}, not this peer")
            features = metadata.get(_FEATURES_KEY) if metadata is not None else None
            announced = features.split(",") if isinstance(features, str) else []
            peer.columnar = WIRE_COLUMNAR in announced
            peer.records = WIRE_RECORDS in announced
            peer.headers = WIRE_HEADERS in announced
            if self._lane is not None:
                lane_at = parse_announcement(metadata.get(LANE_KEY))
                if lane_at is not None:
                    max_frame = parse_max_frame(metadata.get(LANE_MAX_FRAME_KEY))
                    peer.lane = await self._open_lane(peer, *lane_at, max_frame)
            came_up = True
            peer.up = True
            peer.up_event.set()
            self._log.info("peer_link_up", peer=peer.node_id[:8], target=target)
            held, peer.held = peer.held, []
            for msgs in held:  # before the link-up greeting and anything sent after it
                self._dispatch(peer, msgs)
            self._link_changed(peer.node_id, True)
            peer.tried.set()
            call.add_done_callback(lambda _call: peer.wake())
            loop = asyncio.get_running_loop()
            queue = peer.queue
            while not call.done():
                lane = peer.lane
                if lane is not None and lane.lost:
                    if lane.acked:
                        raise ConnectionError("job lane lost")
                    # Closed before the port took our hello: refused or dropped unread at
                    # its cap (a flood of connections that say none). Taking the link down
                    # would not help, and under a flood would flap it: the stream carries
                    # everything until it reconnects (job_lane.HELLO_ACK).
                    peer.lane = None
                    self._lanes_refused += 1
                    self._log.warning("peer_lane_refused", peer=peer.node_id[:8])
                    continue
                if not queue:
                    peer.wakeup = loop.create_future()
                    await peer.wakeup
                    peer.wakeup = None
                    continue
                data = queue.popleft()
                in_flight = 1
                if queue:
                    parts = [data]
                    size = len(data)
                    while queue and size + len(queue[0]) <= COALESCE_MAX_BYTES:
                        more = queue.popleft()
                        parts.append(more)
                        size += len(more)
                    if len(parts) > 1:
                        data = b"".join(parts)
                        in_flight = len(parts)
                await call.write(data)
                in_flight = 0
            raise ConnectionError(f"stream ended: {await call.code()}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if came_up:
                self._log.info("peer_link_down", peer=peer.node_id[:8], error=describe_error(exc))
            elif attempt == 1 or attempt % 20 == 0:
                # Connecting fails every backoff period while a peer is down: say so at the
                # first attempt and then now and then, not 20 times a second.
                self._log.info(
                    "peer_link_connect_failed",
                    peer=peer.node_id[:8],
                    target=target,
                    attempt=attempt,
                    error=describe_error(exc),
                )
        finally:
            if not came_up and peer.held:
                self._frames_dropped += len(peer.held)  # held for a first dial that failed
                peer.held = []
            peer.tried.set()
            peer.wakeup = None
            if peer.lane is not None:
                peer.lane.close()
                peer.lane = None
            if came_up:
                peer.up = False
                peer.up_event.clear()
                lost = in_flight + len(peer.queue)
                peer.queue.clear()
                self._frames_dropped += lost
                self._link_changed(peer.node_id, False)
            if call is not None:
                call.cancel()
            await close_channel(channel)
        return came_up

    async def _open_lane(
        self, peer: OutboundPeer, port: int, token: bytes, max_frame: int
    ) -> OutboundLane | None:
        """The lane to ``peer`` at ``port``; None (the stream carries everything) if it
        cannot be opened."""
        ctx = self._lane_ssl[1] if self._lane_ssl else None
        name = (self.tls.server_name if self.tls is not None else None) or peer.host
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                return await open_lane(
                    peer.host, port, self.my_id, token, peer.wake, ctx, name, max_frame
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            self._log.warning(
                "peer_lane_unavailable", peer=peer.node_id[:8], port=port, error=describe_error(exc)
            )
            return None

    # -------------------------------------------------------------------------- inbound link
    async def _serve_link(self, request_iterator: Any, context: Any) -> None:
        """Handler of one inbound stream: decode each frame and hand it to ``on_messages``."""
        task = asyncio.current_task()
        if task is not None:
            self._inbound.add(task)
        sender = ""
        lane = self._lane
        # This stream's own lane token (job_lane.py, "What the lane trusts"): good for one
        # lane, dropped with the stream below, which closes that lane.
        token = lane.grant() if lane is not None else None
        try:
            # The client's handshake: proof that a disq handler, not just a socket, is there.
            metadata = [(_NODE_ID_KEY, self.my_id), (_FEATURES_KEY, ",".join(WIRE_FEATURES))]
            if lane is not None and token is not None:
                metadata.append((LANE_KEY, lane.announcement(token)))
                metadata.append((LANE_MAX_FRAME_KEY, str(lane.announced_max_frame())))
            await context.send_initial_metadata(tuple(metadata))
            async for raw in request_iterator:
                from_node = self._receive(raw, sender)
                if from_node and from_node != sender:
                    if not sender:
                        self._log.info("peer_inbound_up", peer=from_node[:8])
                    sender = from_node
        except asyncio.CancelledError:
            if not self._closed:
                raise
            # close() cancelled us: end the stream normally, so that gRPC closes it now
            # instead of holding server.stop() for its whole grace period.
        except Exception as exc:
            # The client vanished mid-stream (kill -9, reset): the stream is simply over.
            self._log.debug("peer_inbound_error", peer=sender[:8], error=describe_error(exc))
        finally:
            if task is not None:
                self._inbound.discard(task)
            if lane is not None and token is not None:
                lane.revoke(token)
            if sender:
                self._log.info("peer_inbound_down", peer=sender[:8])

    def _decode(self, raw: bytes, sender: str) -> tuple[str, list[Message]]:
        """One inbound frame (from a stream or a lane), counted: (the node it came from, its
        messages); no messages for a malformed or blocked frame or one of our own."""
        try:
            from_node, _seq, msgs = decode_frame(raw, self._wire)
        except FrameDecodeError as exc:
            self._frames_dropped += 1
            self._log.warning("peer_frame_malformed", peer=sender[:8], error=str(exc))
            return "", []
        if from_node == self.my_id:
            return "", []  # ourselves, e.g. a join aimed at our own address
        if from_node in self._blocked:
            self._frames_blocked += 1
            self._frames_dropped += 1
            return from_node, []
        self._frames_received += 1
        self._messages_received += len(msgs)
        return from_node, msgs

    def _hand_over(self, from_node: str, msgs: list[Message]) -> None:
        try:
            self.on_messages(from_node, msgs)
        except Exception:
            # A bug above must not take the link down with it (and every later frame of this
            # peer): log it and go on with the next frame.
            self._log.exception("peer_on_messages_failed", peer=from_node[:8])

    def _receive(self, raw: bytes, sender: str) -> str:
        """Decode one inbound frame and hand it to ``on_messages``; returns the node it came
        from ('' for a malformed frame or one of our own)."""
        from_node, msgs = self._decode(raw, sender)
        if msgs:
            self._hand_over(from_node, msgs)
        return from_node

    # ------------------------------------------------------------- the lane port's reports
    def lane_frames(self, raws: list[bytes], sender: str) -> None:
        """The frames of one read of a lane: handed over together (one ``on_messages``, so
        one flush of the node, for every frame the read held), in order."""
        self._lane_frames_received += len(raws)
        node = ""
        batch: list[Message] = []
        for raw in raws:
            from_node, msgs = self._decode(raw, sender)
            if not msgs:
                continue
            if from_node != node and batch:
                self._hand_over(node, batch)
                batch = []
            node = from_node
            batch = msgs if not batch else batch + msgs
        if batch:
            self._hand_over(node, batch)

    def lane_up(self, sender: str) -> None:
        self._log.debug("peer_lane_inbound_up", peer=sender[:8])

    def lane_down(self, sender: str) -> None:
        self._log.debug("peer_lane_inbound_down", peer=sender[:8])

    def lane_bad_frame(self, sender: str, what: str) -> None:
        self._frames_dropped += 1
        self._log.warning("peer_lane_malformed", peer=sender[:8], error=what)

    # ------------------------------------------------------------------------ fault injection
    def block(self, node_ids: set[str]) -> None:
        """Drop every frame to and from ``node_ids`` (cluster lab partitions), counted."""
        self._blocked = self._blocked | frozenset(node_ids)

    def unblock_all(self) -> None:
        self._blocked = frozenset()

    # ---------------------------------------------------------------------------------- stats
    def stats(self) -> dict[str, int]:
        return {
            "frames_sent": self._frames_sent,
            "frames_received": self._frames_received,
            "messages_sent": self._messages_sent,
            "messages_received": self._messages_received,
            "frames_dropped": self._frames_dropped,
            # Frames held for links being dialled for the first time (sent or dropped next).
            "frames_held": sum(len(p.held) for p in self._peers.values()),
            # Breakdown and codec counters (see peer_wire.WireCounters).
            "frames_blocked": self._frames_blocked,
            "frames_malformed": self._wire.frames_malformed,
            "messages_skipped": self._wire.messages_skipped,
            "messages_unencodable": self._wire.messages_unencodable,
            "links_up": sum(1 for p in self._peers.values() if p.up),
            # Up links whose peer reads the batch forms: below links_up during a rolling
            # restart that mixes builds.
            "links_columnar": sum(1 for p in self._peers.values() if p.up and p.columnar),
            # Up links whose job messages take a job lane (job_lane.py).
            "links_lane": sum(1 for p in self._peers.values() if p.up and p.lane is not None),
            "lane_frames_sent": self._lane_frames_sent,
            "lane_frames_received": self._lane_frames_received,
            "messages_too_large": self._messages_too_large,
            "lanes_refused": self._lanes_refused,
            # The lane port: connections without a hello (now, and closed by reason), the
            # bytes inbound lanes buffer, lanes closed past that bound (job_lane.py).
            **(self._lane.stats() if self._lane is not None else {}),
        }
