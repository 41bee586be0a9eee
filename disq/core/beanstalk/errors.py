"""Errors the core raises. Each has a stable wire code that every door maps to its own protocol.

The beanstalk door answers ``code`` verbatim (it is beanstalkd's own word); the RESP and gRPC
doors map the same classes to Disque's error strings and to gRPC status codes.
"""

from __future__ import annotations

from typing import ClassVar


class BeanstalkError(Exception):
    """Base class: ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "INTERNAL_ERROR"


class NotFound(BeanstalkError):
    code = "NOT_FOUND"


class OutOfMemory(BeanstalkError):
    code = "OUT_OF_MEMORY"


class Draining(BeanstalkError):
    code = "DRAINING"


class NotIgnored(BeanstalkError):
    code = "NOT_IGNORED"


class DeadlineSoon(BeanstalkError):
    code = "DEADLINE_SOON"


class TimedOut(BeanstalkError):
    code = "TIMED_OUT"


class JobTooBig(BeanstalkError):
    code = "JOB_TOO_BIG"


class LimitExceeded(BeanstalkError):
    """A configured bound (tubes, connections) was hit."""

    code = "OUT_OF_MEMORY"


class PersistenceFailed(BeanstalkError):
    """The append-only file could not take the record; nothing was changed."""

    code: ClassVar[str] = "INTERNAL_ERROR"
