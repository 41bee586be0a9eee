"""The disq SDK: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), the same
methods; errors in :mod:`disq.client.errors`. See docs/sdk.md."""

from disq.client.aio import AsyncClient, Job
from disq.client.errors import (
    AuthError,
    BadIdError,
    DisqError,
    IndeterminateError,
    InvalidArgumentError,
    LeavingError,
    LimitError,
    MaxLenError,
    NoJobError,
    NoReplError,
    NotFoundError,
    OutOfMemoryError,
    PausedError,
    PreconditionFailedError,
    TooLateError,
    UnavailableError,
)
from disq.client.failover import NodeAddr
from disq.client.forking import ForkError
from disq.client.policies import QueuePolicy
from disq.client.routes import Routes
from disq.client.schedules import Schedule
from disq.client.sync import Client

__all__ = [
    "AsyncClient",
    "AuthError",
    "BadIdError",
    "Client",
    "DisqError",
    "ForkError",
    "IndeterminateError",
    "InvalidArgumentError",
    "Job",
    "LeavingError",
    "LimitError",
    "MaxLenError",
    "NoJobError",
    "NoReplError",
    "NodeAddr",
    "NotFoundError",
    "OutOfMemoryError",
    "PausedError",
    "PreconditionFailedError",
    "QueuePolicy",
    "Routes",
    "Schedule",
    "TooLateError",
    "UnavailableError",
]
