"""The disq SDK: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), the same
methods; errors in :mod:`disq.client.errors`. See docs/sdk.md."""

from disq.client.aio import AsyncClient, Job, NodeAddr, Schedule
from disq.client.errors import (
    AuthError,
    BadIdError,
    DisqError,
    IndeterminateError,
    InvalidArgumentError,
    LeavingError,
    MaxLenError,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    TooLateError,
    UnavailableError,
)
from disq.client.sync import Client

__all__ = [
    "AsyncClient",
    "AuthError",
    "BadIdError",
    "Client",
    "DisqError",
    "IndeterminateError",
    "InvalidArgumentError",
    "Job",
    "LeavingError",
    "MaxLenError",
    "NoJobError",
    "NoReplError",
    "NodeAddr",
    "OutOfMemoryError",
    "PausedError",
    "Schedule",
    "TooLateError",
    "UnavailableError",
]
