"""The SDK's one view of the cluster and its one rule for moving a call between nodes.

:class:`NodeSet` owns what every client path needs to know of the nodes: their addresses and
ids, the order to try them in, which are set aside after a failure, the client's home node,
and how a channel to one is opened. :func:`judge` says what a failed call means, whatever its
transport: the node's own refusal (raise it), a call that never left or is safe to repeat
(the next node), or an answer lost after the call left (an :class:`IndeterminateError`, never
a second copy). :func:`send_with_failover` (and its blocking twin) is the one loop that acts
on it: the async client's calls, its AddJobs, a Publish, the blocking add and the
integrations' RESP calls (disq/integrations/resp_calls.py) each give it only a ``send`` of
one node, so their answers cannot drift apart (the publish loop once lacked a starting
node's "not run" and raised IndeterminateError where an add moved on).

How the order is chosen: the nodes Hello lists, best HELLO priority first (1 ok, 5 no link,
10 suspect, 100 dead or leaving), a random one among the best so that many clients spread,
then the same one while it answers (Disque's queues are per node: a consumer that hopped
between nodes would lean on federation for every job). A node whose transport fails is set
aside for a backoff (0.5 s doubling to 10 s).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Unpack

import grpc

from disq.client.errors import (
    AuthError,
    DisqError,
    IndeterminateError,
    LeavingError,
    UnavailableError,
    from_metadata,
)
from disq.client.starting import STARTING_DETAILS
from disq.proto_gen import api_pb2
from disq.tls import TlsConfig

T = TypeVar("T")

DEFAULT_ADDR = "127.0.0.1:7710"
LOST_JOB = "the job may exist"  # what an add's lost answer leaves
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.enable_retries", 0),  # the SDK decides what is safe to retry
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
# UNAVAILABLE with one of these: the call never reached a servicer, safe to send elsewhere.
# The last is a node's own, in the milliseconds after a restart before its client API loads
# (disq/server/late_services.py; disq/client/starting.py asks that node again first).
NOT_SENT_DETAILS = (
    "failed to connect",
    "Connection refused",
    "connections to all backends failing",
    STARTING_DETAILS,
)


@dataclass(slots=True)
class NodeAddr:
    """A node as the client knows it."""

    addr: str  # host:grpc_port
    node_id: str = ""
    priority: int = 1
    down_until: float = 0.0
    backoff_s: float = BACKOFF_MIN_S
    channel: Any = None
    stub: Any = None
    resp_port: int = 0  # its RESP port as HELLO gives it (0: not known yet)

    def usable(self, now: float) -> bool:
        return now >= self.down_until


def split_addresses(addresses: str | Sequence[str]) -> list[str]:
    if isinstance(addresses, str):
        addresses = addresses.split(",")
    out = [a.strip() for a in addresses if a.strip()]
    return out or [DEFAULT_ADDR]


class NodeSet:
    """The nodes a client knows, in the order to try them (see the module docstring)."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        rng: random.Random,
        tls: TlsConfig | None,
        refresh_s: float,
        discover: bool,
    ) -> None:
        self.seeds = split_addresses(addresses)
        self.by_addr: dict[str, NodeAddr] = {a: NodeAddr(a) for a in self.seeds}
        self.cluster_size = len(self.by_addr)  # the last HELLO's node count (seeds: none yet)
        self.refreshed_at = -1.0
        self.refresh_s = refresh_s
        self.discover = discover
        # The node that answered the last unrouted call: tried first while it answers.
        self.last_node: str | None = None
        self.rng = rng
        self.tls = tls
        self.credentials = tls.channel_credentials() if tls is not None else None

    # ------------------------------------------------------------------ order and marks
    def candidates(self, prefer: str | None = None) -> list[NodeAddr]:
        """Nodes to try, in order: the preferred one (by node id prefix) when usable, then
        the usable nodes by priority (random among equals, the home node first), then the
        ones set aside."""
        now = time.monotonic()
        nodes = list(self.by_addr.values())
        self.rng.shuffle(nodes)
        nodes.sort(key=lambda n: (not n.usable(now), n.priority))
        home = self.by_addr.get(self.last_node) if self.last_node else None
        if home is not None and home.usable(now) and home.priority <= nodes[0].priority:
            nodes.remove(home)
            nodes.insert(0, home)
        if prefer:
            for i, n in enumerate(nodes):
                if n.node_id.startswith(prefer) and n.usable(now):
                    nodes.insert(0, nodes.pop(i))
                    break
        return nodes

    def refresh_due(self) -> bool:
        return self.discover and (
            self.refreshed_at < 0 or time.monotonic() - self.refreshed_at >= self.refresh_s
        )

    def mark_down(self, n: NodeAddr) -> None:
        """``n``'s transport failed: set it aside for its backoff, and learn the cluster's
        state again soon."""
        n.down_until = time.monotonic() + n.backoff_s
        n.backoff_s = min(BACKOFF_MAX_S, n.backoff_s * 2)
        self.refreshed_at = -1.0

    def mark_up(self, n: NodeAddr) -> None:
        n.down_until = 0.0
        n.backoff_s = BACKOFF_MIN_S

    def answered(self, n: NodeAddr, *, home: bool = True) -> None:
        """``n`` answered: it is up and, unless the call was routed by job id, the home."""
        self.mark_up(n)
        if home:
            self.last_node = n.addr

    def leaving(self, n: NodeAddr) -> None:
        """``n`` refused as LEAVING (it is draining): set aside, and no longer the home."""
        self.mark_down(n)
        if self.last_node == n.addr:
            self.last_node = None

    def others_than(self, refused: set[str] | frozenset[str]) -> bool:
        """Whether a node not in ``refused`` is left to try."""
        return any(a not in refused for a in self.by_addr)

    def node(self, addr: str) -> NodeAddr:
        """The record of ``addr``, made if the client did not know it (a per-node call)."""
        return self.by_addr.get(addr) or self.by_addr.setdefault(addr, NodeAddr(addr))

    # ------------------------------------------------------------------ learning
    def learn(self, n: NodeAddr, r: api_pb2.HelloResponse) -> list[Any]:
        """Hello's answer from ``n``: its list replaces the priorities, and the addresses it
        no longer lists are dropped; their open channels are returned, for the caller to
        close on its own loop or thread."""
        self.mark_up(n)
        n.node_id = r.my_id
        seen = set()
        for info in r.nodes:
            if not info.grpc_port:
                continue
            addr = f"{info.host}:{info.grpc_port}"
            seen.add(addr)
            known = self.by_addr.get(addr)
            if known is None:
                known = self.by_addr[addr] = NodeAddr(addr)
            known.node_id = info.id
            known.priority = info.priority
            known.resp_port = info.resp_port
        self.cluster_size = len(seen) or self.cluster_size
        return self._forget_unlisted(seen)

    def learn_ports(self, r: api_pb2.HelloResponse) -> None:
        """Hello's answer with discovery off: the cluster's size and the RESP ports of the
        nodes the client knows (the URL may name one Service), nothing else."""
        self.cluster_size = sum(1 for n in r.nodes if n.grpc_port) or self.cluster_size
        for info in r.nodes:
            known = self.by_addr.get(f"{info.host}:{info.grpc_port}")
            if known is not None:
                known.resp_port = info.resp_port

    def _forget_unlisted(self, listed: set[str]) -> list[Any]:
        """Drop the addresses the cluster no longer lists: a node restarted at a new address
        (a new pod IP) is listed there, and its old address leads nowhere (or, later, to
        another node). Seeds stay, since they are how the user reaches the cluster (a DNS
        name, a Service), but a seed no longer listed is no longer taken for the node that
        was there: routing by node id must find that node at its new address."""
        moved_ids = {self.by_addr[a].node_id for a in listed}
        closing = []
        for addr in list(self.by_addr):
            if addr in listed:
                continue
            n = self.by_addr[addr]
            if addr in self.seeds:
                if n.node_id in moved_ids:
                    n.node_id = ""
                continue
            del self.by_addr[addr]
            if self.last_node == addr:
                self.last_node = None
            if n.channel is not None:
                closing.append(n.channel)
                n.channel = n.stub = None
        return closing

    # ------------------------------------------------------------------ channels
    def channel_options(self) -> list[tuple[str, Any]]:
        if self.tls is None:
            return CHANNEL_OPTIONS
        return [*CHANNEL_OPTIONS, *self.tls.channel_options()]

    def open_aio_channel(self, addr: str) -> Any:
        import grpc.aio

        if self.tls is None:
            return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
        return grpc.aio.secure_channel(addr, self.credentials, options=self.channel_options())

    def open_sync_channel(self, addr: str) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
        return grpc.secure_channel(addr, self.credentials, options=self.channel_options())


