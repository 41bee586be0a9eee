"""SWIM-style cluster membership: a pure, deterministic state machine.

Like etcd's raft package, this module does no IO and reads no clock: every entry point takes
``now_ms`` and all randomness comes from the injected ``random.Random``. The IO layer (the gRPC
peer links) or the simulator delivers what accumulates in ``outbox`` and feeds incoming
messages to ``on_message``; ``next_deadline_ms()`` says when ``tick`` must run next.

Protocol (Das, Gupta, Motivala: "SWIM", 2002, with the usual memberlist refinements):

- Each protocol period (``probe_interval_ms``) probes one member, round-robin over a list that
  is re-shuffled every round (new members are inserted at a random place in the current
  round). Round-robin bounds the time to the first probe of a failed node to two rounds, where
  purely random selection only bounds it in expectation.
- No Ack within ``ping_timeout_ms``: ask ``indirect_probes`` random ALIVE members to probe
  the target (PingReq); they forward the target's Ack with ``target`` set. Still no Ack when
  the period ends: the target becomes SUSPECT. SUSPECT for ``node_timeout_ms`` (Disque's node
  timeout, 15 s) without a refutation: DEAD.
- Dissemination is piggybacked on Ping/Ack (never extra messages): at most ``MAX_GOSSIP``
  records per message. First the sender's own record (so a receiver that never heard of the
  sender can add it, and refutations travel with every message), then the record of the
  destination if we suspect it or think it dead (so it can refute at once), then recent changes
  (fewest transmissions first, then most recently changed), each sent at most
  ``RETRANSMIT_MULT * ceil(log2(n + 1))`` times, then random known records to fill the
  message. The filler is anti-entropy: piggybacking alone is probabilistic and a node that
  missed an update under message loss would otherwise never learn it; the filler makes every
  view converge eventually without any extra message (memberlist uses a periodic push-pull
  TCP sync for that; we keep one message type and pay with slightly larger frames).
- Incarnations: only a node raises its own. Higher incarnation wins; at equal incarnation
  ALIVE < SUSPECT < DEAD < LEFT. A node told it is SUSPECT/DEAD/LEFT at its incarnation (or
  anything at a higher one, from an earlier life) raises its incarnation above it.
- Addresses: a record carries the node's host and ports, so a node that restarts elsewhere
  (a new pod IP) is found at its new address by the higher incarnation of its restart, and
  its own Pings and Acks carry its current address even when that incarnation is behind.
- DEAD members stay known (and counted in ``cluster_size``, like Disque's failing nodes) until
  CLUSTER FORGET; one of them is pinged every ``DEAD_PROBE_EVERY`` periods, so a restarted
  node, or the far side of a healed partition, is found again even if it does not call us.
- Reachability (``reachable_peers``, the replication targets) is Disque's: a known peer counts
  until the failure detector gives up on it (DEAD, Disque's PFAIL after the node timeout;
  SUSPECT still counts), never from the state of a link. A restarted node counts the peers of
  its saved view reachable at once, except those it had DEAD, until they are heard from.

Disque specifics: HELLO priorities (1 ok, 5 no link yet, 10 PFAIL/suspect, 100 FAIL or
leaving), CLUSTER LEAVING (a flag in the member record, gossiped under a raised incarnation),
CLUSTER FORGET with Redis's 60 s ban, CLUSTER RESET.

CLUSTER RESET and the forgotten nodes: Disque forgets every node and then ignores whatever an
unknown node sends until a MEET (clusterProcessPacket drops every packet of an unknown sender
but a MEET's). SWIM here takes an unknown sender in by design (its Ping carries its record:
that is how a node that lost its view is found again), so a reset would undo itself within a
probe period: the peers that still know the node ping it and are back, with their job
messages. So a reset puts the nodes it forgot in ``_forgotten``, and everything they send is
ignored (``ignores``; the node core drops their job messages too) until a meet makes one
known again: its meet Ping (``Ping.meet``, from CLUSTER MEET or ``--join`` there), its Ack to
our own meet, or its record in the gossip of a member we know again (Disque learns nodes from
a known node's gossip the same way). Nodes never forgotten are taken in as before.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from disq.core.messages import ALIVE, DEAD, LEFT, SUSPECT, Ack, Member, Message, Ping, PingReq

FORGOTTEN = 0
"""Event state (not a member state) for a node removed by ``forget``/``reset``: close its link."""

MAX_GOSSIP = 8
"""Member records per Ping/Ack (own record included). Bounds frame size in large clusters."""

RETRANSMIT_MULT = 3
"""An update is piggybacked ``RETRANSMIT_MULT * ceil(log2(n + 1))`` times (memberlist: 4)."""

DEAD_PROBE_EVERY = 5
"""Every this many periods, ping one DEAD member (round-robin) in case it came back."""

MEET_PROBES_KEPT = 256
"""Probe ids of this node's last meets, whose Acks take a forgotten node back."""

