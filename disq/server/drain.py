"""Graceful drain on SIGTERM (issue 11): leave, hand the jobs off, flush, exit 0.

What a SIGTERM does on a node with a cluster half (``NodeRuntime.terminate``):

1. The node says it is leaving, as CLUSTER LEAVING yes: ADDJOB answers -LEAVING (the SDK
   moves on to another node), a blocking GETJOB too, REPLJOB is refused, and the flag rides
   on every membership message so peers stop choosing this node. The beanstalk door goes
   into drain mode (as SIGUSR1: puts answer DRAINING).
2. The Disque core hands its jobs off (disq/core/disque/handoff.py): every queued job is
   queued on another node now, not after its RETRY; a job with no copy elsewhere
   (REPLICATE 1) is copied to another node first. The core's messages leave through the
   ordinary flush, after the AOF write.
3. When the core reports nothing left in flight (``handoff.pending() == 0``), or the drain
   bound passes (``--drain-timeout-s``, default 20 s, below Kubernetes' 30 s grace period),
   the node stops as before: the last flush, the cluster closed, the AOF fsynced and
   closed, exit 0. A node with nothing to hand off stops at once.

A second SIGTERM during the drain stops at once. SIGINT always stops at once (a terminal's
Ctrl-C means now). ``--drain-timeout-s 0`` turns the drain off. A node without a cluster half
(the beanstalkd-style door alone) has no peer to hand anything to and stops at once.

Leaving set by the drain is not kept across a restart: the view saved in cluster.json says
not leaving (``ClusterServices.leaving_for_drain``), so a node restarted on the same data dir
rejoins as an ordinary member (its raised incarnation announces it). A CLUSTER LEAVING yes
given by an operator before the SIGTERM is kept, as Disque keeps it.

Blocked GETJOB clients of this node keep waiting until their TIMEOUT or the node stops.
Beanstalk jobs cannot move (no protocol for that): replicated ones are taken over by a holder
once this node is gone; the others stay in the AOF for a restart.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from disq.logging import get_logger

if TYPE_CHECKING:
    from disq.server.host import NodeHost

DRAIN_POLL_S = 0.05  # how often the drain looks at what is left (and retries silent peers)

log: Any = get_logger("disq.node")


def start_drain(runtime: NodeHost) -> asyncio.Task[None]:
    """Begin the drain; the task stops the runtime when it ends, whatever happens."""
    return runtime.loop.create_task(_drain(runtime), name="drain")


async def _drain(runtime: NodeHost) -> None:
    try:
        await _hand_off(runtime)
    except Exception:
        log.exception("drain_failed")
    finally:
        runtime.stop()


async def _hand_off(runtime: NodeHost) -> None:
    cluster = runtime.cluster
    if cluster is None:
        return
    loop = runtime.loop
    deadline = loop.time() + runtime.config.drain_timeout_s
    membership = cluster.membership
    disque = cluster.disque
    now = runtime.now_ms()
    if not membership.leaving:
        cluster.leaving_for_drain = True
        membership.set_leaving(now, True)
    runtime.beanstalk.draining = True  # the beanstalk door refuses puts too (as SIGUSR1)
    links = cluster.links
    jobs = disque.handoff.start(
        now, usable=links.is_up if links is not None else lambda _node_id: False
    )
    runtime.after_commands(None, now)
    log.info("drain_started", jobs=jobs, timeout_s=runtime.config.drain_timeout_s)
    while disque.handoff.pending() and loop.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
        now = runtime.now_ms()
        disque.handoff.tick(now)
        runtime.after_commands(None, now)
    left = disque.handoff.pending()
    if left:
        log.warning("drain_timed_out", jobs_left=left)
    else:
        log.info("drain_done", jobs=jobs)