# ---------------------------------------------------------------------- failures
def was_not_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call certainly never reached a node's servicer."""
    call: Any = exc  # a failed call is both an RpcError and a grpc.Call (or an AioRpcError)
    if call.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = call.details() or ""
    return any(s in details for s in NOT_SENT_DETAILS)


def refusal(exc: grpc.RpcError, addr: str) -> DisqError | None:
    """The node's own refusal (its ErrorInfo, or a refused password), or None for a failure
    of the transport."""
    call: Any = exc
    code, details = call.code(), call.details() or ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthError(details or "NOAUTH Authentication required.", node=addr)
    return from_metadata(call.trailing_metadata(), details, addr)


def judge(
    nodes: NodeSet,
    n: NodeAddr,
    refused: DisqError | None,
    *,
    not_sent: bool,
    why: str,
    what: str,
    repeatable: bool = False,
    lost: str = LOST_JOB,
) -> DisqError | None:
    """What a failed call to ``n`` means, whatever its transport (gRPC, RESP): the node's
    ``refused`` (its own error: raise it), None when the next node may take the call (it
    never left, or it is ``repeatable``: reads, acks, nacks), or an IndeterminateError for
    an add whose answer was lost after it left. A transport failure sets ``n`` aside."""
    if refused is not None:
        return refused
    nodes.mark_down(n)
    if repeatable or not_sent:
        return None
    return IndeterminateError(
        f"{what} sent to {n.addr} but no answer came ({why}): {lost}", node=n.addr
    )


