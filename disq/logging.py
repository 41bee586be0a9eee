"""structlog set-up: JSON lines when stderr is not a TTY, readable lines when it is."""

from __future__ import annotations

import logging
import sys


def configure_logging(
    verbosity: int = 0, logfile: str | None = None, loglevel: str | None = None
) -> None:
    """``logfile``: append JSON lines there instead of stderr (Disque's ``logfile``);
    ``loglevel``: Disque's debug|verbose|notice|warning."""
    import structlog

    level = logging.INFO if verbosity == 0 else logging.DEBUG
    if loglevel in ("debug", "verbose"):
        level = logging.DEBUG
    elif loglevel == "warning":
        level = logging.WARNING
    out = sys.stderr
    if logfile:
        out = open(logfile, "a", buffering=1)  # lives as long as the process
    renderer: structlog.typing.Processor
    if out.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
