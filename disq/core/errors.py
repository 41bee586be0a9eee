"""Errors the core raises. Each has a stable wire code that every door maps to its own protocol.

The beanstalk door answers ``code`` verbatim (it is beanstalkd's own word); the RESP and gRPC
doors map the same classes to Disque's error strings and to gRPC status codes.
"""

from __future__ import annotations


class DisqError(Exception):
    """Base class: ``code`` is stable and machine-readable."""

    code = "INTERNAL_ERROR"


class NotFound(DisqError):
    code = "NOT_FOUND"


class OutOfMemory(DisqError):
    code = "OUT_OF_MEMORY"


class Draining(DisqError):
    code = "DRAINING"


class NotIgnored(DisqError):
    code = "NOT_IGNORED"


class DeadlineSoon(DisqError):
    code = "DEADLINE_SOON"


class TimedOut(DisqError):
    code = "TIMED_OUT"


class JobTooBig(DisqError):
    code = "JOB_TOO_BIG"


class LimitExceeded(DisqError):
    """A configured bound (tubes, connections) was hit."""

    code = "OUT_OF_MEMORY"


class PersistenceFailed(DisqError):
    """The append-only file could not take the record; nothing was changed."""

    code = "INTERNAL_ERROR"