def judge_failure(
    nodes: NodeSet,
    n: NodeAddr,
    exc: grpc.RpcError,
    *,
    what: str,
    repeatable: bool = False,
    lost: str = LOST_JOB,
) -> DisqError | None:
    """:func:`judge` of a failed gRPC call."""
    call: Any = exc
    return judge(
        nodes,
        n,
        refusal(exc, n.addr),
        not_sent=was_not_sent(exc),
        why=call.code().name,
        what=what,
        repeatable=repeatable,
        lost=lost,
    )


# ---------------------------------------------------------------------- the one loop
class NotSent(Exception):
    """Raised by a send: the call certainly never left for the node (its channel did not
    connect, was closed under it): the next node may take it."""


class NoAnswer(Exception):
    """Raised by a send: the call may have run on the node, and its answer was lost (a reset
    after the write): an add is indeterminate, a repeatable call goes to the next node."""


class How(TypedDict, total=False):
    """How a call moves between nodes (:class:`Failover`'s options): ``what`` names it in
    errors; ``repeatable``: safe to run twice (a lost answer goes to the next node, not
    IndeterminateError); ``lost``: what an add's lost answer leaves; ``prefer``: a node id
    prefix tried first (a job's creator; the answer then does not move the home node);
    ``refused``: addresses that said LEAVING already; ``leaving_moves``: LEAVING moves the
    call to the next node (adds: the node did nothing), rather than being raised."""

    what: str
    repeatable: bool
    lost: str
    prefer: str | None
    refused: frozenset[str]
    leaving_moves: bool


@dataclass(slots=True)
class Failover:
    """One call's way through the nodes (the loop of :func:`send_with_failover`): the order,
    what each failure of a send means (:func:`judge`), the marks, the last failure. The
    options are :class:`How`'s."""

    nodes: NodeSet
    what: str = "call"
    repeatable: bool = False
    lost: str = LOST_JOB
    prefer: str | None = None
    refused: frozenset[str] = frozenset()  # said LEAVING to this call
    leaving_moves: bool = True
    last: str = "no node known"
    _n: NodeAddr = field(default_factory=lambda: NodeAddr(""))

    def order(self) -> list[NodeAddr]:
        return [n for n in self.nodes.candidates(self.prefer) if n.addr not in self.refused]

    def trying(self, n: NodeAddr) -> Failover:
        self._n = n
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: object, exc: BaseException | None, tb: object) -> bool:
        """True (the loop goes on) when the next node may take the call; else the failure,
        or the error it means, is raised."""
        n = self._n
        if isinstance(exc, grpc.RpcError):
            err = judge_failure(
                self.nodes, n, exc, what=self.what, repeatable=self.repeatable, lost=self.lost
            )
        elif isinstance(exc, NotSent | NoAnswer):
            not_sent = isinstance(exc, NotSent)
            err = judge(
                self.nodes,
                n,
                None,
                not_sent=not_sent,
                why=str(exc),
                what=self.what,
                repeatable=self.repeatable,
                lost=self.lost,
            )
        elif isinstance(exc, DisqError):
            err = exc  # the node's refusal, as the send read it
        else:
            return False  # none (an answer), or not a failure of the call
        if err is None:
            self.last = f"{n.addr}: {_details(exc)}"
            return True
        if isinstance(err, LeavingError) and self.leaving_moves:
            # The node is draining and did nothing: the call, and the client's home, move.
            self.refused |= {n.addr}
            if self.nodes.others_than(self.refused):
                self.nodes.leaving(n)
                self.last = f"{n.addr}: {err}"
                return True
        if err is exc:
            return False
        raise err from None

    def answered(self, n: NodeAddr, result: T) -> T:
        """``n`` answered: it is up and, unless the call was routed by job id, the home."""
        self.nodes.answered(n, home=self.prefer is None)
        return result

    def exhausted(self) -> UnavailableError:
        return UnavailableError(f"{self.what}: no node answered (last: {self.last})")


async def send_with_failover(
    nodes: NodeSet, send: Callable[[NodeAddr], Awaitable[T]], **how: Unpack[How]
) -> T:
    """``send(n)`` on each node in :meth:`NodeSet.candidates`'s order until one answers; its
    answer. ``how``: :class:`How`. ``send`` raises what the call met: a gRPC
    error, :class:`NotSent`, :class:`NoAnswer`, or the node's refusal as a DisqError;
    anything else passes through untouched."""
    way = Failover(nodes, **how)
    for n in way.order():
        with way.trying(n):
            return way.answered(n, await send(n))
    raise way.exhausted()


def send_with_failover_sync(nodes: NodeSet, send: Callable[[NodeAddr], T], **how: Unpack[How]) -> T:
    """:func:`send_with_failover` for a blocking ``send``, on the caller's thread."""
    way = Failover(nodes, **how)
    for n in way.order():
        with way.trying(n):
            return way.answered(n, send(n))
    raise way.exhausted()


def _details(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError):
        call: Any = exc
        return f"{call.code().name} {call.details() or ''}".strip()
    return str(exc)
