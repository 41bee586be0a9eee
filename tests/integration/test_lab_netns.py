"""The lab's real network faults (cluster/netns.py): namespaces, tc cuts, cleanup, fallback.

The namespace tests need root and iproute2 and are skipped otherwise; the fallback test
runs everywhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from eventually import eventually  # noqa: E402

from cluster import netns  # noqa: E402
from cluster.lab import Lab  # noqa: E402

needs_netns = pytest.mark.skipif(
    netns.unavailable_reason() is not None,
    reason=f"network namespaces unavailable: {netns.unavailable_reason()}",
)


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@needs_netns
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_way_cut_in_namespaces_is_seen_and_heals(tmp_path: Path) -> None:
    lab = Lab(3, tmp_path / "lab", node_timeout_ms=1000, network="netns")
    with lab:
        assert lab.partitions == "netns"
        assert lab.net is not None
        names = {lab.net.netns(i) for i in range(3)}
        assert names <= _netns_names()
        assert all(nd.host.startswith("10.213.") for nd in lab.nodes)
        assert len({nd.host for nd in lab.nodes}) == 3
        # Node 0 can hear but not speak: the others' probes get no ack, so they flag it.
        lab.cut(0, 1, one_way=True)
        lab.cut(0, 2, one_way=True)
        eventually(lambda: lab.hello_flags(1).get(0, 1) > 1, "node 1 flags node 0", 15)
        # The lab's own clients, in the root namespace, still reach node 0.
        assert lab.node(0).call("PING") == "PONG"
        lab.heal()
        lab.wait_cluster(30)
        lab.slow(1, 2, 200)
        eventually(lambda: lab.slow_packets(1, 2)[0] > 0, "the slow link carries packets", 15)
        lab.heal()
        lab.kill9(2)
        assert lab.refuses(2)
        lab.restart(2)
        lab.pause(1)
        assert lab.ping_times_out(1)
        lab.resume(1)
        lab.wait_cluster(30)
    assert not names & _netns_names()
    assert lab.net.bridge not in _links()
    assert "partitions=netns" in (tmp_path / "lab" / "lab.log").read_text()


@needs_netns
@pytest.mark.timeout(60)
def test_stale_namespaces_of_a_dead_lab_are_removed() -> None:
    net = netns.Network(2)
    net.tag = f"{_dead_pid() & 0xFFFFFF:06x}0"  # as if made by a lab that has since died
    try:
        net.create()
        assert {net.netns(0), net.netns(1)} <= _netns_names()
        removed = netns.remove_stale()
        # What it removed is a dead lab's; ours may have gone to another test's lab starting
        # meanwhile (each start removes stale ones), so what counts is that it is gone.
        assert all(name.startswith(netns.PREFIX) for name in removed)
        assert not {net.netns(0), net.netns(1)} & _netns_names()
        assert net.bridge not in _links()
    finally:
        net.destroy()


@needs_netns
@pytest.mark.timeout(60)
def test_a_live_labs_namespaces_are_not_stale() -> None:
    net = netns.Network(1)
    try:
        net.create()
        assert net.netns(0) not in netns.remove_stale()
        assert net.netns(0) in _netns_names()
    finally:
        net.destroy()
    assert net.netns(0) not in _netns_names()


@pytest.mark.timeout(60)
def test_in_process_fallback_is_said(tmp_path: Path) -> None:
    with Lab(1, tmp_path / "lab", network="inprocess") as lab:
        assert lab.partitions == "in-process (asked for)"
        assert lab.net is None
        assert not lab.can_slow and not lab.one_way_cuts
        assert lab.node(0).call("PING") == "PONG"
    log = (tmp_path / "lab" / "lab.log").read_text()
    assert "partitions=in-process why=asked for" in log


def _egress_filters(ns: str) -> str:
    out = subprocess.run(
        ["tc", "-n", ns, "filter", "show", "dev", netns.IFACE, "egress"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _u32_hex(addr: str) -> str:
    """An IPv4 address as tc prints a u32 match on it."""
    return "".join(f"{int(part):02x}" for part in addr.split("."))


@needs_netns
@pytest.mark.timeout(60)
def test_a_moved_node_gets_a_new_namespace_and_the_cuts_follow_it() -> None:
    net = netns.Network(2)
    try:
        net.create()
        old_ns, old_addr = net.netns(1), net.addr(1)
        net.set_rules({0: netns.Rules(drop=frozenset({1}))})  # node 0 must not reach node 1
        assert _u32_hex(old_addr) in _egress_filters(net.netns(0))
        new_addr = net.move(1)
        assert new_addr != old_addr and new_addr == net.addr(1)
        assert net.netns(1) != old_ns
        names = _netns_names()
        assert net.netns(1) in names and old_ns not in names  # nothing at the old address
        # Node 0's cut now names node 1's new address, not the old one.
        filters = _egress_filters(net.netns(0))
        assert _u32_hex(new_addr) in filters and _u32_hex(old_addr) not in filters
        shown = subprocess.run(
            ["ip", "-n", net.netns(1), "-4", "addr", "show", "dev", netns.IFACE],
            capture_output=True,
            text=True,
            check=True,
        )
        assert f"inet {new_addr}/24" in shown.stdout
    finally:
        net.destroy()
    assert not {net.netns(0), net.netns(1)} & _netns_names()
