"""The job lane: job messages between two nodes on a plain TCP connection beside the gRPC link.

Why not the gRPC stream
    One round trip on a grpc.aio stream between two processes costs 220-400 us at one message
    in flight, against 21 us for the same bytes on an asyncio TCP connection
    (a probe of the two, in git's history). Profiled at one connection adding one REPLICATE 3 job at
    a time, the nodes spent over 90% of their CPU inside gRPC (its poller thread handing
    every completion to the loop, the stream's write path) and 4% in disq's own code: gRPC
    was the floor of a replicated add, not the cores. So the messages about jobs (REPLJOB,
    GOTJOB, SETACK, ...) travel on this lane, and membership (ping, ack, ping-req) stays on
    the gRPC stream, which also stays the handshake, the fallback and the one-shot path.

How a lane comes up
    A node listens on one lane port (ephemeral unless pinned) on the bus's bind host, and
    announces ``<port>,<token>`` in the initial metadata of every Link stream it accepts (next
    to its node id, its wire features and the largest lane frame it reads; docs in
    peer_link.py). The announcement names no host on purpose: the dialling node connects to
    the host it reached the Link at, which is the peer's advertised host (its membership
    record; disq.server.advertise), so a node bound to 0.0.0.0 with ``--advertise-host`` is
    dialled at that address on both paths, and a node that comes back at a new address is
    dialled at the new one. The dialling node opens a TCP connection (TLS with the bus's
    certificates when the bus has TLS) and sends a 64-byte hello: the magic, its own node id
    and the token; the port answers a hello it takes with one byte (``HELLO_ACK``), the only
    byte it ever writes. After that the connection carries one direction only, as the gRPC
    streams do: length-prefixed frames, each the same protobuf ``Frame`` the stream would carry
    (``u32 big-endian length | Frame``), so the codec and its columnar forms are shared and a
    frame means the same on either path.

What the lane trusts
    The token is 16 random bytes made for one Link stream when the lane port answers its
    handshake, good for one lane, and dropped (closing that lane) when the stream ends. A
    lane connection proves with it that its sender holds a Link stream to this node, instead
    of a certificate of its own: so the lane trusts exactly whom the gRPC port trusts. With
    mutual TLS that is a holder of a certificate of the cluster's CA, and the token travels
    encrypted. Without TLS, anyone who can open a Link stream to the gRPC port gets a token,
    in clear, and could as well write frames on the stream itself: the bus is then for a
    trusted network, lane and stream alike. A token seen on the wire is worth one lane for
    the life of one stream, not the node's life.

Bounds
    Connections that have not said a valid hello are capped (``pending_caps``: per port and
    for all lane ports of the process, an eighth of the open-files limit together) and each
    is closed HELLO_TIMEOUT_S after accept, TLS handshake included. The frames a lane reads
    are bounded (``MAX_FRAME_BYTES``, announced so senders split under it) and so are the
    bytes all inbound lanes buffer together (``MAX_INBOUND_BUFFERED_BYTES``). Both ends set
    TCP keepalive: a peer that vanished without a FIN is found within 25 s.

Lifetime
    A lane lives inside its Link: it opens after the stream's handshake and is closed when the
    stream ends, and a lane that breaks ends its stream too, so the sender reconnects both
    (a restarted peer has a new port and token anyway). A lane closed before its hello was
    taken (refused, or dropped unread at the port's cap under a flood) does not: the stream
    carries everything until it reconnects, so a flood cannot flap the links. A lane that
    cannot be opened (a firewall between the nodes, an older build that announces none)
    leaves the link on gRPC alone: slower, never broken.
"""

from __future__ import annotations

import asyncio
import asyncio.protocols  # named so mypyc declares the module of the base class below
import os
import resource
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

from mypy_extensions import mypyc_attr

from disq.logging import get_logger

__all__ = [
    "HELLO_ACK",
    "HELLO_SIZE",
    "LANE_KEY",
    "LANE_MAX_FRAME_KEY",
    "MAGIC",
    "MAX_BUFFERED_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_INBOUND_BUFFERED_BYTES",
    "OLD_PEER_MAX_FRAME_BYTES",
    "LaneServer",
    "OutboundLane",
    "hello",
    "open_lane",
    "parse_announcement",
    "parse_max_frame",
    "pending_caps",
]

