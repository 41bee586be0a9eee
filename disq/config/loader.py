r"""Loading: a configuration file (and its ``include``\ s) read as Redis's
``loadServerConfigFromString`` reads it, the rules and error texts of the package docstring.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from disq.config.errors import ConfigFileError, _Invalid
from disq.config.options import (
    _BY_NAME,
    BAD_DIRECTIVE,
    BINDADDR_MAX,
    UNBALANCED,
    _change_dir,
    _client_limit,
)
from disq.config.settings import CLUSTER_PORT_INCR, _State
from disq.config.store import ConfigStore
from disq.config.syntax import _decode, quote_arg, split_args


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(slots=True)
class _Loader:
    state: _State
    include_stack: list[str] = field(default_factory=list)

    def resolve(self, name: str) -> Path:
        # Redis opens relative paths against the process's working directory, which every
        # earlier `dir` line has changed: that is our virtual state.dir.
        return self.state.dir / name

    def read(self, name: str) -> str:
        if name == "-":
            return sys.stdin.read()
        try:
            return _decode(self.resolve(name).read_bytes())
        except OSError as exc:
            raise ConfigFileError(f"Fatal error, can't open config file '{name}'") from exc

    def load_text(self, text: str, path: str | None) -> None:
        for index, raw in enumerate(text.split("\n")):
            line = raw.strip(" \t\r\n")
            if not line or line[0] == "#":
                continue
            argv = split_args(line)
            if argv is None:
                raise ConfigFileError.at_line(path, index + 1, line, UNBALANCED)
            if not argv:
                continue
            try:
                self.directive(argv[0].lower(), argv[1:], path, index + 1, line)
            except _Invalid as exc:
                raise ConfigFileError.at_line(path, index + 1, line, exc.reason) from None

    def directive(self, name: str, args: list[str], path: str | None, num: int, line: str) -> None:
        state = self.state
        if name == "include" and len(args) == 1:
            self.include(args[0])
        elif name == "dir" and len(args) == 1:
            state.dir = _change_dir(state.dir, args[0], file_error=True)
        elif name == "bind" and args:
            if len(args) > BINDADDR_MAX:
                raise _Invalid("Too many bind addresses specified")
            state.values["bind"] = " ".join(args)
        elif name == "rename-command" and len(args) == 2:
            # Commands are matched as Redis's dict matches them: ASCII letters fold only.
            state.renames.append((_ascii_lower(args[0]), _ascii_lower(args[1])))
            state.rename_origins.append((path, num, line))
        elif name == "client-output-buffer-limit" and len(args) == 4:
            klass, limits = _client_limit(args)
            state.client_limits[klass] = limits
        else:
            option = _BY_NAME.get(name)
            if option is None or option.parse_file is None or len(args) != 1:
                raise _Invalid(BAD_DIRECTIVE)
            value = option.parse_file(args[0])
            # An empty requirepass is no password, as CONFIG SET requirepass "" makes it.
            state.values[name] = None if name == "requirepass" and not value else value
        state.origin[name] = (path, num, line)

    def include(self, name: str) -> None:
        target = self.resolve(name)
        key = os.path.realpath(target)
        if key in self.include_stack:
            raise _Invalid(f"include loop: '{name}' is already being read")
        text = self.read(name)
        self.include_stack.append(key)
        try:
            self.load_text(text, str(target))
        finally:
            self.include_stack.pop()

    def finish(self) -> None:
        """Checks that need the whole file: the final `dir` and `port` decide them."""
        state = self.state
        logfile = state.values["logfile"]
        if logfile:
            # Disque opens the log file once while parsing so that it fails at start, not at
            # the first log line; we do it against the final dir, where the log will be.
            try:
                with open(state.dir / logfile, "a"):
                    pass
            except OSError as exc:
                self.fail_at("logfile", f"Can't open the log file: {os.strerror(exc.errno or 0)}")
        port = int(state.values["port"] or 0)
        if state.values["grpc-port"] is None and port + CLUSTER_PORT_INCR > 65535:
            self.fail_at(
                "port",
                f"Invalid port: the cluster port (port + {CLUSTER_PORT_INCR}) would be "
                f"{port + CLUSTER_PORT_INCR}; use a port up to {65535 - CLUSTER_PORT_INCR} "
                "or set grpc-port",
            )

    def fail_at(self, name: str, reason: str) -> None:
        path, num, line = self.state.origin[name]
        raise ConfigFileError.at_line(path, num, line, reason)


def parse_config(
    text: str,
    *,
    cwd: Path | None = None,
    config_file: Path | None = None,
    on_change: Callable[[str, str], None] | None = None,
) -> ConfigStore:
    """Parse configuration ``text`` (line numbers count from 1 in it); raise ConfigFileError.

    ``cwd`` is the working directory the file is read from (default: the process's), so
    relative ``dir`` and ``include`` paths resolve as Disque resolves them.
    """
    loader = _Loader(_State.defaults(Path(os.path.realpath(cwd or Path.cwd()))))
    loader.load_text(text, str(config_file) if config_file else None)
    loader.finish()
    return ConfigStore(loader.state, config_file=config_file, on_change=on_change)


def load_config(
    path: str | os.PathLike[str],
    options: str = "",
    *,
    cwd: Path | None = None,
    on_change: Callable[[str, str], None] | None = None,
) -> ConfigStore:
    """Load a configuration file as ``disque-server path [--opt val ...]`` does.

    ``options`` (see :func:`options_from_argv`) is appended after a newline, so its lines
    override the file's and their line numbers follow the file's. ``path`` ``-`` reads standard
    input; CONFIG REWRITE then has no file to write.
    """
    start = Path(os.path.realpath(cwd or Path.cwd()))
    loader = _Loader(_State.defaults(start))
    name = os.fspath(path)
    text = loader.read(name)
    config_file = None if name == "-" else Path(os.path.abspath(start / name))
    if options:
        text = text + "\n" + options
    if config_file is not None:
        loader.include_stack.append(os.path.realpath(config_file))
    loader.load_text(text, str(config_file) if config_file else None)
    loader.finish()
    return ConfigStore(loader.state, config_file=config_file, on_change=on_change)


def options_from_argv(args: Sequence[str]) -> str:
    """The options string Redis's ``main`` builds from the arguments after the file name:
    ``--port 7777 --bind a b`` becomes ``port "7777" \\nbind "a" "b" `` (values quoted)."""
    options = ""
    for arg in args:
        if arg.startswith("--"):
            if options:
                options += "\n"
            options += arg[2:] + " "
        else:
            options += quote_arg(arg) + " "
    return options
