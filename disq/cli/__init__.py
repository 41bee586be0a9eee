"""``disq``: the command-line tool (console script ``disq = "disq.cli:main"``).

:mod:`disq.cli.commands` parses the arguments and runs the commands, :mod:`disq.cli.top` is the
live view, :mod:`disq.cli.events` the event export, :mod:`disq.cli.format` the rendering.
"""

from disq.cli.commands import main

__all__ = ["main"]