LANE_KEY = "disq-job-lane"  # the Link handshake's metadata key: "<port>,<token hex>"
# ... and the largest frame the lane port reads (decimal bytes): the sender splits its
# frames under it and refuses a single message over it (frame_bound.py). A build that does
# not announce it reads OLD_PEER_MAX_FRAME_BYTES.
LANE_MAX_FRAME_KEY = "disq-lane-max-frame"
MAGIC = b"DISQLN1\n"
TOKEN_BYTES = 16
HELLO_SIZE = len(MAGIC) + 40 + TOKEN_BYTES  # magic | sender's node id (40 hex) | token
# The one byte a lane port ever writes: the hello was taken. A lane lost before it is one
# the port refused or closed unread (its cap, under a flood): the sender keeps its stream and
# sends everything there, instead of taking the link down and up. An older build's port
# writes nothing, and an older build's sender ignores it.
HELLO_ACK = b"\x01"
# The largest frame a lane reads: one job of the largest size a node takes (1 GiB, the
# beanstalk door's -z ceiling) with its envelope. A length past this is not a frame of ours
# (or a corrupted stream) and ends the connection; a sender never writes one.
MAX_FRAME_BYTES = (1 << 30) + (1 << 20)
OLD_PEER_MAX_FRAME_BYTES = 1 << 30
# Frames to a peer whose socket does not drain are dropped past this (counted), as the gRPC
# path drops past its queue bound: the protocols above retry, and memory stays bounded.
MAX_BUFFERED_BYTES = 32 << 20
# The bytes every inbound lane of the node holds together (the start of a frame whose end
# has not arrived): a lane whose read takes the sum past this is closed (its sender
# reconnects, the protocols retry what it carried). One largest frame always fits.
MAX_INBOUND_BUFFERED_BYTES = 3 << 29  # 1.5 GiB
HELLO_TIMEOUT_S = 5.0  # from accept: the TLS handshake and the hello, both
LANE_BACKLOG = 128
# Dead peers: an accepted lane carries one direction and may be idle for as long as no job
# moves, so no idle timeout can tell a quiet peer from a vanished one; TCP keepalive can,
# within KEEPALIVE_IDLE_S + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_S (25 s), on both ends.
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_PROBES = 3
# Live tokens: one per inbound Link stream that was offered a lane. Past this, a stream is
# offered none (it carries everything, as with an older peer) rather than growing the table.
MAX_GRANTS = 4096
PENDING_WARN_EVERY_S = 10.0


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


def parse_max_frame(value: Any) -> int:
    """The peer's announced frame limit; an older build's when absent or malformed, and
    never more than this build would itself read nor less than 1 MiB (a frame of a few
    jobs)."""
    try:
        n = int(value) if isinstance(value, str) else OLD_PEER_MAX_FRAME_BYTES
    except ValueError:
        n = OLD_PEER_MAX_FRAME_BYTES
    return max(1 << 20, min(n, MAX_FRAME_BYTES))


