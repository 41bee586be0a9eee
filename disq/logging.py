"""structlog set-up: JSON lines when stderr is not a TTY, readable lines when it is."""

from __future__ import annotations

import logging
import sys


def configure_logging(verbosity: int = 0) -> None:
    import structlog

    level = logging.INFO if verbosity == 0 else logging.DEBUG
    renderer: structlog.typing.Processor
    if sys.stderr.isatty():
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