FORGOTTEN_MAX = 4096
"""Bound of the nodes a CLUSTER RESET keeps ignoring (the oldest are let go past it)."""

FORMER_IDS_MAX = 64
"""This node's ids before its hard resets, kept so that no gossip teaches them back."""

FORGET_BAN_MS = 60_000
"""Redis's CLUSTER FORGET blacklist: the node cannot be re-added by gossip for 60 s, so the
operator has time to forget it on every node before anyone re-teaches it."""

SNAPSHOT_VERSION = 1

PRIORITY_OK = 1
PRIORITY_NO_LINK = 5
PRIORITY_PFAIL = 10
PRIORITY_FAIL = 100

_MEMBER_STATES = (ALIVE, SUSPECT, DEAD, LEFT)


@dataclass(slots=True)
class _Entry:
    """A known peer: its last accepted record plus what only this node knows about it."""

    rec: Member
    # False only for peers restored from a snapshot that we have not heard from (directly or
    # through fresh gossip) since: HELLO reports Disque's "no link" priority for them. It does
    # not decide reachability: as in Disque, a known peer is reachable until the failure
    # detector says otherwise (PFAIL after the node timeout, DEAD here), link or no link.
    confirmed: bool
    suspect_since_ms: int = 0
    # Restored from a snapshot that had it DEAD (Disque reloads FAIL from nodes.conf): not a
    # replication target until we hear from it, though it is probed like any ALIVE member.
    failed_before_restart: bool = False


@dataclass(slots=True)
class _Probe:
    """This period's probe of ``target`` (SWIM): a Ping, then PingReqs to helpers once it
    goes unanswered for the ping timeout."""

    target: str
    probe_id: int
    start_ms: int
    acked: bool = False
    indirect_sent: bool = False

    @property
    def unanswered(self) -> bool:
        """No ack yet and no helper asked yet: the indirect probe may still come due."""
        return not self.acked and not self.indirect_sent


@dataclass(slots=True)
class _Relay:
    """We were asked (PingReq) to probe ``target`` for ``origin``; our Ping carried our id."""

    origin: str
    origin_probe_id: int
    target: str
    expires_ms: int


def _copy(m: Member) -> Member:
    # Records travel by reference in the simulator: never share a Member between two views.
    return replace(m)


def _member_from_dict(d: dict[str, Any]) -> Member:
    return Member(
        node_id=str(d["node_id"]),
        host=str(d["host"]),
        grpc_port=int(d["grpc_port"]),
        client_port=int(d["client_port"]),
        incarnation=int(d["incarnation"]),
        state=int(d["state"]),
        leaving=bool(d.get("leaving", False)),
    )


