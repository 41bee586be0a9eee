"""The blocking client's add on the caller's own thread: grpc's sync channel, no loop hop.

Why: ``Client`` runs an :class:`AsyncClient` on a private loop thread, so each blocking call
hands a coroutine to that thread and waits for it (``run_coroutine_threadsafe``), and the call
itself goes through grpc.aio. For a producer that adds one job at a time (a Celery or Dramatiq
publish) that is two thread switches and the aio machinery per add: ~550 us of the client's
CPU per add against ~330 us here, where grpc's bare sync stub takes ~250 us
(docs/benchmarks.md, "Celery and Dramatiq"). Here the caller's thread makes one
unary ``AddJob`` on a ``grpc.Channel`` and returns when the node has answered, as before.
That is for adds that come one at a time; adds that overlap go to the loop, batched
(:meth:`BlockingAdder.add_job` says why).

What stays the async client's: the view of the cluster (the nodes, their priorities and
backoffs, the home node ``last_node``), its refresh (a Hello, on the loop thread, when the
view is due, as often as the async client does it), the password metadata and the TLS
credentials. So both paths choose the same node in the same order and set aside the same dead
ones. That view is read and its plain fields written from the callers' threads too: each
write is a single attribute store (atomic under the GIL) and a stale read only orders the
candidates differently, which every caller tolerates already.

The failover loop is the async client's (:func:`disq.client.failover.send_with_failover_sync`,
the twin of its): a node whose channel cannot connect within ``connect_timeout_s`` is set
aside and the next one tried; an add that may have left is never sent twice
(:class:`IndeterminateError`); a node's refusal is raised as its class
(:mod:`disq.client.errors`); LEAVING moves the add to the next node.

Fork: its channels are closed before a fork with the rest of the client's and opened again
on the next add, in either process (:mod:`disq.client.forking`); an add is a call of the
client's gate, so no fork happens in the middle of one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Unpack

import grpc

from disq.client.adds import AddOptions, fill_add
from disq.client.errors import UnavailableError
from disq.client.failover import NodeAddr, NodeSet, NotSent, refusal, send_with_failover_sync
from disq.client.forking import ORPHANS, CallGate, ForkError, check_usable
from disq.client.starting import SyncUnary
from disq.proto_gen import api_pb2

_ADD_JOB = "/disq.v1.Queue/AddJob"
# After two adds overlap, every add goes to the loop (batched) for this long; then the
# caller's-thread path is tried again. Long enough that a steady multi-threaded producer
# stays on the loop (a retry costs one overlap), short enough that a producer gone back to
# one thread gets the fast path within a second.
SHARED_FOR_S = 1.0
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"


@dataclass(slots=True)
class _SyncNode:
    """One node's sync channel. ``ready``: the channel was seen connected and nothing failed
    on it since, so an add goes out without asking the channel's state first."""

    channel: grpc.Channel
    add_job: Any  # the AddJob multi-callable
    probe: Any  # the health check's multi-callable (bytes in, bytes out)
    ready: bool = False


