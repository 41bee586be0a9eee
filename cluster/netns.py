"""Real network faults for the lab: one Linux network namespace per node, cut with ``tc``.

Layout (one lab)::

    root namespace                           namespace dql<tag>n<i> (one per node)
    bridge dql<tag>b 10.213.S.1/24 -- veth dql<tag>v<i> <-> eth0 10.213.S.<10+i>/24

* ``<tag>`` is the owning process's pid (6 hex digits) and a per-process counter (1 hex
  digit): two labs, or a lab and the leftovers of a crashed one, never share a name, and a
  leftover whose owner pid is gone is recognisably stale (:func:`remove_stale` deletes it,
  killing any node process still running inside, before a new lab is set up).
* ``S`` is the first /24 of 10.213.0.0/16 no address or route of the root namespace uses
  (chosen under a file lock, so two labs starting at once do not pick the same one).
* Each node process runs under ``ip netns exec``, binds its namespace address (config
  ``bind``) and advertises it to its peers, or binds 0.0.0.0 and is told its address with
  ``advertise-host`` (the lab's ``bind_any``); the lab's clients, in the root namespace, reach
  every node through the bridge.
* :meth:`Network.move` gives a node a new namespace and address (a pod rescheduled with a new
  IP): the next free slot ``10.213.S.<10+k>`` is made, the node's old namespace is deleted (so
  nothing answers at the old address any more) and every rule naming the node is rebuilt for
  its new address. Names and addresses come from the slot, so node i is slot i until moved.

Faults are rules on a node's own egress (``eth0`` in its namespace), rebuilt whole whenever
the wanted set changes:

* drop i->j: a ``clsact`` qdisc with one u32 filter per cut destination,
  ``match ip dst <j>/32 action mirred egress redirect dev blackhole``, where ``blackhole`` is
  an ``ifb`` device of the namespace that is never brought up, so everything sent to it is
  dropped. (``netem loss 100%`` or ``action drop`` would do too, but kernels without netem
  or ``act_gact`` exist - this one is such - and mirred to a down device needs neither.)
  Only IPv4 to that peer is dropped: ARP and the lab's own clients (from the bridge address)
  are untouched. A one-way cut drops i->j only; TCP then fails both ways (no SYN-ACK, no
  ACK), which is what a one-way loss does to a real connection.
* slow i->j: an ``htb`` root qdisc, default class unlimited, one class per slow destination
  (u32 ``match ip dst``). With ``sch_netem`` the class's leaf is ``netem delay <ms>``; without
  it (this kernel) the class is rate-limited so that a full 1500-byte packet takes the wanted
  delay to leave (``rate = 12000 / delay_ms`` kbit, ``burst 1b``): a slow *narrow* link whose
  queueing delay grows with traffic, rather than a fixed extra latency. :attr:`Network.slow_mode`
  says which.

Everything is removed by :meth:`Network.destroy` (the lab calls it on stop and at exit).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PREFIX = "dql"
SUBNET_BASE = "10.213"  # 10.213.S.0/24 per lab
NODE_HOST_OFFSET = 10  # node i is 10.213.S.<10 + i>
MAX_NODES = 99  # nodes of one lab
# Namespace slots, moves included: 10.213.S.<10+k> stays a host address (at most .253), and
# the host-side veth name (dql + 7 + v + 3 digits) stays within Linux's 15 characters.
MAX_SLOTS = 244
# The address of "a peer index no node has" (the kernel probe in _build): .254, never a node's.
NO_SLOT = MAX_SLOTS
IFACE = "eth0"  # the node's interface inside its namespace
BLACKHOLE = "blackhole"  # an ifb device never brought up: mirred into it drops
LOCK_PATH = Path("/run/lock/disq-lab-netns.lock")
CMD_TIMEOUT = 20.0

_NAME_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})([0-9a-f])([bvn])(\d*)$")
_seq = itertools.count()
_seq_lock = threading.Lock()


class NetnsError(RuntimeError):
    """A namespace, link or tc rule could not be set up."""


def _run(args: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(
            list(args),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CMD_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(args)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here (None: they probably can; setup may still fail)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (iproute2)"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_tag(name: str) -> str | None:
    """The tag of a lab-made name whose owner process is gone, else None."""
    m = _NAME_RE.match(name)
    if m is None:
        return None
    if _pid_alive(int(m.group(1), 16)):
        return None
    return m.group(1) + m.group(2)


def _netns_names() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_names() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _kill_netns_pids(ns: str) -> None:
    for word in _run(["ip", "netns", "pids", ns], check=False).split():
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(word), signal.SIGKILL)


def remove_stale() -> list[str]:
    """Delete namespaces and links made by labs whose process is gone; returns their names.

    Node processes still running in a stale namespace (orphans of a lab that was killed)
    are killed first, or the namespace would live on.
    """
    removed = []
    for ns in _netns_names():
        if _stale_tag(ns) is not None:
            _kill_netns_pids(ns)
            _run(["ip", "netns", "delete", ns], check=False)
            removed.append(ns)
    for link in _link_names():
        if _stale_tag(link) is not None:
            _run(["ip", "link", "delete", link], check=False)
            removed.append(link)
    return removed


@contextlib.contextmanager
def _setup_lock() -> Iterator[None]:
    path = LOCK_PATH if LOCK_PATH.parent.is_dir() else Path("/tmp") / LOCK_PATH.name
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _free_subnet() -> int:
    used = _run(["ip", "-o", "-4", "addr", "show"], check=False)
    used += _run(["ip", "-4", "route", "show", "table", "all"], check=False)
    taken = {int(m.group(1)) for m in re.finditer(rf"\b{re.escape(SUBNET_BASE)}\.(\d+)\.", used)}
    for s in range(256):
        if s not in taken:
            return s
    raise NetnsError(f"every {SUBNET_BASE}.S.0/24 is in use")


def _slow_class(j: int) -> str:
    return f"1:{0x100 + j:x}"


@dataclass(frozen=True)
class Rules:
    """What node i's egress must do: drop to these peers, slow to those (ms)."""

    drop: frozenset[int] = frozenset()
    slow: tuple[tuple[int, int], ...] = ()  # (peer, delay_ms), sorted


