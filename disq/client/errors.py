"""The SDK's errors: one class per reason of api.proto's ErrorReason, stable ``reason`` strings.

A node's refusal carries an ErrorInfo in the trailing metadata (``disq-error-bin``); it is
mapped here to the class of its reason. Failures of the transport become
:class:`UnavailableError` (no node answered, safe to retry) or, for an add whose request may
have reached a node, :class:`IndeterminateError`: the job may or may not exist, and retrying
could add it twice (Disque's clients face the same choice after a lost connection).
"""

from __future__ import annotations

from typing import Any

from disq.proto_gen import api_pb2

ERROR_KEY = "disq-error-bin"


class DisqError(Exception):
    """Base of every SDK error. ``reason`` is the stable machine-readable name."""

    reason = "UNSPECIFIED"

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node  # the address that answered, when one did


class NoReplError(DisqError):
    """Not enough copies in time (Disque's -NOREPL): the job was deleted best effort."""

    reason = "NOREPL"


class MaxLenError(DisqError):
    reason = "MAXLEN"


class PausedError(DisqError):
    reason = "PAUSED"


class OutOfMemoryError(DisqError):
    reason = "OOM"


class BadIdError(DisqError):
    reason = "BADID"


class NoJobError(DisqError):
    reason = "NOJOB"


class TooLateError(DisqError):
    reason = "TOOLATE"


class LeavingError(DisqError):
    reason = "LEAVING"


class InvalidArgumentError(DisqError):
    """An argument the node refuses (Disque's -ERR ... texts)."""

    reason = "SYNTAX"


class IndeterminateError(DisqError):
    """An add was sent but no answer came (node lost, deadline): the job may exist."""

    reason = "INDETERMINATE"


class UnavailableError(DisqError):
    """No node could be reached (or every one refused to serve): nothing was done."""

    reason = "UNAVAILABLE"


class AuthError(DisqError):
    """The node wants a password (``password=`` on the client) or refused the one given."""

    reason = "NOAUTH"


class NotFoundError(DisqError):
    """No such exchange (AMQP's NOT_FOUND): a passive declare, a bind to it."""

    reason = "NOT_FOUND"


class PreconditionFailedError(DisqError):
    """An exchange redeclared with another type (AMQP's PRECONDITION_FAILED); the message
    says the existing type."""

    reason = "PRECONDITION_FAILED"


class LimitError(DisqError):
    """A routes table is full (exchanges, bindings or queue declarations): nothing stored."""

    reason = "LIMIT"


BY_REASON: dict[int, type[DisqError]] = {
    api_pb2.NOREPL: NoReplError,
    api_pb2.MAXLEN: MaxLenError,
    api_pb2.PAUSED: PausedError,
    api_pb2.OOM: OutOfMemoryError,
    api_pb2.BADID: BadIdError,
    api_pb2.NOJOB: NoJobError,
    api_pb2.TOOLATE: TooLateError,
    api_pb2.LEAVING: LeavingError,
    api_pb2.SYNTAX: InvalidArgumentError,
    api_pb2.INDETERMINATE: IndeterminateError,
    api_pb2.NOT_FOUND: NotFoundError,
    api_pb2.PRECONDITION_FAILED: PreconditionFailedError,
    api_pb2.LIMIT: LimitError,
}


def from_info(info: api_pb2.ErrorInfo, node: str | None = None) -> DisqError:
    cls = BY_REASON.get(info.reason, DisqError)
    return cls(info.message, node=node)


def ids_or_errors(results: Any, node: str) -> list[str | DisqError]:
    """An AddJobs's or a Publish's results (``AddResult``s): each job's id, or its refusal."""
    return [from_info(r.error, node) if r.HasField("error") else r.id for r in results]


def from_metadata(metadata: Any, details: str, node: str | None) -> DisqError | None:
    """The node's own error, if the failed call carried one."""
    for key, value in metadata or ():
        if key == ERROR_KEY:
            info = api_pb2.ErrorInfo.FromString(value)
            return from_info(info, node)
    return None
