"""One peer's outbound link as PeerLinks keeps it (address, queue, writer task, lane) and the
gRPC settings of the links: what peer_link.py's PeerLinks builds on (split from it, issue 32).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any

import grpc

from disq.core.messages import Message
from disq.server.job_lane import OutboundLane

# disq.tls (with tempfile, shutil, bz2, lzma: 3-4 ms of a start) is imported by disq-node
# only when TLS is configured; the links only read the TlsConfig they are given.
if TYPE_CHECKING:
    from disq.tls import TlsConfig

BACKOFF_MIN_S = 0.05
# A peer that is down is dialled again every 100 ms, as Disque's bus reconnects its links
# (clusterCron): a restarted node is found within 100 ms of listening, whether or not it
# speaks first. A refused connect on a live host costs microseconds; a silent one (SYN
# dropped) is bounded by the handshake timeout, so the rate stays low there.
BACKOFF_MAX_S = 0.1
HANDSHAKE_TIMEOUT_S = 5.0  # a peer that accepts TCP but never answers (SIGSTOP) is retried
ONESHOT_TIMEOUT_S = 5.0  # whole send_to_address exchange
MAX_ONESHOTS = 64  # concurrent send_to_address exchanges; more are dropped
COALESCE_MAX_BYTES = 4 << 20  # cap of one gRPC write built from several queued frames
CLOSE_GRACE_S = 0.5

# Frames can be large (thousands of jobs of up to the job-size limit), and peers are trusted
# (a trusted network, or with TLS certificates of the cluster's CA), so no message-size cap:
# a frame that hit one would fail its whole stream, and be retried into the same failure.
COMMON_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    *COMMON_OPTIONS,
    # A peer that vanished without a FIN/RST (host down, SIGSTOP, partition) is noticed by
    # keepalive pings instead of a write that hangs on a full TCP window forever.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),  # links can be idle for long: keep pinging
    ("grpc.keepalive_permit_without_calls", 1),
    # Our own loop retries; the channel's reconnect backoff (default up to 120 s) must not
    # stretch the 50 ms .. 100 ms we promise.
    ("grpc.initial_reconnect_backoff_ms", int(BACKOFF_MIN_S * 1000)),
    ("grpc.min_reconnect_backoff_ms", int(BACKOFF_MIN_S * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX_S * 1000)),
    ("grpc.enable_retries", 0),  # a replayed frame would be a duplicate; the protocol retries
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    *COMMON_OPTIONS,
    # gRPC sets SO_REUSEPORT by default, which would let two nodes on one machine bind the
    # same port and split its connections silently: a port clash must fail loudly instead.
    ("grpc.so_reuseport", 0),
    # Accept the clients' keepalive pings above instead of answering them with GOAWAY.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


def target_of(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"  # IPv6 literal
    return f"{host}:{port}"


class OutboundPeer:
    """Outbound side of the link to one peer: its address, queue and writer task."""

    __slots__ = (
        "columnar",
        "headers",
        "held",
        "host",
        "lane",
        "node_id",
        "port",
        "queue",
        "records",
        "seq",
        "task",
        "tried",
        "up",
        "up_event",
        "wakeup",
    )

    def __init__(self, node_id: str, host: str, port: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        # Serialized frames, at most PeerLinks.max_queued_frames of them.
        self.queue: deque[bytes] = deque()
        self.seq = 0  # never reset, so seq stays increasing across reconnects
        self.task: asyncio.Task[None] | None = None
        self.up = False
        self.columnar = False  # this connection's handshake said the peer reads batch forms
        self.records = False  # ... and JobRecords (peer_wire.py)
        self.headers = False  # ... and records with job headers (job_record.py)
        self.up_event = asyncio.Event()
        # Set once the first connection attempt ended (up, refused, timed out): the node
        # has contacted this peer, which is what its readiness waits for.
        self.tried = asyncio.Event()
        # Messages held for the first dial (PeerLinks._hold), one list per flush: sent, in
        # order and before anything newer, as the link comes up (its lane or its stream, as
        # any message); dropped if the dial fails.
        self.held: list[list[Message]] = []
        self.wakeup: asyncio.Future[None] | None = None
        # The job lane of this connection (job_lane.py), None while it has none: then every
        # message goes on the stream.
        self.lane: OutboundLane | None = None

    def wake(self) -> None:
        w = self.wakeup
        if w is not None and not w.done():
            w.set_result(None)


def make_channel(target: str, tls: TlsConfig | None) -> Any:
    """The gRPC channel of one outbound link (or one-shot exchange) to ``target``."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(
        target,
        tls.channel_credentials(),
        options=[*CHANNEL_OPTIONS, *tls.channel_options()],
    )


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


async def close_channel(channel: Any) -> None:
    # Closing must not raise into the loop whatever state the channel is in.
    with contextlib.suppress(Exception):
        await channel.close()
