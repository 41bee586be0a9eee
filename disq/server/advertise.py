"""The address a node gives its peers and clients (Redis Cluster's ``cluster-announce-ip``).

A node's own membership record carries it, so it is what gossip spreads, what HELLO (RESP
and gRPC) and CLUSTER NODES list, what the SDK dials and what the peer links (and the job
lanes beside them) connect to. It is not always the address the node binds:

* ``--advertise-host`` / ``advertise-host`` given: that, as is (a pod IP, a NAT's public
  address, a DNS name the peers resolve when they dial).
* Otherwise the bind address, when it is one address.
* Bound to a wildcard (0.0.0.0, ::) with nothing advertised: no address is right for sure.
  The node takes the address of the interface its default route leaves by (what a peer on
  another machine most likely reaches it at; in a container or a pod, its own IP) and, with
  no route at all, loopback (a cluster on one machine). Either way it says so in a warning
  at start, since a wrong guess only shows up as peers that cannot reach it.
"""

from __future__ import annotations

import socket

__all__ = ["WILDCARD_BINDS", "advertised_host", "route_address"]

WILDCARD_BINDS = ("0.0.0.0", "::", "")
# Documentation addresses (RFC 5737, RFC 3849): connecting a UDP socket to one asks the
# kernel which source address its route would use, and sends nothing.
_PROBE = {socket.AF_INET: "192.0.2.1", socket.AF_INET6: "2001:db8::1"}
_LOOPBACK = {socket.AF_INET: "127.0.0.1", socket.AF_INET6: "::1"}


def route_address(family: socket.AddressFamily) -> str | None:
    """The source address of this host's route to the outside in ``family``; None when
    there is no such route (an isolated network namespace, no IPv6)."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((_PROBE[family], 9))
            addr = str(s.getsockname()[0])
    except OSError:
        return None
    return None if addr in WILDCARD_BINDS else addr


def advertised_host(bind_host: str, advertise_host: str | None) -> tuple[str, str | None]:
    """(the address to advertise, why it is a guess: None when it is not one)."""
    if advertise_host:
        return advertise_host, None
    if bind_host not in WILDCARD_BINDS:
        return bind_host, None
    # "::" usually accepts IPv4 too (dual stack), so an IPv4 route will do after an IPv6 one.
    families = [socket.AF_INET6, socket.AF_INET] if bind_host == "::" else [socket.AF_INET]
    for family in families:
        addr = route_address(family)
        if addr is not None:
            return addr, f"bound to {bind_host or 'every address'}: the default route's address"
    loopback = _LOOPBACK[families[0]]
    return loopback, f"bound to {bind_host or 'every address'} and no route out: loopback"