class Network:
    """The namespaces, bridge and veths of one lab of ``n`` nodes."""

    def __init__(self, n: int) -> None:
        if not 1 <= n <= MAX_NODES:
            raise ValueError(f"network namespaces support 1..{MAX_NODES} nodes, not {n}")
        self.n = n
        with _seq_lock:
            seq = next(_seq) % 16
        self.tag = f"{os.getpid() & 0xFFFFFF:06x}{seq:x}"
        self.subnet = -1
        self.slow_mode = "none"
        self._rules: dict[int, Rules] = {i: Rules() for i in range(n)}
        self._made = False
        self._lock = threading.Lock()
        # Node i lives in namespace slot _slot[i] (i until moved); _slots: every slot that
        # exists now, so destroy() removes the moved nodes' namespaces too.
        self._slot = list(range(n))
        self._slots: set[int] = set()
        self._next_slot = n

    # -- names and addresses --------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}b"

    def veth(self, i: int) -> str:
        return self._veth_of(self._slot[i])

    def netns(self, i: int) -> str:
        return self._netns_of(self._slot[i])

    def _veth_of(self, slot: int) -> str:
        return f"{PREFIX}{self.tag}v{slot}"

    def _netns_of(self, slot: int) -> str:
        return f"{PREFIX}{self.tag}n{slot}"

    def _addr_of(self, slot: int) -> str:
        return f"{SUBNET_BASE}.{self.subnet}.{NODE_HOST_OFFSET + slot}"

    @property
    def gateway(self) -> str:
        return f"{SUBNET_BASE}.{self.subnet}.1"

    @property
    def cidr(self) -> str:
        return f"{SUBNET_BASE}.{self.subnet}.0/24"

    def addr(self, i: int) -> str:
        return self._addr_of(self._slot[i] if 0 <= i < self.n else NO_SLOT)

    def exec_prefix(self, i: int) -> list[str]:
        """Prepend to a command to run it in node i's namespace."""
        return ["ip", "netns", "exec", self.netns(i)]

    def describe(self) -> str:
        return (
            f"netns {self.netns(0)}..{self.netns(self.n - 1)}, bridge {self.bridge} "
            f"{self.gateway}/24, nodes {self.addr(0)}..{self.addr(self.n - 1)}, "
            f"slow links by {self.slow_mode}"
        )

    # -- lifecycle ------------------------------------------------------------------------

    def create(self) -> list[str]:
        """Remove stale leftovers, then build everything; returns the stale names removed.

        On any failure what was built is removed again and :class:`NetnsError` raised.
        """
        with _setup_lock():
            stale = remove_stale()
            self.subnet = _free_subnet()
            self._made = True
            try:
                self._build()
            except BaseException:
                self.destroy()
                raise
        return stale

    def _build(self) -> None:
        ipaddress.ip_network(self.cidr)  # sanity: a well-formed subnet
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i in range(self.n):
            self._make_slot(self._slot[i])
        # Probe what this kernel offers, on node 0, before anyone relies on it.
        probe = Rules(drop=frozenset({self.n}))  # a peer index no node has: harmless
        self._apply(0, probe)
        self._apply(0, Rules())
        ns0 = self.netns(0)
        try:
            _run(["tc", "-n", ns0, "qdisc", "add", "dev", BLACKHOLE, "root", "netem",
                  "delay", "1ms"])  # fmt: skip
            _run(["tc", "-n", ns0, "qdisc", "del", "dev", BLACKHOLE, "root"], check=False)
            self.slow_mode = "netem"
        except NetnsError:
            try:
                self._apply(0, Rules(slow=((self.n, 100),)))
                self._apply(0, Rules())
                self.slow_mode = "htb"
            except NetnsError:
                self.slow_mode = "none"

    def _make_slot(self, slot: int) -> None:
        """Namespace, veth to the bridge, address and an empty clsact for slot ``slot``."""
        ns, veth = self._netns_of(slot), self._veth_of(slot)
        self._slots.add(slot)  # before anything exists: a half-made slot is removed too
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", IFACE, "netns", ns])
        _run(["ip", "link", "set", veth, "master", self.bridge])
        _run(["ip", "link", "set", veth, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{self._addr_of(slot)}/24", "dev", IFACE])
        _run(["ip", "-n", ns, "link", "set", IFACE, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "link", "add", BLACKHOLE, "type", "ifb"])  # stays down
        _run(["tc", "-n", ns, "qdisc", "add", "dev", IFACE, "clsact"])

    def _remove_slot(self, slot: int) -> None:
        ns = self._netns_of(slot)
        _kill_netns_pids(ns)
        _run(["ip", "netns", "delete", ns], check=False)
        _run(["ip", "link", "delete", self._veth_of(slot)], check=False)
        self._slots.discard(slot)

    def move(self, i: int) -> str:
        """Give node ``i`` a new namespace and address; returns the address. Whatever still
        runs in its old namespace is killed and the namespace deleted, so the old address
        answers nothing (a rescheduled pod's old IP). Rules naming node i are rebuilt."""
        with self._lock:
            if not self._made:
                raise NetnsError("the network is not set up")
            slot = self._next_slot
            if slot >= MAX_SLOTS:
                raise NetnsError(f"no namespace slot left (at most {MAX_SLOTS}, moves included)")
            self._next_slot += 1
            try:
                self._make_slot(slot)
            except NetnsError:
                self._remove_slot(slot)
                raise
            old, self._slot[i] = self._slot[i], slot
            self._remove_slot(old)
            for k in range(self.n):
                rules = self._rules[k]
                if k == i or i in rules.drop or any(j == i for j, _ in rules.slow):
                    self._apply(k, rules)
            return self.addr(i)

    def destroy(self) -> None:
        """Kill anything left in the namespaces, delete them and the bridge. Idempotent."""
        with self._lock:
            if not self._made:
                return
            for slot in sorted(self._slots):
                self._remove_slot(slot)
            _run(["ip", "link", "delete", self.bridge], check=False)
            self._made = False

    # -- faults ---------------------------------------------------------------------------

    def set_rules(self, wanted: Mapping[int, Rules]) -> list[int]:
        """Make every node's egress rules what ``wanted`` says (missing: none); returns the
        nodes whose rules changed. Nodes whose rules did not change are not touched."""
        with self._lock:
            changed = []
            for i in range(self.n):
                rules = wanted.get(i, Rules())
                if rules != self._rules[i]:
                    self._apply(i, rules)
                    self._rules[i] = rules
                    changed.append(i)
            return changed

    def _apply(self, i: int, rules: Rules) -> None:
        """Rebuild node i's egress rules. Between the deletes and the batch there is a window
        of a few milliseconds with no rule at all; only nodes whose rules change get one."""
        ns = self.netns(i)
        _run(["tc", "-n", ns, "qdisc", "del", "dev", IFACE, "clsact"], check=False)
        _run(["tc", "-n", ns, "qdisc", "del", "dev", IFACE, "root"], check=False)
        lines = [f"qdisc add dev {IFACE} clsact"]
        for j in sorted(rules.drop):
            lines.append(
                f"filter add dev {IFACE} egress protocol ip prio 10 u32 match ip dst "
                f"{self.addr(j)}/32 action mirred egress redirect dev {BLACKHOLE}"
            )
        if rules.slow:
            lines.append(f"qdisc add dev {IFACE} root handle 1: htb default 1")
            lines.append(f"class add dev {IFACE} parent 1: classid 1:1 htb rate 10gbit")
            for j, delay_ms in rules.slow:
                cls = _slow_class(j)
                if self.slow_mode == "netem":
                    lines.append(f"class add dev {IFACE} parent 1: classid {cls} htb rate 10gbit")
                    lines.append(f"qdisc add dev {IFACE} parent {cls} netem delay {delay_ms}ms")
                else:
                    kbit = max(8, 12000 // max(1, delay_ms))
                    lines.append(
                        f"class add dev {IFACE} parent 1: classid {cls} htb rate {kbit}kbit "
                        f"ceil {kbit}kbit burst 1b cburst 1b"
                    )
                lines.append(
                    f"filter add dev {IFACE} parent 1: protocol ip prio 10 u32 match ip dst "
                    f"{self.addr(j)}/32 flowid {cls}"
                )
        try:
            _run(["tc", "-n", ns, "-batch", "-"], stdin="\n".join(lines) + "\n")
        except NetnsError as exc:
            raise NetnsError(f"tc rules on node {i} ({ns}): {exc}") from exc

    def rules(self, i: int) -> Rules:
        return self._rules[i]

    def slow_packets(self, i: int, j: int) -> tuple[int, int]:
        """(packets sent, overlimits) of the slow class i->j, from ``tc -s``; (0, 0) if none."""
        cls = _slow_class(j)
        out = _run(["tc", "-n", self.netns(i), "-s", "class", "show", "dev", IFACE], check=False)
        block = ""
        for part in out.split("class htb "):
            if part.startswith(cls + " "):
                block = part
        m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped \d+, overlimits (\d+)", block)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)
