"""structlog set-up: JSON lines when stderr is not a TTY, readable lines when it is; Disque's
``loglevel`` (changeable at run time by CONFIG SET) and ``syslog-*`` keys.

The node's modules log through :func:`get_logger`, whose loggers import structlog on first
use. structlog's import (its dev, stdlib, tracebacks and twisted parts, pickle, uuid: 15-20
ms) is not on the path of a node's first answer: ``disq-node`` calls :func:`defer`, and the
runtime calls :func:`load` in a thread once the ports serve. Meanwhile a JSON line (a log
file, a pipe: every deployment and every test) is written at once, the same line structlog's
JSONRenderer would write; a console line (a TTY) is kept and written when structlog loads,
stamped with the time it was logged. A process that never calls :func:`defer` (the SDK, the
workers, the tests) imports structlog at its first line, as if the modules had imported it
themselves.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import MutableMapping
from functools import partialmethod
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

    if "_at" in event:  # a kept line: filtered by the level in force when it was logged
        return event
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

    # structlog calls the method of the line's level by name (_METHOD_LEVELS).
    msg = info = log = partialmethod(_write, logging.INFO)
    debug = partialmethod(_write, logging.DEBUG)
    warning = warn = partialmethod(_write, logging.WARNING)
    error = exception = partialmethod(_write, logging.ERROR)
    critical = fatal = partialmethod(_write, logging.CRITICAL)


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


class Logger:
    """A structlog logger by name (and bound context), resolved on its first line."""

    __slots__ = ("_bound", "_context", "_name")

    def __init__(self, name: str | None = None, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._bound: Any = None

    def bind(self, **context: Any) -> Logger:
        return Logger(self._name, {**self._context, **context})

    def debug(self, event: str, **kw: Any) -> None:
        self._log("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        self._log("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._log("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        self._log("error", event, kw)

    def critical(self, event: str, **kw: Any) -> None:
        self._log("critical", event, kw)

    def exception(self, event: str, **kw: Any) -> None:
        # The traceback is the one being handled now: never kept for later.
        load()
        self._log("exception", event, kw)

    def _log(self, method: str, event: str, kw: dict[str, Any]) -> None:
        bound = self._bound
        if bound is None and kw.get("exc_info") is not None:
            load()  # a line with an exception (exc_info=exc) needs format_exc_info's traceback
        if bound is None:
            with _LOCK:
                if _deferred and not _loaded:
                    if _METHOD_LEVELS.get(method, logging.INFO) < _level[0]:
                        return
                    if _early:
                        _write_early(_early[0], self._context, method, event, kw)
                    else:
                        _kept.append((self, method, event, kw, time.time()))
                    return
                bound = self._resolve()
        getattr(bound, method)(event, **kw)

    def _resolve(self) -> Any:
        """structlog's logger for this one (structlog imported, and configured if
        configure_logging was called, on the way). Called with _LOCK held."""
        if not _loaded:
            _load()
        import structlog

        bound = structlog.get_logger(self._name)
        self._bound = bound.bind(**self._context) if self._context else bound
        return self._bound


def get_logger(name: str | None = None) -> Logger:
    return Logger(name)


# The console lines logged while structlog is deferred: (logger, method, event, key/values,
# time); JSON lines go out at once through the output kept in _early.
_kept: list[tuple[Logger, str, str, dict[str, Any], float]] = []
_early: list[_TeeLogger] = []
_LOCK = threading.Lock()
_deferred = False
_loaded = False
_configure: list[Any] = []  # configure_logging's call, made when structlog loads


def defer() -> None:
    """From now until :func:`load` (or the process's exit) structlog is not imported: JSON
    lines are written by this module, console lines are kept for structlog."""
    global _deferred
    _deferred = True
    atexit.register(load)


def load() -> None:
    """Import (and configure) structlog, then write the kept lines. Idempotent, any thread."""
    if _loaded:
        return
    with _LOCK:
        if not _loaded:
            _load()


def _load() -> None:
    global _loaded
    _loaded = True  # first: configure_logging now configures rather than keeps the call
    for configure in _configure:
        configure()
    kept = _kept[:]
    _kept.clear()
    for logger, method, event, kw, at in kept:
        bound = logger._bound if logger._bound is not None else logger._resolve()
        getattr(bound, method)(event, _at=at, **kw)


def _timestamp(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """ISO 8601 in UTC, of the time the line was logged (``_at`` for a kept line)."""
    at = event.pop("_at", None)
    event["timestamp"] = _iso(time.time() if at is None else at)
    return event


def _iso(t: float) -> str:
    """``datetime.fromtimestamp(t, UTC).isoformat()`` with ``Z`` (structlog's rendering),
    written with ``time``: a node writes its first line before it answers, and importing
    datetime for it was a millisecond of every start."""
    whole, frac = divmod(t, 1.0)
    micro = round(frac * 1_000_000)  # datetime rounds to the microsecond, half to even
    if micro == 1_000_000:
        whole, micro = whole + 1, 0
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{stamp}.{micro:06d}Z" if micro else f"{stamp}Z"


def _write_early(
    out: _TeeLogger, context: dict[str, Any], method: str, event: str, kw: dict[str, Any]
) -> None:
    """A JSON line before structlog loads: what the configured chain writes (the bound
    context, the key/values, event, level, timestamp; JSONRenderer's repr for what json
    cannot encode), without importing it."""
    line = {**context, **kw, "event": event, "level": method, "timestamp": _iso(time.time())}
    getattr(out, method)(_json_line(line))


def _json_line(line: dict[str, Any]) -> str:
    """``json.dumps(line, default=repr)``, byte for byte. The lines a node writes before it
    answers hold only strings, ints, bools, None and lists of strings: those are written with
    the json package's own C string encoder (``_json``), as json.dumps writes them, because
    importing ``json`` (its decoder compiles regular expressions) was a millisecond of every start
    (docs/benchmarks.md, "Start at the floor"). Any other value: json.dumps."""
    from _json import encode_basestring_ascii as quote

    parts: list[str] = []
    for key, value in line.items():
        if type(key) is not str:
            break
        if type(value) is str:
            text = quote(value)
        elif value is None:
            text = "null"
        elif type(value) is bool:
            text = "true" if value else "false"
        elif type(value) is int:
            text = int.__repr__(value)
        elif type(value) in (list, tuple) and all(type(v) is str for v in value):
            text = "[" + ", ".join([quote(v) for v in value]) + "]"  # "listening"'s addresses
        else:
            break
        parts.append(f"{quote(key)}: {text}")
    else:
        return "{" + ", ".join(parts) + "}"
    import json

    return json.dumps(line, default=repr)


def configure_logging(
    verbosity: int = 0,
    logfile: str | None = None,
    loglevel: str | None = None,
    syslog: tuple[str, str] | None = None,
) -> None:
    """``logfile``: append JSON lines there instead of stderr (Disque's ``logfile``);
    ``loglevel``: Disque's debug|verbose|notice|warning; ``syslog``: (ident, facility) to
    send every line to syslog too (Disque's ``syslog-enabled``). After :func:`defer`,
    structlog is configured when it loads."""
    level = logging.INFO if verbosity == 0 else logging.DEBUG
    if loglevel is not None:
        level = LEVELS.get(loglevel, level)
    _level[0] = level  # now: a kept line is filtered by the level in force when it is logged
    out = sys.stderr
    if logfile:
        out = open(logfile, "a", buffering=1)  # lives as long as the process
    tee = _TeeLogger(out, syslog_logger(*syslog) if syslog is not None else None)
    if _deferred and not _loaded:
        _configure.append(lambda: _configure_structlog(out, tee))
        if not out.isatty():
            _early[:] = [tee]
    else:
        _configure_structlog(out, tee)


def _configure_structlog(out: TextIO, tee: _TeeLogger) -> None:
    import structlog

    # The console renderer prints an exception's traceback itself; a JSON line carries it
    # as the "exception" string (without format_exc_info it said only "exc_info": true).
    renderers: list[structlog.typing.Processor]
    if out.isatty():
        renderers = [structlog.dev.ConsoleRenderer(colors=False)]
    else:
        renderers = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[
            _filter_level,
            structlog.processors.add_log_level,
            _timestamp,
            *renderers,
        ],
        # Every level reaches the processors, whose first filters by the level in force:
        # CONFIG SET loglevel must reach loggers bound before it.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=lambda *_args: tee,
        cache_logger_on_first_use=True,
    )