def pending_caps(soft_fd_limit: int) -> tuple[int, int]:
    """(per lane port, all lane ports of the process) caps on connections that have not
    said hello, from the open-files limit: together they never hold more than an eighth of
    the descriptors (nor 1,024), so a flood of the lane port leaves the client ports theirs.
    The closes of one accept batch (up to LANE_BACKLOG) land in the next loop iteration."""
    if soft_fd_limit < 0:  # RLIM_INFINITY
        soft_fd_limit = 1 << 20
    total = min(1024, max(2, soft_fd_limit // 8))
    return max(1, total // 2), total


def set_keepalive(sock: Any) -> None:
    """SO_KEEPALIVE and its timers on a lane's socket (either end); TCP only."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)


class _PendingTotal:
    """Connections without a hello on every lane port of the process (one per node)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_PENDING = _PendingTotal()


@mypyc_attr(native_class=False)  # asyncio.Protocol is a Python class
class _InboundLane(asyncio.protocols.Protocol):
    """One lane another node opened to us: the hello, then frames handed to ``deliver``."""

    def __init__(self, server: LaneServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.counted = 0  # bytes of buf counted in server.buffered_bytes
        self.sender = ""  # set by a valid hello
        self.token = b""  # ... and the grant it used
        self.hello_timer: asyncio.TimerHandle | None = None
        self.pending = False  # counted among the connections without a hello
        self.closed = False
        self.gone = False
        self.tls_task: asyncio.Task[None] | None = None
        self.upgraded = True  # False while a TLS handshake runs: nothing may be written
        self.ack_due = False  # the hello came with the handshake's last bytes: ack after it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        server.inbound.add(self)
        if not server.admit(self):
            return
        loop = asyncio.get_running_loop()
        # A connection that does not say a valid hello soon is not a peer: it is closed. The
        # timer runs from accept, the TLS handshake included (asyncio's own handshake
        # timeout is 60 s, and a connection in its handshake would not count as pending).
        self.hello_timer = loop.call_later(HELLO_TIMEOUT_S, self._hello_timeout)
        ctx = server.ssl_context
        if ctx is not None:
            self.upgraded = False
            transport.pause_reading()  # type: ignore[attr-defined]  # no plaintext read
            self.tls_task = loop.create_task(self._start_tls(loop, ctx))

    async def _start_tls(self, loop: asyncio.AbstractEventLoop, ctx: ssl.SSLContext) -> None:
        raw = self.transport
        assert raw is not None
        try:
            tls = await loop.start_tls(
                raw, self, ctx, server_side=True, ssl_handshake_timeout=HELLO_TIMEOUT_S
            )
        except Exception:  # a bad certificate, a reset, a timeout, closed by us meanwhile
            if not self.closed:
                self.server.closed_refused += 1
            raw.close()
            self._gone()  # asyncio reports no connection_lost for a failed handshake
            return
        if tls is None or self.closed:
            # Closed during the handshake (the hello timer, the cap): start_tls returns
            # None rather than raising when that close was ours.
            if tls is not None:
                tls.close()
            raw.close()
            self._gone()
            return
        self.transport = tls
        self.upgraded = True
        if self.ack_due:
            tls.write(HELLO_ACK)

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()

    def _gone(self) -> None:
        if self.gone:
            return
        self.gone = True
        self.closed = True
        server = self.server
        server.inbound.discard(self)
        if self.hello_timer is not None:
            self.hello_timer.cancel()
            self.hello_timer = None
        server.release(self)
        server.buffered_bytes -= self.counted
        self.counted = 0
        self.buf = bytearray()
        if self.sender:
            server.owner.lane_down(self.sender)

    def _hello_timeout(self) -> None:
        self.hello_timer = None
        if not self.sender and not self.closed:
            self.server.closed_timeout += 1
            self.close_lane()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.buf
        buf += data
        server = self.server
        if not self.sender:
            if len(buf) < HELLO_SIZE:
                return
            sender = server.check_hello(bytes(buf[:HELLO_SIZE]), self)
            if sender is None:
                server.closed_refused += 1
                self.close_lane()
                return
            self.sender = sender
            if self.hello_timer is not None:
                self.hello_timer.cancel()
                self.hello_timer = None
            server.release(self)
            del buf[:HELLO_SIZE]
            # Keepalive for peers only: a flood's connections, closed unread, cost no syscall.
            try:
                set_keepalive(self.transport.get_extra_info("socket") if self.transport else None)
            except OSError:
                pass  # the peer is gone already: connection_lost follows
            # asyncio's TLS layer can hand us the hello before start_tls has returned the
            # TLS transport: the raw one must not be written then.
            if self.upgraded and self.transport is not None:
                self.transport.write(HELLO_ACK)
            else:
                self.ack_due = True
            server.owner.lane_up(sender)
        pos = 0
        end = len(buf)
        frames: list[bytes] = []
        limit = server.max_frame_bytes
        while end - pos >= 4:
            n = int.from_bytes(buf[pos : pos + 4], "big")
            if n > limit:
                server.owner.lane_bad_frame(self.sender, f"frame length {n} over {limit}")
                self.close_lane()
                break
            if end - pos - 4 < n:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        if not self.closed:
            server.buffered_bytes += len(buf) - self.counted
            self.counted = len(buf)
            if server.buffered_bytes > server.max_buffered_bytes:
                server.buffer_full(self)
        if frames:
            # Every frame of this read at once: the node answers them with one flush.
            server.owner.lane_frames(frames, self.sender)

    def close_lane(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class LaneOwner(Protocol):
    """What the lane port reports to the peer links that own it (peer_link.py)."""

    def lane_frames(self, frames: list[bytes], sender: str) -> None:
        """The frames of one read of ``sender``'s lane, in order."""
        ...

    def lane_up(self, sender: str) -> None: ...

    def lane_down(self, sender: str) -> None: ...

    def lane_bad_frame(self, sender: str, what: str) -> None:
        """A frame over the limit: the lane is closed."""
        ...


class LaneServer:
    """The lane port: accepts lanes, checks their hello, delivers their frames.

    Each inbound Link stream that is offered a lane gets its own token (``grant``), good for
    one lane and dropped with the stream (``revoke``), which closes that lane.
    """

    def __init__(self, my_id: str, owner: LaneOwner) -> None:
        self.my_id = my_id
        self.owner = owner
        self.inbound: set[_InboundLane] = set()
        # Live tokens -> the lane that used it (None until its hello). A used token stays
        # until its stream ends: it opens no second lane.
        self.grants: dict[bytes, _InboundLane | None] = {}
        # Connections without a hello yet, oldest first (a dict keeps insertion order).
        self.pending: dict[_InboundLane, None] = {}
        self.max_pending, self.max_pending_total = pending_caps(-1)
        self.max_frame_bytes = MAX_FRAME_BYTES
        self.max_buffered_bytes = MAX_INBOUND_BUFFERED_BYTES
        self.buffered_bytes = 0
        self.ssl_context: ssl.SSLContext | None = None
        self.port = 0
        self.closed_cap = 0  # connections without a hello closed at the cap
        self.closed_timeout = 0  # ... that said no hello within HELLO_TIMEOUT_S
        self.closed_refused = 0  # ... whose hello (or TLS handshake) was not a peer's
        self.closed_buffer_full = 0  # lanes closed past max_buffered_bytes
        self._cap_warned_at = 0.0
        self._cap_unwarned = 0
        self._log = get_logger("disq.job_lane").bind(node=my_id[:8])
        self._server: asyncio.AbstractServer | None = None

    # ------------------------------------------------------------------------------ tokens
    def grant(self) -> bytes | None:
        """A token for one inbound Link stream's lane; None when MAX_GRANTS are live."""
        if len(self.grants) >= MAX_GRANTS:
            return None
        # os.urandom is what secrets.token_bytes returns; secrets itself imports hmac and
        # hashlib (OpenSSL's set-up, 2 ms of a start).
        token = os.urandom(TOKEN_BYTES)
        self.grants[token] = None
        return token

    def revoke(self, token: bytes) -> None:
        """The stream ended: its token is dropped and the lane it opened is closed."""
        lane = self.grants.pop(token, None)
        if lane is not None:
            lane.close_lane()

    def announcement(self, token: bytes) -> str:
        return f"{self.port},{token.hex()}"

    def announced_max_frame(self) -> int:
        """The largest frame a sender may write here: one this port reads, and that fits
        the bytes every lane may buffer together."""
        return min(self.max_frame_bytes, self.max_buffered_bytes)

    def check_hello(self, data: bytes, lane: _InboundLane) -> str | None:
        """The sender's node id if ``data`` is a hello with a live, unused token (which is
        then ``lane``'s), else None."""
        if data[: len(MAGIC)] != MAGIC:
            return None
        token = data[len(MAGIC) + 40 :]
        # A dict lookup, not compare_digest: the key's hash is SipHash under a per-process
        # random key, so how long a miss takes says nothing about the live tokens' bytes.
        if token not in self.grants or self.grants[token] is not None:
            return None
        try:
            sender = data[len(MAGIC) : len(MAGIC) + 40].decode("ascii")
        except UnicodeDecodeError:
            return None
        if sender == self.my_id:
            return None
        self.grants[token] = lane
        lane.token = token
        return sender

    # ---------------------------------------------------------------- connections, memory
    def admit(self, lane: _InboundLane) -> bool:
        """Count a new connection among those without a hello. At this port's cap the
        oldest of them is closed for it (a peer says its hello at once, so the oldest is the
        likeliest not to be one); at the process's cap it is refused itself."""
        if len(self.pending) >= self.max_pending:
            oldest = next(iter(self.pending))
            self.release(oldest)
            oldest.close_lane()
            self._at_cap()
        elif _PENDING.count >= self.max_pending_total:
            lane.close_lane()
            self._at_cap()
            return False
        self.pending[lane] = None
        lane.pending = True
        _PENDING.count += 1
        return True

    def release(self, lane: _InboundLane) -> None:
        if lane.pending:
            lane.pending = False
            del self.pending[lane]
            _PENDING.count -= 1

    def _at_cap(self) -> None:
        self.closed_cap += 1
        self._cap_unwarned += 1
        now = time.monotonic()
        if now - self._cap_warned_at >= PENDING_WARN_EVERY_S:
            # A flood: one line per 10 s with the count, not one per connection.
            self._log.warning(
                "lane_pending_cap_reached",
                port=self.port,
                closed=self._cap_unwarned,
                cap=self.max_pending,
                cap_total=self.max_pending_total,
            )
            self._cap_warned_at = now
            self._cap_unwarned = 0

    def buffer_full(self, lane: _InboundLane) -> None:
        self.closed_buffer_full += 1
        self._log.warning(
            "lane_buffer_full",
            peer=lane.sender[:8],
            buffered_bytes=self.buffered_bytes,
            max_buffered_bytes=self.max_buffered_bytes,
        )
        lane.close_lane()

    def stats(self) -> dict[str, int]:
        return {
            "lane_pending": len(self.pending),
            "lane_pending_closed_cap": self.closed_cap,
            "lane_pending_closed_timeout": self.closed_timeout,
            "lane_pending_closed_refused": self.closed_refused,
            "lane_buffered_bytes": self.buffered_bytes,
            "lane_closed_buffer_full": self.closed_buffer_full,
        }

    # ----------------------------------------------------------------------------- lifecycle
    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        loop = asyncio.get_running_loop()
        # The caps follow the open-files limit the node got (fd_limit.py ran before).
        self.max_pending, self.max_pending_total = pending_caps(
            resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        )
        # TLS is started per connection (_InboundLane._start_tls), not by the server: its
        # hello timer and the pending cap then see the connection from accept on.
        self.ssl_context = ssl_context
        # Any: uvloop's ``sockets`` is a list, asyncio's a tuple, and the compiled code would
        # check it against typeshed's tuple.
        server: Any = await loop.create_server(
            lambda: _InboundLane(self), host, port, reuse_address=True, backlog=LANE_BACKLOG
        )
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = []
        for lane in list(self.inbound):
            lane.close_lane()
            if lane.tls_task is not None and not lane.tls_task.done():
                lane.tls_task.cancel()
                tasks.append(lane.tls_task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for lane in list(self.inbound):
            lane._gone()  # a lane cut mid-handshake reports no connection_lost
        self.grants.clear()
        await server.wait_closed()


@mypyc_attr(native_class=False)  # asyncio.Protocol is a Python class
class OutboundLane(asyncio.protocols.Protocol):
    """The lane this node opened to one peer: written by ``PeerLinks``, never read."""

    def __init__(self, on_lost: Callable[[], None]) -> None:
        self.on_lost = on_lost
        self.transport: asyncio.WriteTransport | None = None
        self.lost = False
        self.acked = False  # the peer's port took our hello (HELLO_ACK)
        # The largest frame the peer reads (its handshake's LANE_MAX_FRAME_KEY).
        self.max_frame_bytes = OLD_PEER_MAX_FRAME_BYTES

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        try:
            set_keepalive(transport.get_extra_info("socket"))
        except OSError:
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.on_lost()

    def data_received(self, data: bytes) -> None:
        if data:
            self.acked = True  # HELLO_ACK: the only byte a lane port writes

    def send(self, frame: bytes) -> bool:
        """Write one frame; False (nothing written) when the socket is not draining, or the
        frame is over the peer's limit (the caller splits frames under it: this is the last
        guard, which also keeps a length past 4 GiB from reaching the 4-byte prefix)."""
        t = self.transport
        if t is None or self.lost or t.get_write_buffer_size() > MAX_BUFFERED_BYTES:
            return False
        if len(frame) > self.max_frame_bytes:
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
    max_frame_bytes: int = OLD_PEER_MAX_FRAME_BYTES,
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
    lane.max_frame_bytes = max_frame_bytes
    transport.write(hello(my_id, token))
    return lane
