"""Run a real multi-process disq cluster on this machine, and hurt it.

Each node is ``python -m disq.node_main node.conf`` (Disque's config-file format; a
:class:`cluster.nodeproc.NodeProcess`, as every node the tests start) in its own
directory ``<base_dir>/node-<i>/``::

    node-<i>/node.conf    the config the lab wrote (port, dir, appendonly, fsync, timeout)
    node-<i>/data/        the node's data dir: node id + AOF, kept across kill -9 / restart
    node-<i>/node.log     the node's own log (``logfile``)
    node-<i>/stdout.log   stdout + stderr of every incarnation (crash tracebacks land here)
    lab.log               what the lab did and when

Faults, all driven from outside the node:

* ``kill9(i)`` / ``restart(i)``: SIGKILL, then the same conf (same dir: same id, AOF replay).
* ``move(i)`` (namespaces only): SIGKILL, a new namespace with a new address (the old one is
  deleted), the conf rewritten for it, and a restart on the same data dir: a pod rescheduled
  with a new IP.
* ``pause(i)`` / ``resume(i)``: SIGSTOP / SIGCONT. A stopped node keeps its sockets open, so
  peers and clients see a node that accepts bytes and never answers.
* ``partition(groups)`` / ``heal_partition()``, ``cut(i, j, one_way=...)`` / ``uncut(i, j)``,
  ``slow(i, j, delay_ms)`` / ``unslow(i, j)``, and ``heal()`` (every link back).

How links are cut depends on ``network`` (:attr:`Lab.partitions` says what was done).
``Lab`` defaults to ``"inprocess"``, because many tests reach the nodes at 127.0.0.1;
``cluster.jepsen`` and ``python -m cluster.lab`` default to ``"auto"`` (namespaces when
possible, else in-process):

* ``netns`` (root, with iproute2): every node runs in its own network namespace
  (``ip netns exec``) with a veth to a bridge in the root namespace, binds and advertises its
  namespace address (10.213.S.<10+i>), and links are cut or slowed with ``tc`` rules on the
  sending node's egress (:mod:`cluster.netns`). The kernel drops the packets: TCP and gRPC
  streams stall, time out and reconnect as they would on a real network, one-way cuts are
  possible, and the rules live in the namespace, so they survive kill -9 and SIGSTOP.
  With ``bind_any`` the nodes bind 0.0.0.0 and are told their address with
  ``advertise-host``, as a container or a pod is.
* ``in-process`` (fallback, or ``network="inprocess"``): ``DEBUG DROP-PEERS`` on the nodes;
  connections stay up and the node drops frames itself. A one-way cut becomes a two-way cut
  at the one node, and slow links are not possible. The lab remembers the wanted drop lists
  and re-applies them to a node that comes back from kill -9 (a fresh process forgot them)
  or from SIGSTOP (it could not be told while stopped). Why namespaces were not used is
  written to ``lab.log`` and kept in :attr:`Lab.partitions`.

What a fault did can be observed from outside: :meth:`Lab.refuses` (a killed node's port
refuses connections), :meth:`Lab.ping_times_out` (a stopped node does not answer),
:meth:`Lab.hello_flags` (a node's view of its peers: a cut peer shows PFAIL / FAIL / no
link), :meth:`Lab.slow_packets` (the slow link's tc class carried packets).

Nodes run in their own session (``start_new_session``) so a Ctrl-C in the terminal reaches
only the lab, which then stops the nodes with SIGTERM, as a real operator would.

``python -m cluster.lab --nodes 5`` starts a cluster, prints its ports and ids, and stops it
on Ctrl-C.

:class:`FlagServer` starts one server the way a beanstalkd harness does (``-l``, ``-p`` and
more flags, no config file): a standalone disq node, or beanstalkd itself beside it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from cluster import netns, ports
from cluster.nodeproc import NodeProcess, NodeStartError, node_command, stop_all
from cluster.ports import BUS_PORT_OFFSET
from cluster.resp_client import Reply, RespClient, RespError, info_fields

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# A fresh Python process imports grpc, uvloop and the engine, and on a loaded 2-core machine
# with five of them starting at once that takes seconds: be generous, fail with the log.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0

UP = "up"
PAUSED = "paused"
KILLED = "killed"
STOPPED = "stopped"
CRASHED = "crashed"  # exited while the lab believed it up: a finding, not a fault we made
NEW = "new"

NETWORKS = ("auto", "netns", "inprocess")


class LabError(RuntimeError):
    """The lab could not do what was asked (a node did not start, the cluster did not form)."""


@dataclass
class NodeHandle:
    """One node of the lab. ``port`` and ``dir`` never change; ``proc`` does on restart.
    ``process`` is the node's :class:`cluster.nodeproc.NodeProcess` (None before its first
    start), ``proc`` its current incarnation's Popen."""

    index: int
    port: int
    dir: Path
    host: str = HOST
    id: str | None = None
    process: NodeProcess | None = None
    state: str = NEW
    starts: int = 0

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process.proc if self.process is not None else None

    @property
    def bus_port(self) -> int:
        return self.port + BUS_PORT_OFFSET

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def conf_path(self) -> Path:
        return self.dir / "node.conf"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_path(self) -> Path:
        return self.dir / "node.log"

    @property
    def stdout_path(self) -> Path:
        return self.dir / "stdout.log"

    def client(self, timeout: float = 5.0) -> RespClient:
        """A new connection to this node's RESP port (the caller closes it)."""
        return RespClient(self.host, self.port, timeout=timeout)

    def call(self, *args: str | int | bytes, timeout: float = 5.0) -> Reply:
        """One command on a throw-away connection."""
        with self.client(timeout) as c:
            return c.call(*args)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The end of stdout.log and node.log, for error messages."""
        out = []
        for path in (self.stdout_path, self.log_path):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(out) or "(no log)"


def _conf_arg(path: Path) -> str:
    # Disque splits config lines like redis-cli arguments (sdssplitargs): quote if needed.
    text = str(path)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"' if " " in text else text


def find_base_port(n: int, host: str = HOST, rng: random.Random | None = None) -> int:
    """A base port P with P..P+n-1 and their bus ports P+10000.. all free right now, never
    handed out before by this process, and this pytest-xdist worker's (cluster/ports.py).
    Random rather than sequential so that parallel labs (two test runs) rarely collide."""
    offsets = [*range(n), *(BUS_PORT_OFFSET + i for i in range(n))]
    try:
        return ports.pick(offsets, host, rng)
    except RuntimeError as exc:
        raise LabError(str(exc)) from None


@dataclass(frozen=True)
class View:
    """One node's view of the cluster: CLUSTER INFO counts and HELLO's healthy peers."""

    known: int  # cluster_known_nodes (includes itself)
    reachable: int  # cluster_reachable_nodes, shown for diagnosis only
    ok_peers: int  # other lab nodes HELLO lists with priority 1

    def __repr__(self) -> str:
        return f"(known={self.known} reachable={self.reachable} ok_peers={self.ok_peers})"


def _text(x: object) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


@dataclass
class LabStats:
    kills: int = 0
    restarts: int = 0
    stops: int = 0
    pauses: int = 0
    resumes: int = 0
    partitions: int = 0
    cuts: int = 0
    slows: int = 0
    heals: int = 0
    remeets: int = 0
    moves: int = 0
    crashes: int = 0
    id_changes: list[str] = field(default_factory=list)


class Lab:
    """A local cluster of ``n`` nodes on RESP ports ``base_port .. base_port+n-1``.

    ``base_port`` 0 or None picks a free range. ``node_cmd`` replaces
    ``[python, "-m", "disq.node_main"]`` (the conf path is appended), e.g. to run another
    Disque-compatible server under the same lab. ``bind_any``: nodes bind 0.0.0.0 and
    advertise their address (``advertise-host``) instead of binding it. ``env``: set in the
    nodes' environment (e.g. ``PYTHONPATH`` at another checkout, ``DISQ_PURE``);
    ``node_conf(node)``: config lines of one node (a port of its own).
    """

    def __init__(
        self,
        n: int,
        base_dir: str | os.PathLike[str],
        base_port: int | None = None,
        *,
        node_timeout_ms: int = 2000,
        fsync: str = "everysec",
        python: str = sys.executable,
        node_cmd: Sequence[str] | None = None,
        host: str = HOST,
        start_timeout: float = START_TIMEOUT,
        form_timeout: float | None = None,
        extra_conf: Sequence[str] = (),
        network: str = "inprocess",
        bind_any: bool = False,
        env: Mapping[str, str] | None = None,
        node_conf: Callable[[NodeHandle], Sequence[str]] | None = None,
    ) -> None:
        if n < 1:
            raise ValueError("a lab needs at least one node")
        if fsync not in ("always", "everysec", "no"):
            raise ValueError(f"fsync must be always, everysec or no, not {fsync!r}")
        if network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, not {network!r}")
        self.n = n
        self.base_dir = Path(base_dir).resolve()
        self.base_port = base_port or find_base_port(n, host)
        self.node_timeout_ms = node_timeout_ms
        self.fsync = fsync
        self.node_cmd = list(node_cmd) if node_cmd else node_command(python)
        self.host = host
        self.start_timeout = start_timeout
        # Forming needs a few gossip rounds; failure detection works in node timeouts.
        self.form_timeout = form_timeout or max(30.0, 10 * node_timeout_ms / 1000)
        self.extra_conf = list(extra_conf)
        self.bind_any = bind_any
        # Set in every node's environment after the lab's own PYTHONPATH, so that it can name
        # another checkout's code (a benchmark of two builds) or DISQ_PURE.
        self.env = dict(env or {})
        # Config lines of one node, after extra_conf: what differs per node (a free port).
        self.node_conf = node_conf
        self.nodes = [
            NodeHandle(i, self.base_port + i, self.base_dir / f"node-{i}", host) for i in range(n)
        ]
        self.stats = LabStats()
        self.network = network
        self.net: netns.Network | None = None
        # "netns" or "in-process (why)"; decided by start().
        self.partitions = "not started"
        # Wanted link faults. From partition(): node -> nodes it must not talk to; from cut():
        # directed (from, to) pairs; from slow(): (from, to) -> delay ms. All empty: healed.
        self._partition: dict[int, set[int]] = {}
        self._cuts: set[tuple[int, int]] = set()
        self._slow: dict[tuple[int, int], int] = {}
        self._lock = threading.RLock()
        self._log_file: TextIO | None = None
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def node(self, i: int) -> NodeHandle:
        return self.nodes[i]

    def start(self) -> None:
        """Spawn every node, wait until each answers PING, MEET them, wait until formed."""
        with self._lock:
            if self._started:
                raise LabError("the lab is already running")
            self.base_dir.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.base_dir / "lab.log", "a", buffering=1)
            atexit.register(self._kill_leftovers)
            self._started = True
            try:
                self._setup_network()
                for node in self.nodes:
                    self._write_conf(node)
                    self._spawn(node)
                deadline = time.monotonic() + self.start_timeout
                for node in self.nodes:
                    self._wait_ready(node, deadline)
                for node in self.nodes:
                    node.id = self._fetch_id(node)
                    node.state = UP
                self._note("ready", ids=[nd.id for nd in self.nodes])
                self.meet()
                self.wait_cluster(self.form_timeout)
            except BaseException:
                self.stop_all()
                raise

    def _setup_network(self) -> None:
        """Namespaces if wanted and possible, else the in-process fallback (logged)."""
        why: str | None = None
        if self.network == "inprocess":
            why = "asked for"
        else:
            why = netns.unavailable_reason()
            if why is None:
                net = netns.Network(self.n)
                try:
                    stale = net.create()
                except (netns.NetnsError, ValueError) as exc:
                    why = f"namespace setup failed: {exc}"
                else:
                    self.net = net
                    if stale:
                        self._note("netns-stale-removed", names=",".join(stale))
                    for nd in self.nodes:
                        nd.host = net.addr(nd.index)
            if why is not None and self.network == "netns":
                raise LabError(f"network namespaces wanted but not possible: {why}")
        if self.net is not None:
            self.partitions = "netns"
            self._note("network", partitions="netns", layout=self.net.describe())
        else:
            self.partitions = f"in-process ({why})"
            self._note("network", partitions="in-process", why=why)

    @property
    def can_slow(self) -> bool:
        """Whether :meth:`slow` works here (namespaces, and a kernel with htb or netem)."""
        return self.net is not None and self.net.slow_mode != "none"

    @property
    def one_way_cuts(self) -> bool:
        """Whether a cut can really be one-way (in-process cuts are two-way at the node)."""
        return self.net is not None

    def _write_conf(self, node: NodeHandle) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(exist_ok=True)
        # bind_any: a container's or a pod's way, every interface and the address to give
        # out named apart; otherwise the node binds the address it gives out.
        where = (
            ["bind 0.0.0.0", f"advertise-host {node.host}"]
            if self.bind_any
            else [f"bind {node.host}"]
        )
        lines = [
            f"port {node.port}",
            *where,
            # Absolute paths: Disque chdirs into ``dir`` while reading the file, so a relative
            # ``logfile`` after it would land in the data dir; absolute is unambiguous.
            f"dir {_conf_arg(node.data_dir)}",
            "appendonly yes",
            f"appendfsync {self.fsync}",
            f"cluster-node-timeout {self.node_timeout_ms}",
            "loglevel notice",
            f"logfile {_conf_arg(node.log_path)}",
            *self.extra_conf,
            *(self.node_conf(node) if self.node_conf is not None else ()),
        ]
        node.conf_path.write_text("\n".join(lines) + "\n")

    def _spawn(self, node: NodeHandle) -> None:
        if node.process is None:
            node.process = NodeProcess(
                [str(node.conf_path)],
                cmd=self.node_cmd,
                env=self.env,
                cwd=node.dir,
                log_path=node.stdout_path,
                # A node without peers answers PING before its bus listens (issue 31): the
                # lab waits for both, the bus being what its MEETs and SDK users reach.
                ready=lambda: node.call("PING", timeout=1.0) == "PONG" and self._bus_listens(node),
                new_session=True,
                start_timeout=self.start_timeout,
                poll_interval=0.05,
                name=f"node {node.index} (port {node.port})",
                mark_starts=True,
            )
        node.starts += 1
        node.process.prefix = self._exec_prefix(node)  # a moved node's new namespace
        node.process.spawn()
        node.state = NEW
        self._note("spawn", node=node.index, pid=node.pid, port=node.port)

    def _exec_prefix(self, node: NodeHandle) -> list[str]:
        return self.net.exec_prefix(node.index) if self.net is not None else []

    def _wait_ready(self, node: NodeHandle, deadline: float) -> None:
        assert node.process is not None
        try:
            node.process.wait_ready(deadline)
        except NodeStartError as exc:
            if exc.returncode is not None:
                raise LabError(
                    f"node {node.index} (port {node.port}) exited with {exc.returncode} while "
                    "starting\n" + node.log_tail()
                ) from None
            raise LabError(
                f"node {node.index} (port {node.port}) did not answer PING and listen on "
                f"its bus in time\n" + node.log_tail()
            ) from None

    @staticmethod
    def _bus_listens(node: NodeHandle) -> bool:
        try:
            socket.create_connection((node.host, node.bus_port), timeout=1.0).close()
        except OSError:
            return False
        return True

    def _fetch_id(self, node: NodeHandle) -> str:
        reply = node.call("CLUSTER", "MYID")
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def cluster_reset(self, i: int, hard: bool = True) -> None:
        """``CLUSTER RESET HARD|SOFT`` on node ``i``. HARD gives the node a new id, as
        Disque's: the lab learns it, so its views and checks name the node rightly."""
        node = self.nodes[i]
        reply = node.call("CLUSTER", "RESET", "HARD" if hard else "SOFT")
        if _text(reply) != "OK":
            raise LabError(f"node {i}: CLUSTER RESET answered {reply!r}")
        old, node.id = node.id, self._fetch_id(node)
        self._note("reset", node=i, hard=hard, old=old, new=node.id)

    def meet(self) -> None:
        """``CLUSTER MEET`` every other node from node 0; gossip does the rest."""
        first = self.nodes[0]
        for other in self.nodes[1:]:
            first.call("CLUSTER", "MEET", other.host, other.port)
        self._note("meet", via=0)

    # -- observing ------------------------------------------------------------------------

    def cluster_info(self, i: int, timeout: float = 2.0) -> dict[str, str]:
        reply = self.nodes[i].call("CLUSTER", "INFO", timeout=timeout)
        assert isinstance(reply, bytes | str)
        return info_fields(reply)

    def info(self, i: int, section: str = "", timeout: float = 2.0) -> dict[str, str]:
        args = ("INFO", section) if section else ("INFO",)
        reply = self.nodes[i].call(*args, timeout=timeout)
        assert isinstance(reply, bytes | str)
        return info_fields(reply)

    def hello(self, i: int, timeout: float = 2.0) -> dict[str, int]:
        """Node ``i``'s HELLO as {node id: priority} (1 ok, 5 no link, 10 PFAIL, 100 FAIL)."""
        reply = self.nodes[i].call("HELLO", timeout=timeout)
        if not isinstance(reply, list) or len(reply) < 2:
            raise LabError(f"node {i}: odd HELLO reply {reply!r}")
        # Port and priority come as bulk strings (Disque's addReplyBulkLongLong).
        return {_text(e[0]): int(e[3]) for e in reply[2:]}

    def membership(self) -> dict[int, View | str]:
        """Per node: what it reports (:class:`View`), or why it could not be asked."""
        ids = {nd.id for nd in self.nodes}
        out: dict[int, View | str] = {}
        for node in self.nodes:
            if node.state != UP:
                out[node.index] = node.state
                continue
            try:
                f = self.cluster_info(node.index)
                prio = self.hello(node.index)
                out[node.index] = View(
                    known=int(f.get("cluster_known_nodes", -1)),
                    reachable=int(f.get("cluster_reachable_nodes", -1)),
                    ok_peers=sum(1 for nid, p in prio.items() if p == 1 and nid in ids)
                    - (1 if prio.get(node.id or "") == 1 else 0),
                )
            except (OSError, RespError, ValueError, LabError, IndexError, TypeError) as exc:
                out[node.index] = f"error: {exc}"
        return out

    def is_whole(self) -> tuple[bool, dict[int, View | str]]:
        """Whole = every node up, knowing all n nodes, and seeing its n-1 peers as ok.

        "Ok" is read from HELLO (priority 1 for each other node's id), not from
        ``cluster_reachable_nodes``, because whether that count includes the node itself
        is easy to get wrong (Disque's does not: ``clusterUpdateReachableNodes`` skips
        ``CLUSTER_NODE_MYSELF``); by id there is nothing to interpret.
        """
        m = self.membership()
        whole = all(
            isinstance(v, View) and v.known == self.n and v.ok_peers == self.n - 1
            for v in m.values()
        )
        return whole, m

    def wait_cluster(
        self, timeout: float | None = None, *, remeet_after: float | None = None
    ) -> None:
        """Wait until :meth:`is_whole`; raise LabError with every node's view on timeout.

        If a node still does not know everyone after ``remeet_after`` seconds (a restarted
        node that did not keep its peer list), MEET it to all, once, and count it in
        ``stats.remeets``: the run goes on, and the count shows up in the report.
        """
        with self._lock:
            timeout = self.form_timeout if timeout is None else timeout
            if remeet_after is None:
                remeet_after = max(5.0, 3 * self.node_timeout_ms / 1000)
            start = time.monotonic()
            remet = False
            while True:
                whole, m = self.is_whole()
                if whole:
                    self._note("whole", after_s=round(time.monotonic() - start, 2))
                    return
                elapsed = time.monotonic() - start
                if not remet and elapsed >= remeet_after:
                    remet = True
                    self._remeet(m)
                if elapsed >= timeout:
                    raise LabError(
                        f"cluster not whole after {timeout:.0f}s, want known={self.n} "
                        f"ok_peers={self.n - 1} everywhere: {m}"
                    )
                time.sleep(0.1)

    def _remeet(self, m: dict[int, View | str]) -> None:
        for i, v in m.items():
            if isinstance(v, View) and v.known < self.n:
                for other in self.nodes:
                    if other.index != i and other.state == UP:
                        with contextlib.suppress(OSError, RespError):
                            self.nodes[i].call("CLUSTER", "MEET", other.host, other.port)
                self.stats.remeets += 1
                self._note("remeet", node=i, view=v)

    def check_crashes(self) -> list[int]:
        """Nodes that exited while the lab believed them up (marked CRASHED, counted)."""
        crashed = []
        with self._lock:
            for node in self.nodes:
                if node.state in (UP, PAUSED) and not node.is_running():
                    assert node.proc is not None
                    node.state = CRASHED
                    self.stats.crashes += 1
                    crashed.append(node.index)
                    self._note("crash", node=node.index, code=node.proc.returncode)
        return crashed

    def hello_flags(self, i: int, timeout: float = 1.0) -> dict[int, int]:
        """Node ``i``'s HELLO priority of every other lab node it lists, by index (1 ok,
        5 no link, 10 PFAIL, 100 FAIL); a lab node it does not list is absent."""
        by_id = {nd.id: nd.index for nd in self.nodes if nd.id is not None}
        prio = self.hello(i, timeout=timeout)
        return {by_id[nid]: p for nid, p in prio.items() if nid in by_id and by_id[nid] != i}

    def refuses(self, i: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connect to node ``i``'s RESP port is refused (nothing listens)."""
        node = self.nodes[i]
        try:
            with socket.create_connection((node.host, node.port), timeout=timeout):
                return False
        except ConnectionRefusedError:
            return True
        except OSError:
            return False

    def ping_times_out(self, i: int, timeout: float = 0.5) -> bool:
        """Whether node ``i`` accepts a connection but does not answer PING in ``timeout``
        (a SIGSTOPped process: the kernel still completes the handshake)."""
        try:
            self.nodes[i].call("PING", timeout=timeout)
        except TimeoutError:
            return True
        except (OSError, RespError):
            return False
        return False

    def slow_packets(self, i: int, j: int) -> tuple[int, int]:
        """(packets, overlimits) the slow link i->j's tc class has carried; (0, 0) if none."""
        if self.net is None:
            return (0, 0)
        return self.net.slow_packets(i, j)

    @property
    def partitioned(self) -> bool:
        """Whether some link is currently cut or slowed."""
        return bool(self._drops() or self._slow)

    def _drops(self) -> dict[int, set[int]]:
        """Node -> nodes it must not send to: the partition's and the cuts' together."""
        out: dict[int, set[int]] = {i: set(js) for i, js in self._partition.items() if js}
        for i, j in self._cuts:
            out.setdefault(i, set()).add(j)
        return out

    def down(self) -> list[int]:
        """Nodes not serving right now (killed, paused, stopped, crashed)."""
        return [nd.index for nd in self.nodes if nd.state != UP]

    # -- faults ---------------------------------------------------------------------------

    def kill9(self, i: int) -> None:
        with self._lock:
            node = self.nodes[i]
            if node.process is not None:
                node.process.kill()  # works on a SIGSTOPped process too
            node.state = KILLED
            self.stats.kills += 1
            self._note("kill9", node=i)

    def stop(self, i: int, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (clean shutdown), SIGKILL if it does not exit within ``timeout``."""
        with self._lock:
            node = self.nodes[i]
            self._terminate([node], timeout)
            node.state = STOPPED
            self.stats.stops += 1
            self._note("stop", node=i, code=node.proc.returncode if node.proc else None)

    def restart(self, i: int, timeout: float | None = None) -> None:
        """Start node ``i`` again with the same conf and dir; stops it first if running.

        Waits until it answers PING, checks that it kept its node id, and re-applies the
        current partition to it.
        """
        with self._lock:
            node = self.nodes[i]
            if node.is_running():
                self._terminate([node], STOP_TIMEOUT)
            self._spawn(node)
            self._wait_ready(node, time.monotonic() + (timeout or self.start_timeout))
            new_id = self._fetch_id(node)
            if node.id is not None and new_id != node.id:
                # Same data dir must mean same identity; record it loudly, keep going.
                msg = f"node {i} changed id on restart: {node.id} -> {new_id}"
                self.stats.id_changes.append(msg)
                self._note("id-change", node=i, old=node.id, new=new_id)
            node.id = new_id
            node.state = UP
            self.stats.restarts += 1
            self._note("restart", node=i, pid=node.pid)
            if self.net is None and self._drops().get(i):
                self._apply_drops(i)

    def spawn(self, i: int) -> None:
        """Start node ``i`` (stopped or killed) on its conf and dir, and return at once: for
        timing a start from outside. Unlike :meth:`restart`, nothing waits for it to answer."""
        with self._lock:
            self._spawn(self.nodes[i])
            self._note("spawn-unwaited", node=i)

    def move(self, i: int, timeout: float | None = None) -> str:
        """Node ``i`` comes back at another address: SIGKILL, a new network namespace and
        address (its old namespace is deleted: nothing answers at the old address), its conf
        rewritten for the new address, then :meth:`restart` on the same data dir (same id,
        same AOF and cluster view). Returns the new address. Needs namespaces."""
        with self._lock:
            if self.net is None:
                raise LabError(f"moving a node needs network namespaces: {self.partitions}")
            node = self.nodes[i]
            if node.process is not None:
                node.process.kill()
            node.state = KILLED
            old = node.host
            try:
                node.host = self.net.move(i)
            except netns.NetnsError as exc:
                raise LabError(f"cannot move node {i}: {exc}") from exc
            self._write_conf(node)
            self.stats.moves += 1
            self._note("move", node=i, old=old, new=node.host)
            self.restart(i, timeout)
            return node.host

    def pause(self, i: int) -> None:
        with self._lock:
            node = self.nodes[i]
            if node.proc is None or node.state != UP:
                raise LabError(f"node {i} is {node.state}, cannot pause it")
            node.proc.send_signal(signal.SIGSTOP)
            node.state = PAUSED
            self.stats.pauses += 1
            self._note("pause", node=i)

    def resume(self, i: int) -> None:
        with self._lock:
            node = self.nodes[i]
            if node.proc is None or node.state != PAUSED:
                raise LabError(f"node {i} is {node.state}, not paused")
            node.proc.send_signal(signal.SIGCONT)
            node.state = UP
            self.stats.resumes += 1
            self._note("resume", node=i)
            # The partition may have changed while it was stopped: tell it the current one.
            if self.net is None:
                self._apply_drops(i)

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Cut every link between nodes of different groups (both directions).

        Nodes named in no group form one more group together. ``partition([[0, 1], [2]])``
        on 5 nodes gives {0,1} | {2} | {3,4}.
        """
        with self._lock:
            gs = [set(g) for g in groups]
            named: set[int] = set()
            for g in gs:
                if named & g:
                    raise ValueError(f"node(s) {sorted(named & g)} in more than one group")
                if any(not 0 <= i < self.n for i in g):
                    raise ValueError(f"group {sorted(g)} names a node outside 0..{self.n - 1}")
                named |= g
            rest = set(range(self.n)) - named
            if rest:
                gs.append(rest)
            everyone = set(range(self.n))
            self._partition = {i: everyone - g for g in gs for i in g if everyone - g}
            self.stats.partitions += 1
            self._note("partition", groups=[sorted(g) for g in gs])
            self._apply_all()

    def heal_partition(self) -> None:
        """Undo :meth:`partition` (cuts and slow links made by :meth:`cut` / :meth:`slow` stay)."""
        with self._lock:
            self._partition = {}
            self._note("heal-partition")
            self._apply_all()

    def cut(self, i: int, j: int, *, one_way: bool = False) -> None:
        """Drop what node ``i`` sends to node ``j``; and what ``j`` sends to ``i`` unless
        ``one_way``. In-process (no namespaces) a one-way cut is two-way at node ``i``."""
        with self._lock:
            self._check_pair(i, j)
            self._cuts.add((i, j))
            if not one_way:
                self._cuts.add((j, i))
            self.stats.cuts += 1
            self._note("cut", src=i, dst=j, one_way=one_way)
            self._apply_all()

    def uncut(self, i: int, j: int) -> None:
        """Restore the link between ``i`` and ``j``, both directions."""
        with self._lock:
            self._cuts -= {(i, j), (j, i)}
            self._note("uncut", src=i, dst=j)
            self._apply_all()

    def slow(self, i: int, j: int, delay_ms: int) -> None:
        """Slow what node ``i`` sends to node ``j`` (see :mod:`cluster.netns` for how)."""
        with self._lock:
            self._check_pair(i, j)
            if not self.can_slow:
                raise LabError(f"slow links need network namespaces: {self.partitions}")
            if delay_ms <= 0:
                raise ValueError(f"delay_ms must be positive, not {delay_ms}")
            self._slow[(i, j)] = delay_ms
            self.stats.slows += 1
            self._note("slow", src=i, dst=j, delay_ms=delay_ms)
            self._apply_all()

    def unslow(self, i: int, j: int) -> None:
        with self._lock:
            self._slow.pop((i, j), None)
            self._note("unslow", src=i, dst=j)
            self._apply_all()

    def _check_pair(self, i: int, j: int) -> None:
        if i == j or not (0 <= i < self.n and 0 <= j < self.n):
            raise ValueError(f"a link needs two different nodes of 0..{self.n - 1}, not {i}, {j}")

    def heal(self) -> None:
        """Restore every link: no partition, no cut, no slow link."""
        with self._lock:
            self._partition = {}
            self._cuts = set()
            self._slow = {}
            self.stats.heals += 1
            self._note("heal")
            self._apply_all()

    def _apply_all(self) -> None:
        if self.net is not None:
            drops = self._drops()
            slow: dict[int, list[tuple[int, int]]] = {}
            for (i, j), ms in self._slow.items():
                slow.setdefault(i, []).append((j, ms))
            wanted = {
                i: netns.Rules(
                    drop=frozenset(drops.get(i, ())), slow=tuple(sorted(slow.get(i, [])))
                )
                for i in range(self.n)
            }
            try:
                changed = self.net.set_rules(wanted)
            except netns.NetnsError as exc:
                self._note("tc-failed", error=str(exc))
                raise LabError(str(exc)) from exc
            self._note("tc", changed=changed)
            return
        # Tell every node even if one fails, so a half-applied cut stays as small as possible.
        errors = []
        for i in range(self.n):
            try:
                self._apply_drops(i)
            except LabError as exc:
                errors.append(str(exc))
        if errors:
            raise LabError("; ".join(errors))

    def _apply_drops(self, i: int) -> None:
        node = self.nodes[i]
        if node.state != UP:
            return  # killed: a fresh process starts healed; paused: told on resume
        ids = []
        for j in sorted(self._drops().get(i, ())):
            peer_id = self.nodes[j].id
            if peer_id is None:
                raise LabError(f"node {j} has no known id yet")
            ids.append(peer_id)
        try:
            node.call("DEBUG", "DROP-PEERS", *ids, timeout=5.0)
        except (OSError, RespError) as exc:
            self._note("drop-peers-failed", node=i, error=str(exc))
            raise LabError(f"DEBUG DROP-PEERS on node {i} failed: {exc}") from exc

    # -- shutdown -------------------------------------------------------------------------

    def _terminate(self, nodes: Sequence[NodeHandle], timeout: float) -> None:
        """SIGCONT + SIGTERM all, then wait; SIGKILL whatever is left at the deadline."""
        index = {id(nd.process): nd.index for nd in nodes if nd.process is not None}
        for killed in stop_all([nd.process for nd in nodes if nd.process is not None], timeout):
            self._note("sigterm-timeout", node=index[id(killed)])

    def stop_all(self, timeout: float = STOP_TIMEOUT) -> None:
        with self._lock:
            if not self._started:
                return
            self._terminate(self.nodes, timeout)
            for nd in self.nodes:
                nd.state = STOPPED
            self._note("stop-all")
            if self.net is not None:
                try:
                    self.net.destroy()
                    self._note("netns-removed")
                except netns.NetnsError as exc:
                    self._note("netns-remove-failed", error=str(exc))
            atexit.unregister(self._kill_leftovers)
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            self._started = False

    def _kill_leftovers(self) -> None:
        # Last resort if the lab's owner died without stop_all: no orphan nodes.
        for nd in self.nodes:
            if nd.is_running():
                assert nd.proc is not None
                with contextlib.suppress(OSError):
                    nd.proc.kill()
        if self.net is not None:
            with contextlib.suppress(netns.NetnsError):
                self.net.destroy()

    def _note(self, what: str, **kv: object) -> None:
        if self._log_file is None:
            return
        fields = " ".join(f"{k}={v}" for k, v in kv.items())
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        self._log_file.write(f"{stamp} {what} {fields}\n")


class FlagServer:
    """One server started with beanstalkd's flags, ``CMD -l HOST -p PORT FLAGS...``, the way
    a beanstalkd harness starts one: no config file, no cluster. ``node_cmd`` None runs this
    checkout's ``disq.node_main`` (a standalone node); ``["beanstalkd"]`` runs the reference.

    :meth:`start` waits until the port answers beanstalk's ``stats``; :meth:`spawn` returns at
    once, for timing a start from outside. stdout and stderr of every start go to
    ``base_dir/stdout.log``; the port stays the same across starts. The process is a
    :class:`~cluster.nodeproc.NodeProcess`, as every node the lab and the tests start.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        flags: Sequence[str] = (),
        *,
        node_cmd: Sequence[str] | None = None,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        host: str = HOST,
        port: int = 0,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.dir = Path(base_dir).resolve()
        self.flags = list(flags)
        self.host = host
        self.port = port or find_base_port(1, host)
        self.process = NodeProcess(
            ["-l", self.host, "-p", str(self.port), *self.flags],
            cmd=list(node_cmd) if node_cmd else node_command(python),
            env=env,
            cwd=self.dir,
            log_path=self.dir / "stdout.log",
            ready=self.answers,
            new_session=True,
            start_timeout=start_timeout,
            poll_interval=0.002,
            name=f"server on port {self.port}",
        )
        atexit.register(self._kill_leftover)

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process.proc

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def stdout_path(self) -> Path:
        return self.dir / "stdout.log"

    def _kill_leftover(self) -> None:
        # Its own session: a Ctrl-C does not reach it, and its owner may die without stop().
        with contextlib.suppress(OSError):
            self.process.kill()

    def argv(self) -> list[str]:
        return self.process.argv()

    def spawn(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process.spawn()

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether one ``stats`` on a new connection is answered (any whole first line)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                s.sendall(b"stats\r\n")
                got = b""
                while b"\r\n" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        return False
                    got += chunk
                return True
        except OSError:
            return False

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def wait_ready(self) -> None:
        try:
            self.process.wait_ready()
        except NodeStartError as exc:
            raise LabError(f"{shlex.join(self.argv())} did not answer\n{self.log_tail()}") from exc

    def stop(self, timeout: float = STOP_TIMEOUT, sig: int = signal.SIGTERM) -> tuple[float, bool]:
        """Signal and wait; SIGKILL after ``timeout``. (seconds to exit, exited by itself)."""
        proc = self.process.proc
        if proc is None or proc.poll() is not None:
            return 0.0, True
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return time.monotonic() - t0, False
        return time.monotonic() - t0, True

    def is_running(self) -> bool:
        return self.process.is_running()

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.process.log_text().splitlines()[-lines:])

    def __enter__(self) -> FlagServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.lab", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--base-port", type=int, default=0, help="first RESP port (default: free)")
    p.add_argument("--dir", help="lab directory (default: a new temporary directory)")
    p.add_argument("--node-timeout", type=int, default=2000, help="cluster-node-timeout, ms")
    p.add_argument("--fsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument("--node-cmd", help="command that runs a node (conf path appended)")
    p.add_argument(
        "--net",
        choices=NETWORKS,
        default="auto",
        help="netns: a network namespace per node (root); inprocess: DEBUG DROP-PEERS; "
        "auto: netns if possible",
    )
    p.add_argument(
        "--bind-any",
        action="store_true",
        help="nodes bind 0.0.0.0 and are told their address with advertise-host",
    )
    args = p.parse_args(argv)
    base_dir = args.dir or tempfile.mkdtemp(prefix="disq-lab-")
    lab = Lab(
        args.nodes,
        base_dir,
        args.base_port or None,
        node_timeout_ms=args.node_timeout,
        fsync=args.fsync,
        node_cmd=shlex.split(args.node_cmd) if args.node_cmd else None,
        network=args.net,
        bind_any=args.bind_any,
    )
    print(f"starting {args.nodes} nodes in {lab.base_dir} ...", flush=True)
    # SIGTERM (e.g. from a supervisor) stops the cluster like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with lab:
            print(f"partitions: {lab.partitions}")
            if lab.net is not None:
                print(f"network: {lab.net.describe()}")
            print(f"{'node':>4}  {'host':>15}  {'resp':>5}  {'bus':>5}  {'pid':>7}  id")
            for nd in lab.nodes:
                print(
                    f"{nd.index:>4}  {nd.host:>15}  {nd.port:>5}  {nd.bus_port:>5}  "
                    f"{nd.pid:>7}  {nd.id}"
                )
            first = lab.node(0)
            print(f"logs: {lab.base_dir}/node-*/node.log")
            print(f"try: redis-cli -h {first.host} -p {first.port} HELLO")
            print("Ctrl-C stops the cluster.", flush=True)
            while True:
                time.sleep(1.0)
                for i in lab.check_crashes():
                    print(f"node {i} exited unexpectedly:\n{lab.node(i).log_tail(10)}", flush=True)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    except LabError as exc:
        print(f"lab failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