class Membership:
    """SWIM membership of one node; implements ``disq.core.disque.api.ClusterView``.

    Outputs, drained by the IO layer:

    - ``outbox``: ``(destination node id, Ping | Ack | PingReq)``.
    - ``events``: ``(node_id, state)`` whenever a peer's state or address changes (ALIVE,
      SUSPECT, DEAD, LEFT), including a newly learned peer, and ``FORGOTTEN`` (0) when it is
      forgotten.
    - ``stats``: message counters (``messages_sent``/``messages_received`` for CLUSTER INFO).
    """

    def __init__(
        self,
        me: Member,
        rng: random.Random,
        now_ms: int,
        *,
        probe_interval_ms: int = 500,
        ping_timeout_ms: int = 200,
        node_timeout_ms: int = 15000,
        indirect_probes: int = 3,
    ) -> None:
        if not 0 < ping_timeout_ms < probe_interval_ms:
            # The indirect round must fit inside the period, else it could never save a node.
            raise ValueError("need 0 < ping_timeout_ms < probe_interval_ms")
        if node_timeout_ms <= 0 or indirect_probes < 0:
            raise ValueError("need node_timeout_ms > 0 and indirect_probes >= 0")
        self._me = replace(me, state=ALIVE)
        self._rng = rng
        self.probe_interval_ms = probe_interval_ms
        self.ping_timeout_ms = ping_timeout_ms
        self.node_timeout_ms = node_timeout_ms
        self.indirect_probes = indirect_probes

        self.outbox: list[tuple[str, Message]] = []
        self.events: list[tuple[str, int]] = []
        self.stats: dict[str, int] = {
            "messages_sent": 0,
            "messages_received": 0,
            "ping_sent": 0,
            "ack_sent": 0,
            "pingreq_sent": 0,
            "ping_received": 0,
            "ack_received": 0,
            "pingreq_received": 0,
            "probes": 0,
            "probes_failed": 0,
            "indirect_probes": 0,
            "refutations": 0,
        }

        self._members: dict[str, _Entry] = {}
        self._banned: dict[str, int] = {}  # node id -> ban end (ms)
        # CLUSTER RESET: the nodes it forgot, ignored until a meet (see the module's doc);
        # insertion order is age, for FORGOTTEN_MAX.
        self._forgotten: dict[str, None] = {}
        self._meet_probes: dict[int, None] = {}  # our meets' probe ids, while _forgotten
        # Our own ids before a CLUSTER RESET HARD: the peers that knew us by one gossip it,
        # at our own address, and a node taken from it would be a ghost peer (ours).
        self._former_ids: dict[str, None] = {}
        self.ignored = 0  # messages of forgotten nodes ignored (membership's and the cores')
        # Pending dissemination: node id -> [times sent, change sequence]. The record itself is
        # read from the view when sent, so a newer change of the same node replaces the old one.
        self._gossip: dict[str, list[int]] = {}
        self._change_seq = 0
        # Probe ids are ours alone (Acks come back to us); a random start makes an Ack from
        # before a restart very unlikely to match a probe of the new life.
        self._next_probe_id = rng.getrandbits(31) + 1
        self._probe: _Probe | None = None
        self._order: list[str] = []
        self._order_pos = 0
        self._relays: dict[int, _Relay] = {}
        self._periods = 0
        self._dead_cursor = 0
        # Random phase so nodes started together do not probe in lockstep.
        self._next_probe_ms = now_ms + rng.randrange(probe_interval_ms)
        self._view_cache: tuple[tuple[str, ...], tuple[str, ...], int] | None = None

    # ------------------------------------------------------------------ ClusterView
    @property
    def my_id(self) -> str:
        return self._me.node_id

    @property
    def leaving(self) -> bool:
        return self._me.leaving

    @property
    def incarnation(self) -> int:
        return self._me.incarnation

    def cluster_size(self) -> int:
        """This node plus every known, non-forgotten member, DEAD included, LEFT excluded."""
        return self._views()[2]

    def reachable_peers(self) -> list[str]:
        """ALIVE or SUSPECT, not leaving, not me; sorted. Replication targets.

        Disque's reachable nodes: every known node not flagged PFAIL/FAIL, whatever the state
        of its link. SUSPECT counts: a suspicion comes after one missed probe (a few hundred
        ms), which a busy event loop causes all the time; Disque stops using a peer only at
        PFAIL, after the whole node timeout, and that is what DEAD is here. So a restarted node
        counts the peers of its saved view reachable at once (not the ones it had DEAD, until
        they are heard from), and its probes demote the silent ones as usual."""
        return list(self._views()[0])

    def all_peers(self) -> list[str]:
        """ALIVE or SUSPECT peers (leaving ones too); sorted. Where broadcasts go."""
        return list(self._views()[1])

    def is_reachable(self, node_id: str) -> bool:
        """True for this node itself and for the members of ``reachable_peers``."""
        if node_id == self._me.node_id:
            return True
        e = self._members.get(node_id)
        return (
            e is not None
            and e.rec.state in (ALIVE, SUSPECT)
            and not e.rec.leaving
            and (e.confirmed or not e.failed_before_restart)
        )

    def _views(self) -> tuple[tuple[str, ...], tuple[str, ...], int]:
        # The job core asks for these on every ADDJOB; recompute only after a change.
        if self._view_cache is None:
            ids = sorted(self._members)
            reach = tuple(n for n in ids if self.is_reachable(n))
            allp = tuple(n for n in ids if self._members[n].rec.state in (ALIVE, SUSPECT))
            size = 1 + sum(1 for e in self._members.values() if e.rec.state != LEFT)
            self._view_cache = (reach, allp, size)
        return self._view_cache

    # ------------------------------------------------------------------ queries
    def members(self) -> list[Member]:
        """Copies of every known record, this node first, then by node id."""
        return [_copy(self._me)] + [_copy(self._members[n].rec) for n in sorted(self._members)]

    def member(self, node_id: str) -> Member | None:
        if node_id == self._me.node_id:
            return _copy(self._me)
        e = self._members.get(node_id)
        return None if e is None else _copy(e.rec)

    def hello_priority(self, node_id: str) -> int:
        """Disque's HELLO priority: 1 ok, 5 no link yet (restored, not heard from), 10 suspect
        (PFAIL), 100 dead, left, leaving, or unknown. Lower is better."""
        if node_id == self._me.node_id:
            return PRIORITY_FAIL if self._me.leaving else PRIORITY_OK
        e = self._members.get(node_id)
        if e is None or e.rec.state in (DEAD, LEFT) or e.rec.leaving:
            return PRIORITY_FAIL
        if e.rec.state == SUSPECT:
            return PRIORITY_PFAIL
        return PRIORITY_OK if e.confirmed else PRIORITY_NO_LINK

    # ------------------------------------------------------------------ commands
    def meet_message(self) -> Ping:
        """A Ping for an address whose node id is unknown (--join, CLUSTER MEET).

        It carries only our own record: the receiver adds us and its Ack (own record, recent
        changes, random filler) starts teaching us the cluster. Counted as sent. Flagged as
        a meet, which a node that forgot us in a reset takes us back on; after our own
        reset, the Ack to it takes the node that answers back here (``_meet_probes``).
        """
        msg = Ping(probe_id=self._new_probe_id(), gossip=[_copy(self._me)], meet=True)
        if self._forgotten:
            probes = self._meet_probes
            probes[msg.probe_id] = None
            if len(probes) > MEET_PROBES_KEPT:
                del probes[next(iter(probes))]
        self._count(msg, "sent")
        return msg

    def set_leaving(self, now_ms: int, leaving: bool) -> None:
        """CLUSTER LEAVING yes|no. The flag rides in our own record, which every message we send
        carries; the raised incarnation makes it win over the old record everywhere."""
        if self._me.leaving == leaving or self._me.state == LEFT:
            return
        self._me.leaving = leaving
        self._me.incarnation += 1
        self._invalidate()

    def forget(self, now_ms: int, node_id: str) -> None:
        """CLUSTER FORGET: drop the node and ignore it (gossip and messages) for 60 s.

        Local only, as in Redis: the operator runs it on every node within the ban window,
        otherwise the nodes that still know it re-teach it once the ban ends.
        """
        if node_id == self._me.node_id:
            raise ValueError("I tried hard but I can't forget myself...")
        if node_id not in self._members:
            raise ValueError(f"Unknown node {node_id}")
        self._remove(node_id)
        self._banned[node_id] = now_ms + FORGET_BAN_MS

    def reset(self, now_ms: int, new_id: str = "") -> None:
        """CLUSTER RESET: forget every peer, and ignore what they send until a meet (see
        the module's doc). Old bans are lifted: a forgotten node comes back by a meet alone,
        at once. What was still to be sent to them is dropped. ``new_id``: HARD, this node
        is a new node from now on (incarnation 0), and its old id is never taken as a peer."""
        if new_id and new_id != self._me.node_id:
            former = self._former_ids
            former[self._me.node_id] = None
            while len(former) > FORMER_IDS_MAX:
                del former[next(iter(former))]
            self._me = replace(self._me, node_id=new_id, incarnation=0)
        forgotten = self._forgotten
        for node_id in list(self._members):
            self._remove(node_id)
            forgotten.pop(node_id, None)
            forgotten[node_id] = None  # the newest last
        while len(forgotten) > FORGOTTEN_MAX:
            del forgotten[next(iter(forgotten))]
        self._banned.clear()
        self._relays.clear()
        self._gossip.clear()
        self._meet_probes.clear()
        self._order = []
        self._order_pos = 0
        self.outbox = [(dest, msg) for dest, msg in self.outbox if dest not in forgotten]

    def ignores(self, sender: str) -> bool:
        """``sender`` was forgotten by a CLUSTER RESET and not met since: what it sends is
        dropped (the node core asks this of every peer message that is not membership's)."""
        return sender in self._forgotten

    def forgotten(self) -> list[str]:
        """The nodes a CLUSTER RESET forgot and no meet brought back, oldest first."""
        return list(self._forgotten)

    def _met(self, node_id: str) -> None:
        del self._forgotten[node_id]
        if not self._forgotten:
            self._meet_probes.clear()

    def announce_left(self, now_ms: int) -> None:
        """Leave the cluster for good: tell every peer we are LEFT (one Ping each) and go inert.

        LEFT beats ALIVE at our current incarnation, so peers stop probing us and drop us from
        cluster_size at once instead of after the node timeout. Restarting with ``restore``
        raises the incarnation and brings the node back.
        """
        if self._me.state == LEFT:
            return
        self._me.state = LEFT
        self._probe = None
        for node_id in self.all_peers():
            self._send(node_id, Ping(probe_id=self._new_probe_id(), gossip=[_copy(self._me)]))

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        """JSON-able view so a restarted node knows whom to contact (bans are not kept;
        the nodes a reset forgot are: a restart must not take them back)."""
        snap: dict[str, Any] = {
            "version": SNAPSHOT_VERSION,
            "me": asdict(self._me),
            "members": [asdict(self._members[n].rec) for n in sorted(self._members)],
        }
        if self._forgotten:
            snap["forgotten"] = list(self._forgotten)
        if self._former_ids:
            snap["former_ids"] = list(self._former_ids)
        return snap

    @classmethod
    def restore(
        cls, snapshot: dict[str, Any], me: Member, rng: random.Random, now_ms: int, **timing: int
    ) -> Membership:
        """A restarted node: same id, incarnation above the saved one (so our ALIVE beats
        whatever the cluster concluded while we were away), leaving flag kept (Disque persists
        it), peers ALIVE but unconfirmed. Every ALIVE peer is pinged at once, so the cluster
        learns of the restart within one round trip and we learn which peers still answer.
        Peers that stay silent go SUSPECT then DEAD through normal probing.

        Reachability is Disque's: the peers that were ALIVE or SUSPECT in the snapshot are
        reachable (replication targets) at once, before any message, so a node restarted under
        load accepts replicated adds right away; the ones that were DEAD (Disque reloads FAIL
        from nodes.conf) become reachable only when heard from. ``timing``: the constructor's
        keyword arguments."""
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported membership snapshot version {snapshot.get('version')}")
        saved_me = _member_from_dict(snapshot["me"])
        if saved_me.node_id != me.node_id:
            raise ValueError("membership snapshot belongs to another node id")
        me = replace(
            me,
            incarnation=max(me.incarnation, saved_me.incarnation) + 1,
            leaving=me.leaving or saved_me.leaving,
            state=ALIVE,
        )
        m = cls(me, rng, now_ms, **timing)
        for d in snapshot["members"]:
            rec = _member_from_dict(d)
            if rec.node_id == me.node_id or rec.state not in _MEMBER_STATES:
                continue
            # A LEFT record stays LEFT (final for its incarnation); everything else is a guess
            # to verify, and ALIVE-unconfirmed is the state that gets verified by probing. A
            # DEAD record is not gossiped as such (it may be stale and would make the others
            # suspect a live node), but it is remembered: no replication target until heard.
            was_dead = rec.state == DEAD
            rec.state = LEFT if rec.state == LEFT else ALIVE
            m._add(now_ms, rec, confirmed=False)
            m._members[rec.node_id].failed_before_restart = was_dead
        m._gossip.clear()  # old news: nobody needs it retransmitted
        for node_id in snapshot.get("forgotten", ()):
            if isinstance(node_id, str) and node_id not in m._members:
                m._forgotten[node_id] = None
        for node_id in snapshot.get("former_ids", ()):
            if isinstance(node_id, str) and node_id != me.node_id:
                m._former_ids[node_id] = None
        m._invalidate()
        for node_id, e in m._members.items():
            if e.rec.state == ALIVE:
                m._send(node_id, Ping(probe_id=m._new_probe_id(), gossip=m._gossip_for(node_id)))
        return m

    # ------------------------------------------------------------------ input
    def on_message(self, now_ms: int, sender: str, msg: Ping | Ack | PingReq) -> None:
        self._count(msg, "received")
        if self._me.state == LEFT or sender == self._me.node_id:
            return
        if self._is_banned(sender, now_ms):
            return  # forgotten: we do not talk to it, not even to answer
        if self._forgotten and sender in self._forgotten:
            if (isinstance(msg, Ping) and msg.meet) or (
                isinstance(msg, Ack) and msg.probe_id in self._meet_probes
            ):
                self._met(sender)  # it met us, or answered our meet: known again
            else:
                self.ignored += 1
                return
        if not isinstance(msg, PingReq):
            # Forgotten nodes come back through the gossip of a member only: an unknown
            # sender may still be one of the reset's cluster.
            trusted = sender in self._members or (isinstance(msg, Ping) and msg.meet)
            for rec in msg.gossip:
                self._merge(now_ms, rec, trusted)
            self._sender_address(now_ms, sender, msg.gossip)
        e = self._members.get(sender)
        if e is not None and not e.confirmed:
            e.confirmed = True
            self._invalidate()

        if isinstance(msg, Ping):
            if e is not None and e.rec.state == LEFT:
                return  # its farewell (announce_left): it is inert, an answer would be lost
            # Answer even an unknown sender without a record: the IO layer has its link.
            self._send(sender, Ack(probe_id=msg.probe_id, gossip=self._gossip_for(sender)))
        elif isinstance(msg, PingReq):
            self._on_ping_req(now_ms, sender, msg)
        else:
            self._on_ack(sender, msg)

    def on_link_up(self, now_ms: int, node_id: str) -> None:
        """The IO layer's link to ``node_id`` came up: ping it at once.

        This is how a restart is noticed within a round trip, both ways. A restarted node's
        links come up as its bus starts, so every peer hears from it at once (pings queued
        before a link is up are dropped); a node that had it as SUSPECT or DEAD, whose link
        keeps reconnecting, pings it as soon as it listens again, whether or not it spoke
        first. The Ping carries the peer's own record when we suspect it or think it dead,
        so the Ack comes back with its refutation (a raised incarnation), which clears it:
        Disque's PONG clearing PFAIL, without waiting for the round-robin probe (up to a
        round of the cluster) or the dead-member probe (every DEAD_PROBE_EVERY periods)."""
        if self._me.state == LEFT or self._is_banned(node_id, now_ms):
            return
        e = self._members.get(node_id)
        if e is None or e.rec.state == LEFT:
            return
        self._send(node_id, Ping(probe_id=self._new_probe_id(), gossip=self._gossip_for(node_id)))

    def _on_ping_req(self, now_ms: int, sender: str, msg: PingReq) -> None:
        target = msg.target
        if target == self._me.node_id:
            # Asked to probe ourselves (a confused view): we are the proof.
            ack = Ack(probe_id=msg.probe_id, target=target, gossip=self._gossip_for(sender))
            self._send(sender, ack)
            return
        if target not in self._members or self._is_banned(target, now_ms):
            return  # no address for it; the origin's other helpers may do better
        probe_id = self._new_probe_id()
        self._relays[probe_id] = _Relay(
            sender, msg.probe_id, target, now_ms + self.probe_interval_ms
        )
        self._send(target, Ping(probe_id=probe_id, gossip=self._gossip_for(target)))

    def _on_ack(self, sender: str, msg: Ack) -> None:
        p = self._probe
        if msg.target:
            # A helper forwarding the target's answer to our PingReq.
            if p is not None and p.probe_id == msg.probe_id and p.target == msg.target:
                p.acked = True
                t = self._members.get(msg.target)
                if t is not None and not t.confirmed:
                    t.confirmed = True
                    self._invalidate()
            return
        relay = self._relays.get(msg.probe_id)
        if relay is not None and relay.target == sender:
            del self._relays[msg.probe_id]
            fwd = Ack(
                probe_id=relay.origin_probe_id,
                target=sender,
                gossip=self._gossip_for(relay.origin),
            )
            self._send(relay.origin, fwd)
            return
        if p is not None and p.probe_id == msg.probe_id and p.target == sender:
            p.acked = True
        # Any other Ack (meet, dead probe, late answer) already did its work: gossip + evidence.

    # ------------------------------------------------------------------ time
    def tick(self, now_ms: int) -> None:
        if self._me.state == LEFT:
            # Inert, but keep the deadline moving so a loop that still calls us does not spin.
            self._next_probe_ms = max(self._next_probe_ms, now_ms + self.probe_interval_ms)
            return
        if self._relays:
            for pid in [pid for pid, r in self._relays.items() if r.expires_ms <= now_ms]:
                del self._relays[pid]
        p = self._probe
        if (
            p is not None
            and p.unanswered
            and now_ms >= p.start_ms + self.ping_timeout_ms
            and now_ms < self._next_probe_ms
        ):
            p.indirect_sent = True
            self._send_ping_reqs(p)
        if now_ms >= self._next_probe_ms:
            self._end_probe(now_ms)
            self._periods += 1
            if self._periods % DEAD_PROBE_EVERY == 0:
                self._probe_dead()
            self._start_probe(now_ms)
            # From the actual start, not the planned one: a late tick (a stalled loop) must not
            # cause a burst of back-to-back probes that would all time out together.
            self._next_probe_ms = now_ms + self.probe_interval_ms
            if self._banned:
                for node_id in [n for n, until in self._banned.items() if until <= now_ms]:
                    del self._banned[node_id]
        for e in list(self._members.values()):
            if e.rec.state == SUSPECT and now_ms >= e.suspect_since_ms + self.node_timeout_ms:
                self._set_record(now_ms, e, replace(e.rec, state=DEAD))

    def next_deadline_ms(self) -> int:
        deadline = self._next_probe_ms
        if self._me.state == LEFT:
            return deadline
        p = self._probe
        if p is not None and p.unanswered:
            deadline = min(deadline, p.start_ms + self.ping_timeout_ms)
        for e in self._members.values():
            if e.rec.state == SUSPECT:
                deadline = min(deadline, e.suspect_since_ms + self.node_timeout_ms)
        return deadline

    # ------------------------------------------------------------------ probing
    def _start_probe(self, now_ms: int) -> None:
        target = self._next_target()
        if target is None:
            return
        self.stats["probes"] += 1
        self._probe = _Probe(target, self._new_probe_id(), now_ms)
        self._send(target, Ping(probe_id=self._probe.probe_id, gossip=self._gossip_for(target)))

    def _end_probe(self, now_ms: int) -> None:
        p, self._probe = self._probe, None
        if p is None or p.acked:
            return
        self.stats["probes_failed"] += 1
        e = self._members.get(p.target)
        if e is not None and e.rec.state == ALIVE:
            self._set_record(now_ms, e, replace(e.rec, state=SUSPECT))

    def _send_ping_reqs(self, p: _Probe) -> None:
        helpers = sorted(
            n for n, e in self._members.items() if e.rec.state == ALIVE and n != p.target
        )
        k = min(self.indirect_probes, len(helpers))
        if k == 0:
            return
        self.stats["indirect_probes"] += 1
        for helper in self._rng.sample(helpers, k):
            self._send(helper, PingReq(probe_id=p.probe_id, target=p.target))

    def _probeable(self, node_id: str) -> bool:
        e = self._members.get(node_id)
        return e is not None and e.rec.state in (ALIVE, SUSPECT)

    def _next_target(self) -> str | None:
        while True:
            while self._order_pos < len(self._order):
                node_id = self._order[self._order_pos]
                self._order_pos += 1
                if self._probeable(node_id):
                    return node_id
            eligible = sorted(n for n in self._members if self._probeable(n))
            self._order_pos = 0
            if not eligible:
                self._order = []
                return None
            self._rng.shuffle(eligible)
            self._order = eligible

    def _insert_in_round(self, node_id: str) -> None:
        # SWIM: a new member goes to a random place in the rest of the current round, so it
        # is probed soon without disturbing the bound for the others much.
        if node_id in self._order[self._order_pos :]:
            return
        at = self._rng.randint(self._order_pos, len(self._order))
        self._order.insert(at, node_id)

    def _probe_dead(self) -> None:
        dead = sorted(n for n, e in self._members.items() if e.rec.state == DEAD)
        if not dead:
            return
        node_id = dead[self._dead_cursor % len(dead)]
        self._dead_cursor += 1
        # Carries its DEAD record: if it is alive (healed partition) it refutes in its Ack.
        self._send(node_id, Ping(probe_id=self._new_probe_id(), gossip=self._gossip_for(node_id)))

    # ------------------------------------------------------------------ view updates
    def _merge(self, now_ms: int, rec: Member, trusted: bool = True) -> None:
        if not rec.node_id or rec.state not in _MEMBER_STATES:
            return
        if rec.node_id == self._me.node_id:
            self._about_me(rec)
            return
        if self._is_banned(rec.node_id, now_ms) or rec.node_id in self._former_ids:
            return
        if self._forgotten and rec.node_id in self._forgotten:
            if not trusted or rec.state not in (ALIVE, SUSPECT):
                return
            self._met(rec.node_id)
        e = self._members.get(rec.node_id)
        if e is None:
            # Learning a node from news of its death teaches nothing useful and would let
            # stale DEAD/LEFT records resurrect forgotten nodes; memberlist ignores them too.
            if rec.state in (ALIVE, SUSPECT):
                self._add(now_ms, rec, confirmed=True)
            return
        cur = e.rec
        if rec.incarnation < cur.incarnation:
            return
        if rec.incarnation == cur.incarnation and rec.state <= cur.state:
            return
        self._set_record(now_ms, e, rec)

    def _sender_address(self, now_ms: int, sender: str, gossip: list[Member]) -> None:
        """The address a node gives in its own record, in a Ping or Ack it sent itself, is
        its address now, whatever the incarnation says (Redis Cluster updates a node's
        address from its own PING the same way).

        A restarted node's incarnation outbids its saved one, but the saved one can be
        behind what the peers hold (a refutation or CLUSTER LEAVING raised it less than
        VIEW_SAVE_DELAY_S before a kill -9). Its new address would then lose to the old one
        at the peers, whose answers and probes would keep going to an address nobody
        listens on, so the node would never hear the record it has to outbid. Taking the
        address from the node itself breaks that loop; the incarnation and state stay ours
        until the node's refutation (or a restart's higher incarnation) replaces them."""
        if not gossip or gossip[0].node_id != sender or not gossip[0].host:
            return  # the sender's own record comes first (_gossip_for); else nothing to say
        e = self._members.get(sender)
        if e is None:
            return
        own = gossip[0]
        cur = e.rec
        if (own.host, own.grpc_port, own.client_port) == (cur.host, cur.grpc_port, cur.client_port):
            return
        self._set_record(
            now_ms,
            e,
            replace(cur, host=own.host, grpc_port=own.grpc_port, client_port=own.client_port),
        )

    def _about_me(self, rec: Member) -> None:
        me = self._me
        if me.state == LEFT:
            return
        if rec.incarnation > me.incarnation or (
            rec.incarnation == me.incarnation and (rec.state != ALIVE or rec.leaving != me.leaving)
        ):
            # Suspected, declared dead, or a record from an earlier life (stale snapshot):
            # outbid it. Our own record rides in every message we send, so no queueing.
            me.incarnation = max(me.incarnation, rec.incarnation) + 1
            self.stats["refutations"] += 1

    def _add(self, now_ms: int, rec: Member, *, confirmed: bool) -> None:
        rec = _copy(rec)
        self._members[rec.node_id] = _Entry(rec, confirmed, now_ms)
        self.events.append((rec.node_id, rec.state))
        self._queue_gossip(rec.node_id)
        if rec.state in (ALIVE, SUSPECT):
            self._insert_in_round(rec.node_id)
        self._invalidate()

    def _set_record(self, now_ms: int, e: _Entry, rec: Member) -> None:
        old_state = e.rec.state
        new = _copy(rec)
        if not new.host:  # defensive: keep the address we have
            new.host, new.grpc_port, new.client_port = (
                e.rec.host,
                e.rec.grpc_port,
                e.rec.client_port,
            )
        moved = (new.host, new.grpc_port, new.client_port) != (
            e.rec.host,
            e.rec.grpc_port,
            e.rec.client_port,
        )
        e.rec = new
        e.confirmed = True  # fresh news about it, not a snapshot guess any more
        if new.state != old_state:
            if new.state == SUSPECT:
                e.suspect_since_ms = now_ms
            self.events.append((new.node_id, new.state))
            if new.state in (ALIVE, SUSPECT) and old_state in (DEAD, LEFT):
                self._insert_in_round(new.node_id)
        elif moved:
            # Same state, new address (a node restarted elsewhere before it was suspected):
            # an event all the same, so the IO layer re-points the node's link.
            self.events.append((new.node_id, new.state))
        self._queue_gossip(new.node_id)
        self._invalidate()

    def _remove(self, node_id: str) -> None:
        del self._members[node_id]
        self._gossip.pop(node_id, None)
        if self._probe is not None and self._probe.target == node_id:
            self._probe = None
        self.events.append((node_id, FORGOTTEN))
        self._invalidate()

    def _is_banned(self, node_id: str, now_ms: int) -> bool:
        until = self._banned.get(node_id)
        if until is None:
            return False
        if now_ms >= until:
            del self._banned[node_id]
            return False
        return True

    def _invalidate(self) -> None:
        self._view_cache = None

    # ------------------------------------------------------------------ gossip
    def _queue_gossip(self, node_id: str) -> None:
        self._change_seq += 1
        self._gossip[node_id] = [0, self._change_seq]

    def _retransmit_limit(self) -> int:
        n = len(self._members) + 1
        return RETRANSMIT_MULT * max(1, math.ceil(math.log2(n + 1)))

    def _gossip_for(self, dest: str) -> list[Member]:
        out = [_copy(self._me)]
        included = {self._me.node_id, dest}
        d = self._members.get(dest)
        if d is not None and d.rec.state in (SUSPECT, DEAD):
            out.append(_copy(d.rec))  # let it refute now rather than when gossip reaches it
        if self._gossip:
            limit = self._retransmit_limit()
            queue = self._gossip
            for node_id in sorted(queue, key=lambda n: (queue[n][0], -queue[n][1])):
                if len(out) >= MAX_GOSSIP:
                    break
                if node_id in included:
                    continue
                e = self._members.get(node_id)
                if e is None:
                    del queue[node_id]
                    continue
                out.append(_copy(e.rec))
                included.add(node_id)
                counts = queue[node_id]
                counts[0] += 1
                if counts[0] >= limit:
                    del queue[node_id]
        room = MAX_GOSSIP - len(out)
        if room > 0:
            rest = [n for n in self._members if n not in included]
            for node_id in self._rng.sample(rest, min(room, len(rest))):
                out.append(_copy(self._members[node_id].rec))
        return out

    # ------------------------------------------------------------------ output
    def _new_probe_id(self) -> int:
        pid = self._next_probe_id
        self._next_probe_id += 1
        return pid

    def _count(self, msg: Ping | Ack | PingReq, way: str) -> None:
        """``messages_<way>`` and the kind's ``ping_``, ``ack_`` or ``pingreq_<way>`` (way:
        "sent" or "received")."""
        kind = "ping" if isinstance(msg, Ping) else "ack" if isinstance(msg, Ack) else "pingreq"
        self.stats["messages_" + way] += 1
        self.stats[f"{kind}_{way}"] += 1

    def _send(self, dest: str, msg: Ping | Ack | PingReq) -> None:
        self._count(msg, "sent")
        self.outbox.append((dest, msg))