class BlockingAdder:
    """``add_job`` for :class:`disq.client.sync.Client`, run on the calling thread."""

    def __init__(
        self,
        view: NodeSet,
        *,
        metadata: Any,
        timeout_s: float,
        connect_timeout_s: float,
        refresh: Callable[[], None],
        add_on_loop: Callable[..., str],
        gate: CallGate,
    ) -> None:
        self._view = view  # the async client's own: one view of the cluster for both
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._gate = gate
        self._refresh = refresh  # runs the async client's refresh on its loop thread
        self._add_on_loop = add_on_loop  # the async client's add_job, run on its loop
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards _nodes, _closed and _on_loop
        self._loop_idle = threading.Condition(self._lock)  # _on_loop went to 0
        self._nodes: dict[str, _SyncNode] = {}
        self._closed = False
        self._alone = threading.Lock()  # held by the add on the caller's-thread path
        self._shared_until = 0.0  # monotonic time until which adds go to the loop
        self._on_loop = 0  # adds handed to the loop now

    def close(self) -> None:
        """Refuse new adds, wait for those handed to the loop (so the loop is not stopped
        under them: an add submitted to a stopped loop would wait forever), and close the
        channels (an add on its way here ends with IndeterminateError)."""
        forked = os.getpid() != self._pid
        with self._lock:
            self._closed = True
            nodes, self._nodes = self._nodes, {}
            while self._on_loop and not forked:  # a forked child has none of those threads
                self._loop_idle.wait()
        if forked:
            return  # the parent's channels: not ours to shut down from a forked child
        for node in nodes.values():
            node.channel.close()

    def suspend(self) -> None:
        """Before a fork, with no add in flight (the gate is held): close the channels; the
        next add opens them again."""
        with self._lock:
            nodes, self._nodes = self._nodes, {}
        for node in nodes.values():
            node.channel.close()

    def adopt(self) -> None:
        """In a forked child: this process's adder now. Channels still open (the fork did
        not wait for the parent's calls) are left alone: freeing one runs gRPC's copied
        state."""
        ORPHANS.extend(node.channel for node in self._nodes.values())
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._loop_idle = threading.Condition(self._lock)
        self._alone = threading.Lock()
        self._nodes = {}
        self._on_loop = 0

    def add_job(self, queue: str, body: bytes | str, **options: Unpack[AddOptions]) -> str:
        """The async client's ``add_job`` (same options, same errors), blocking.

        An add goes on the caller's thread while this client's adds come one at a time. Once
        two overlap (several threads publishing), the one that finds the other on its way
        goes to the loop, and so does every add for the next ``SHARED_FOR_S``: there the
        adds of one moment travel as one AddJobs. A lone producer so saves the hop, and
        many threads keep the batching, which a unary call per add would lose (one call's
        cost on the node caps it: ~1,700 adds/s from 16 or 64 threads against 9,000-16,000
        batched), and which one thread's unary calls beside it would slow (they take the
        GIL from the loop: measured by a probe of 1 to 64 threads, in git's history)."""
        with self._gate.call():
            return self._add_job(queue, body, options)

    def _add_job(self, queue: str, body: bytes | str, options: AddOptions) -> str:
        check_usable()
        if os.getpid() != self._pid:
            raise ForkError(
                f"this client was made in process {self._pid}, before a fork: "
                "make a new Client in the child"
            )
        if self._closed:
            raise UnavailableError("client is closed")
        if time.monotonic() >= self._shared_until and self._alone.acquire(blocking=False):
            try:
                return self._add_here(queue, body, options)
            finally:
                self._alone.release()
        self._shared_until = time.monotonic() + SHARED_FOR_S
        with self._lock:
            if self._closed:
                raise UnavailableError("client is closed")
            self._on_loop += 1
        try:
            return self._add_on_loop(queue, body, **options)
        finally:
            with self._lock:
                self._on_loop -= 1
                if not self._on_loop:
                    self._loop_idle.notify_all()

    def _add_here(self, queue: str, body: bytes | str, options: AddOptions) -> str:
        request = api_pb2.AddJobRequest()
        fill_add(request, queue, body, options)  # TypeError/ValueError: a bad argument
        deadline_s = request.timeout_ms / 1000 + self._timeout_s

        def send(n: NodeAddr) -> str:
            node = self._node(n.addr)
            if not self._connected(node):
                raise NotSent("not reachable")
            try:
                response = node.add_job(request, timeout=deadline_s, metadata=self._metadata)
            except ValueError:
                # Its channel was closed under us (the address was just forgotten, or the
                # client closed): the call never started, so the next node may take it.
                raise NotSent("channel closed") from None
            except grpc.RpcError as exc:
                if refusal(exc, n.addr) is None:
                    node.ready = False  # its transport failed: checked before the next add
                raise
            return str(response.id)

        return send_with_failover_sync(self.view(), send, what="add")

    def view(self) -> NodeSet:
        """The async client's view (its own records, not copies), refreshed first when it
        is due (on the loop thread)."""
        if self._view.refresh_due():
            self._refresh()
        return self._view

    def _node(self, addr: str) -> _SyncNode:
        node = self._nodes.get(addr)
        if node is not None:
            return node
        with self._lock:
            if self._closed:
                raise UnavailableError("client is closed")
            node = self._nodes.get(addr)
            if node is None:
                node = self._nodes[addr] = self._open(addr)
                self._forget_unknown()
            return node

    def _open(self, addr: str) -> _SyncNode:
        channel = self._view.open_sync_channel(addr)
        add = channel.unary_unary(
            _ADD_JOB,
            request_serializer=api_pb2.AddJobRequest.SerializeToString,
            response_deserializer=api_pb2.AddJobResponse.FromString,
        )
        # Every node serves the standard health service; its empty request is b"".
        probe = channel.unary_unary(_HEALTH_CHECK)
        # Both are asked again while the node is starting (starting.py).
        return _SyncNode(channel, SyncUnary(add), SyncUnary(probe))

    def _forget_unknown(self) -> None:
        """Close the channels of addresses the async client no longer knows (a node that
        moved, a forgotten one); called under the lock when a channel is added, so the
        table never holds more channels than the client has known addresses plus one."""
        known = set(self._view.by_addr)
        for addr in [a for a in self._nodes if a not in known]:
            self._nodes.pop(addr).channel.close()

    def _connected(self, node: _SyncNode) -> bool:
        """Wait up to ``connect_timeout_s`` for a channel not known to be connected: a node
        that does not connect has certainly not received the add, so the next one may.

        The wait is a health check that waits for the connection (``wait_for_ready``), on
        the caller's thread. Not ``grpc.channel_ready_future``: it polls from a thread of
        its own, inside grpc for up to 0.2 s after the wait, and grpc skips its fork
        handlers while another thread is inside it ("Other threads are currently calling
        into gRPC"), which leaves a child forked in that window without working grpc."""
        if node.ready:
            return True
        try:
            node.probe(b"", timeout=self._connect_timeout_s, wait_for_ready=True)
        except grpc.RpcError:
            return False
        node.ready = True
        return True
