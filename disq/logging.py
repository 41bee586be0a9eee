"""structlog set-up: JSON lines when stderr is not a TTY, readable lines when it is; Disque's
``loglevel`` (changeable at run time by CONFIG SET) and ``syslog-*`` keys."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

# Disque's loglevel names -> the stdlib levels structlog filters with ("verbose" has no
# stdlib level of its own: it is debug, as before).
LEVELS = {
    "debug": logging.DEBUG,
    "verbose": logging.DEBUG,
    "notice": logging.INFO,
    "warning": logging.WARNING,
}
# Where syslog(3) writes on Linux; DISQ_SYSLOG_SOCKET points elsewhere (a container without
# /dev/log that has a syslog daemon on another socket, or a test reading the datagrams).
SYSLOG_SOCKET = "/dev/log"
# syslog(3)'s facility codes (LOG_USER, LOG_LOCAL0..7), as logging.handlers.SysLogHandler
# names them; that module is imported only when syslog is on (pickle, socketserver: a cost of
# every node's start otherwise).
_FACILITIES = {"user": 1, **{f"local{i}": 16 + i for i in range(8)}}

# The level in force: a list so that set_level changes it for every logger already bound
# (structlog caches bound loggers on first use, so its wrapper class cannot change later).
_level = [logging.INFO]


def set_level(loglevel: str) -> None:
    """CONFIG SET loglevel: from the next log line on."""
    _level[0] = LEVELS[loglevel]


_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def _filter_level(_logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    import structlog

    if _METHOD_LEVELS.get(method, logging.INFO) < _level[0]:
        raise structlog.DropEvent
    return event


class _TeeLogger:
    """structlog's PrintLogger, plus a copy of each line to syslog at the line's level (Redis
    logs to its file or stdout and, with syslog-enabled, to syslog as well)."""

    def __init__(self, out: TextIO, syslog: logging.Logger | None) -> None:
        self._out = out
        self._syslog = syslog

    def _write(self, level: int, message: str) -> None:
        self._out.write(message + "\n")
        if self._syslog is not None:
            self._syslog.log(level, message)

    def msg(self, message: str) -> None:
        self._write(logging.INFO, message)

    def debug(self, message: str) -> None:
        self._write(logging.DEBUG, message)

    def info(self, message: str) -> None:
        self._write(logging.INFO, message)

    def warning(self, message: str) -> None:
        self._write(logging.WARNING, message)

    def error(self, message: str) -> None:
        self._write(logging.ERROR, message)

    def critical(self, message: str) -> None:
        self._write(logging.CRITICAL, message)

    exception = error
    fatal = critical
    warn = warning
    log = msg


def syslog_logger(ident: str, facility: str, address: str | None = None) -> logging.Logger:
    """A stdlib logger whose one handler sends to syslog as ``openlog(ident, LOG_PID, ...)``
    would: ``ident[pid]: message`` with the facility's priority. As openlog, a missing syslog
    socket is not an error (the stdlib handler ignores it and retries on each line)."""
    import logging.handlers

    handler = logging.handlers.SysLogHandler(
        address=address or os.environ.get("DISQ_SYSLOG_SOCKET", SYSLOG_SOCKET),
        facility=_FACILITIES[facility],
    )
    handler.ident = f"{ident}[{os.getpid()}]: "
    logger = logging.getLogger("disq.syslog")
    logger.handlers[:] = [handler]
    logger.propagate = False  # never also to the root logger's handlers
    logger.setLevel(logging.DEBUG)  # structlog filtered already
    return logger


def configure_logging(
    verbosity: int = 0,
    logfile: str | None = None,
    loglevel: str | None = None,
    syslog: tuple[str, str] | None = None,
) -> None:
    """``logfile``: append JSON lines there instead of stderr (Disque's ``logfile``);
    ``loglevel``: Disque's debug|verbose|notice|warning; ``syslog``: (ident, facility) to
    send every line to syslog too (Disque's ``syslog-enabled``)."""
    import structlog

    level = logging.INFO if verbosity == 0 else logging.DEBUG
    if loglevel is not None:
        level = LEVELS.get(loglevel, level)
    _level[0] = level
    out = sys.stderr
    if logfile:
        out = open(logfile, "a", buffering=1)  # lives as long as the process
    renderer: structlog.typing.Processor
    if out.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer()
    sys_logger = syslog_logger(*syslog) if syslog is not None else None
    tee = _TeeLogger(out, sys_logger)
    structlog.configure(
        processors=[
            _filter_level,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        # Every level reaches the processors, whose first filters by the level in force:
        # CONFIG SET loglevel must reach loggers bound before it.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=lambda *_args: tee,
        cache_logger_on_first_use=True,
    )
