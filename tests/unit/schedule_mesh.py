"""What the scheduler's tests read of a Mesh: a node's scheduler, and the jobs made per tick."""

from __future__ import annotations

from disq.core.schedule.scheduler import Scheduler
from disq.testing.mesh import Mesh


def scheduler(mesh: Mesh, i: int = 0) -> Scheduler:
    s = mesh.nodes[i].scheduler
    assert s is not None
    return s


def tick_jobs(mesh: Mesh, name: str) -> dict[int, set[str]]:
    """Tick -> the ids of the jobs any node holds for it (one per tick, or a bug)."""
    out: dict[int, set[str]] = {}
    prefix = f"schedule:{name}:"
    for i in range(len(mesh.nodes)):
        for j in mesh.disque(i).jobs.values():
            if j.idem_key.startswith(prefix):
                out.setdefault(int(j.idem_key[len(prefix) :]), set()).add(j.id)
    return out
