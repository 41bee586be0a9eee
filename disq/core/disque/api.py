"""The contract between the cluster core and everything around it (doors, IO, simulator).

Kept in its own small module so the RESP door, the gRPC link layer and the simulator can be
written against it while the core evolves.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from disq.core.disque.job import DJob


class DisqueError(Exception):
    """A command failed; the RESP door answers ``-<code> <message>``.

    ``code`` is Disque's error prefix (ERR, NOREPL, PAUSED, MAXLEN, BADID, NOJOB, TOOLATE,
    LEAVING, OOM), stable and machine-readable: the gRPC door maps it to a status reason.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DisqueError)
            and other.code == self.code
            and other.message == self.message
        )

    def __hash__(self) -> int:
        return hash((self.code, self.message))


# Disque's error texts, word for word (clients match on them).
NOREPL_NODES = "Not enough reachable nodes for the requested replication level"
NOREPL_NODES_LOCAL = (
    "Not enough reachable nodes for the requested replication level, since I'm unable to "
    "hold a copy of the message for the following reason: "
)
NOREPL_TIMEOUT = "Timeout reached before replicating to the requested number of nodes"
NOREPL_EXPIRED = "job removed (expired?) before the requested replication level was achieved"
LEAVING_MSG = "This node is leaving the cluster, please connect to a different one"


class Pending:
    """Returned by a command that blocks; its answer comes later through ``core.replies``."""

    _instance: ClassVar[Pending | None] = None

    def __new__(cls) -> Pending:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "PENDING"


PENDING = Pending()

# What a deferred reply carries: a job id (ADDJOB done), a list of jobs (GETJOB served),
# None (GETJOB timed out: null multibulk) or an error (NOREPL, LEAVING, ...).
DeferredResult = str | list[DJob] | None | DisqueError


class ClusterView(Protocol):
    """What the job core needs to know about the membership (SWIM lives elsewhere)."""

    @property
    def my_id(self) -> str: ...

    @property
    def leaving(self) -> bool:
        """This node is leaving (CLUSTER LEAVING yes)."""
        ...

    def cluster_size(self) -> int:
        """Known nodes including this one (Disque's ``server.cluster->size``)."""
        ...

    def reachable_peers(self) -> list[str]:
        """Peers that are alive, not suspected and not leaving: replication targets."""
        ...

    def all_peers(self) -> list[str]:
        """Every known peer except dead/left ones: where broadcasts go."""
        ...
