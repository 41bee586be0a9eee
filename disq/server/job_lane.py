"""The job lane: job messages between two nodes on a plain TCP connection beside the gRPC link.

Why not the gRPC stream
    One round trip on a grpc.aio stream between two processes costs 220-400 us at one message
    in flight, against 21 us for the same bytes on an asyncio TCP connection
    (``scripts/probe_link_rtt.py``). Profiled at one connection adding one REPLICATE 3 job at
    a time, the nodes spent over 90% of their CPU inside gRPC (its poller thread handing
    every completion to the loop, the stream's write path) and 4% in disq's own code: gRPC
    was the floor of a replicated add, not the cores. So the messages about jobs (REPLJOB,
    GOTJOB, SETACK, ...) travel on this lane, and membership (ping, ack, ping-req) stays on
    the gRPC stream, which also stays the handshake, the fallback and the one-shot path.

How a lane comes up
    A node listens on one lane port (ephemeral unless pinned) on the bus's bind host, and
    announces ``<port>,<token>`` in the initial metadata of every Link stream it accepts (next
    to its node id and wire features; docs in peer_link.py). The announcement names no host on
    purpose: the dialling node connects to the host it reached the Link at, which is the
    peer's advertised host (its membership record; disq.server.advertise), so a node bound to
    0.0.0.0 with ``--advertise-host`` is dialled at that address on both paths, and a node
    that comes back at a new address is dialled at the new one. The token is 16 random bytes
    drawn at start: only a node that completed a Link handshake (over TLS, with client certificates
    when the cluster uses them) learns it, so a connection to the lane port proves itself with
    the token instead of a certificate of its own. The dialling node opens a TCP connection (TLS
    with the bus's certificates when the bus has TLS) and sends a 64-byte hello: the magic,
    its own node id and the token. After that the connection carries one direction only, as
    the gRPC streams do: length-prefixed frames, each the same protobuf ``Frame`` the stream
    would carry (``u32 big-endian length | Frame``), so the codec and its columnar forms are
    shared and a frame means the same on either path.

Lifetime
    A lane lives inside its Link: it opens after the stream's handshake and is closed when the
    stream ends, and a lane that breaks ends its stream too, so the sender reconnects both
    (a restarted peer has a new port and token anyway). A lane that cannot be opened (a
    firewall between the nodes, an older build that announces none) leaves the link on gRPC
    alone: slower, never broken.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
from collections.abc import Callable
from typing import Any

__all__ = [
    "HELLO_SIZE",
    "LANE_KEY",
    "MAGIC",
    "MAX_BUFFERED_BYTES",
    "MAX_FRAME_BYTES",
    "LaneServer",
    "OutboundLane",
    "hello",
    "open_lane",
    "parse_announcement",
]

LANE_KEY = "disq-job-lane"  # the Link handshake's metadata key: "<port>,<token hex>"
MAGIC = b"DISQLN1\n"
TOKEN_BYTES = 16
HELLO_SIZE = len(MAGIC) + 40 + TOKEN_BYTES  # magic | sender's node id (40 hex) | token
# Frames carry thousands of jobs of up to the job-size limit; a length past this is not a
# frame of ours (or a corrupted stream) and ends the connection.
MAX_FRAME_BYTES = 1 << 30
# Frames to a peer whose socket does not drain are dropped past this (counted), as the gRPC
# path drops past its queue bound: the protocols above retry, and memory stays bounded.
MAX_BUFFERED_BYTES = 32 << 20
HELLO_TIMEOUT_S = 5.0


def hello(my_id: str, token: bytes) -> bytes:
    return MAGIC + my_id.encode("ascii") + token


def parse_announcement(value: Any) -> tuple[int, bytes] | None:
    """``<port>,<token hex>`` from a Link handshake; None when absent or malformed."""
    if not isinstance(value, str):
        return None
    port_text, _, token_hex = value.partition(",")
    try:
        port = int(port_text)
        token = bytes.fromhex(token_hex)
    except ValueError:
        return None
    if not 0 < port < 65536 or len(token) != TOKEN_BYTES:
        return None
    return port, token


class _InboundLane(asyncio.Protocol):
    """One lane another node opened to us: the hello, then frames handed to ``deliver``."""

    def __init__(self, server: LaneServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.sender = ""  # set by a valid hello
        self.hello_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.inbound.add(self)
        # A connection that does not say a valid hello soon is not a peer: it is closed.
        self.hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self.close_lane)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.inbound.discard(self)
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        if self.sender:
            self.server.on_down(self.sender)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.sender:
            if len(buf) < HELLO_SIZE:
                return
            sender = self.server.check_hello(bytes(buf[:HELLO_SIZE]))
            if sender is None:
                self.close_lane()
                return
            self.sender = sender
            if self.hello_timer is not None:
                self.hello_timer.cancel()
                self.hello_timer = None
            del buf[:HELLO_SIZE]
            self.server.on_up(sender)
        pos = 0
        end = len(buf)
        frames: list[bytes] = []
        while end - pos >= 4:
            n = int.from_bytes(buf[pos : pos + 4], "big")
            if n > MAX_FRAME_BYTES:
                self.server.on_bad_frame(self.sender, f"frame length {n}")
                self.close_lane()
                break
            if end - pos - 4 < n:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        if frames:
            # Every frame of this read at once: the node answers them with one flush.
            self.server.deliver(frames, self.sender)

    def close_lane(self) -> None:
        if self.transport is not None:
            self.transport.close()


class LaneServer:
    """The lane port: accepts lanes, checks their hello, delivers their frames."""

    def __init__(
        self,
        my_id: str,
        deliver: Callable[[list[bytes], str], None],
        on_up: Callable[[str], None],
        on_down: Callable[[str], None],
        on_bad_frame: Callable[[str, str], None],
    ) -> None:
        self.my_id = my_id
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.deliver = deliver
        self.on_up = on_up
        self.on_down = on_down
        self.on_bad_frame = on_bad_frame
        self.inbound: set[_InboundLane] = set()
        self.port = 0
        self._server: asyncio.AbstractServer | None = None

    def announcement(self) -> str:
        return f"{self.port},{self.token.hex()}"

    def check_hello(self, data: bytes) -> str | None:
        """The sender's node id if ``data`` is a hello with our token, else None."""
        if data[: len(MAGIC)] != MAGIC:
            return None
        if not secrets.compare_digest(data[len(MAGIC) + 40 :], self.token):
            return None
        try:
            sender = data[len(MAGIC) : len(MAGIC) + 40].decode("ascii")
        except UnicodeDecodeError:
            return None
        return sender if sender != self.my_id else None

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _InboundLane(self), host, port, ssl=ssl_context, reuse_address=True
        )
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for lane in list(self.inbound):
            lane.close_lane()
        await server.wait_closed()


class OutboundLane(asyncio.Protocol):
    """The lane this node opened to one peer: written by ``PeerLinks``, never read."""

    def __init__(self, on_lost: Callable[[], None]) -> None:
        self.on_lost = on_lost
        self.transport: asyncio.WriteTransport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.on_lost()

    def data_received(self, data: bytes) -> None:
        pass  # the receiver never writes on a lane

    def send(self, frame: bytes) -> bool:
        """Write one frame; False (nothing written) when the socket is not draining."""
        t = self.transport
        if t is None or self.lost or t.get_write_buffer_size() > MAX_BUFFERED_BYTES:
            return False
        t.writelines((len(frame).to_bytes(4, "big"), frame))
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_lane(
    host: str,
    port: int,
    my_id: str,
    token: bytes,
    on_lost: Callable[[], None],
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
) -> OutboundLane:
    """Dial a peer's lane and send the hello; raises OSError (or ssl's errors) on failure."""
    loop = asyncio.get_running_loop()
    transport, lane = await loop.create_connection(
        lambda: OutboundLane(on_lost),
        host,
        port,
        ssl=ssl_context,
        server_hostname=server_hostname if ssl_context is not None else None,
    )
    transport.write(hello(my_id, token))
    return lane
