"""The contract between the cluster core and everything around it (doors, IO, simulator).

Kept in its own small module so the RESP door, the gRPC link layer and the simulator can be
written against it while the core evolves.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Protocol

from disq.core.disque.job import DJob
from disq.core.job_record import Headers


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


DEFAULT_TTL_S = 86400  # a job's TTL when the add gives none (Disque's: one day)


class AddOptions(NamedTuple):
    """An add's options, as every door hands them to the core (``DisqueCore.add_job``): RESP's
    ADDJOB arguments, gRPC's AddJobRequest, a schedule's tick, a held keyed retry. Immutable
    once made, so the RESP door can keep one per distinct argument list. (The SDK's own
    ``disq.client.adds.AddOptions`` is the user-facing spelling of the same options.)

    - ``timeout_ms``: how long a synchronous add waits for its copies (0: forever).
    - ``repl``: copies; None: min(3, cluster size).
    - ``delay_s`` or ``delay_ms``: queued that much later (the record keeps whole seconds,
      rounded up); ``retry_s``: requeued after this long unacked (None: the default, 0: at
      most once); ``ttl_s``: deleted after this long (None: one day).
    - ``maxlen``: refused when the queue holds that many; ``async_``: answered at one copy;
      ``idem_key``: a repeat within the window answers the first job's id.
    - ``headers``: (key, value) pairs the job carries, None if none (job_record.py's bounds,
      checked by the core: ``headers_error``).

    A NamedTuple, not a dataclass (``dataclasses`` stays off a standalone node's start,
    tests/unit/test_startup.py). Compiled, making one costs about 0.2 us more than a plain
    class's compiled ``__init__`` (a gRPC add pays it; the RESP door keeps its options) and
    reading a field a few ns more.
    """

    timeout_ms: int = 0
    repl: int | None = None
    delay_s: int = 0
    retry_s: int | None = None
    ttl_s: int | None = None
    maxlen: int | None = None
    async_: bool = False
    idem_key: str = ""
    delay_ms: int = 0
    headers: Headers | None = None

    def with_timeout(self, timeout_ms: int) -> AddOptions:
        """The same options with another ``timeout_ms`` (a held retry's time left)."""
        return self._replace(timeout_ms=timeout_ms)


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

# What a deferred reply carries: a job id (ADDJOB done; "OK": RESULT SET done), a list of
# jobs (GETJOB served), a result's value (RESULT WAIT), None (GETJOB or RESULT WAIT timed
# out: a null reply) or an error (NOREPL, LEAVING, ...).
DeferredResult = str | list[DJob] | bytes | None | DisqueError


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
