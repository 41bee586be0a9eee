"""Disque/Redis configuration files: ``disq-node path/to/disque.conf`` replaces a Disque node.

The parser follows Redis's ``loadServerConfigFromString`` (Disque's ``src/config.c``) rule by
rule, because an operator moving from Disque brings a file that Disque accepted and expects the
same answer, error text included:

* one directive per line; ``#`` comments and blank lines are skipped; every line is trimmed of
  spaces, tabs, CR and LF first (so the line quoted in an error is the trimmed one);
* arguments are split as ``sdssplitargs`` does (:func:`split_args`);
* directive names are case-insensitive, enum values too; a later line overrides an earlier one;
* ``rename-command`` lines are checked against the RESP command table at start, not while the
  file is read (the table is not loaded then); the error is Disque's, at the line;
* ``include path`` loads another file at that point; a relative path is relative to the working
  directory *at that moment*, which earlier ``dir`` lines have changed (Redis ``chdir``\\s while
  parsing). We never ``chdir``: a virtual working directory reproduces the same resolution;
* errors have Redis's shape::

      \\n*** FATAL CONFIG FILE ERROR ***
      Reading the configuration file, at line N
      >>> 'the line'
      <reason>

:class:`ConfigStore` then serves the RESP door's ``CONFIG GET`` / ``SET`` / ``REWRITE`` with
Disque's names, value formats and error strings.

Deviations from Disque (each on purpose):

* ``bind`` unset means 127.0.0.1 here, not every interface: a queue open to the network must be
  asked for. ``CONFIG GET bind`` shows the effective address; ``CONFIG REWRITE`` does not add it.
* ``daemonize yes`` is refused: the process stays in the foreground (service managers and
  containers expect that); ``daemonize no`` is accepted. ``pidfile``, when the file sets it, is
  written at start and removed at a clean exit as Redis 3.2+ does even in the foreground
  (Disque, older, wrote it only when daemonized); relative to ``dir``.
* Numbers are parsed strictly. Disque's ``atoi`` reads ``port abc`` as port 0 and ``hz 10x`` as
  10; here a malformed number is an error, with the directive's own Disque message when it has
  one and Redis 7's "argument couldn't be parsed into an integer" / "argument must be a memory
  value" otherwise.
* ``maxmemory`` unset (0) means "disq's own default", not Disque's fixed 1gb. ``maxmemory 0`` in
  a file is still refused, as Disque does, so CONFIG REWRITE never writes it.
* ``tcp-keepalive`` is a number of seconds in CONFIG GET/SET (Disque's last version treats it as
  yes/no there, a bug: its file parser and CONFIG REWRITE treat it as seconds).
* CONFIG GET patterns match names case-insensitively (Redis 7; Disque was case-sensitive), and
  GET also shows the accepted keys Disque forgot to list (``appendfilename``,
  ``cluster-config-file``, ``syslog-*``) plus disq's own.
* ``client-output-buffer-limit`` accepts the ``slave`` and ``pubsub`` classes that Disque's own
  sample ``disque.conf`` contains; CONFIG SET accepts memory units in it.
* CONFIG REWRITE replaces the file atomically (temporary file, fsync, rename, fsync of the
  directory) instead of overwriting it in place, so a crash leaves the old or the new file,
  never a mix. A symlinked config file is followed and its target replaced. This needs write
  access to the file's directory.
* disq extensions: ``beanstalk-port`` (default 0: no beanstalk door in config-file mode),
  ``grpc-port`` (default ``port + 10000``, Disque's cluster-bus offset) and
  ``beanstalk-replicate`` (default 1), ``metrics-port`` (the HTTP admin port with Prometheus
  ``/metrics``, default ``port + 2000``; 0: off; docs/metrics.md), ``job-lane-port`` and
  ``advertise-host`` (the address peers and clients are told, Redis's
  ``cluster-announce-ip``; default: the first ``bind`` address).

The package, one job a module: :mod:`~disq.config.errors`, :mod:`~disq.config.syntax` (Redis's
lexical helpers), :mod:`~disq.config.options` (the option table and value parsers),
:mod:`~disq.config.settings` (:class:`DisqueSettings`), :mod:`~disq.config.loader` (files,
``include``, :func:`load_config`), :mod:`~disq.config.store` (the CONFIG command).

This package imports only the standard library at load time: ``disq-node`` parses the file
before it binds its listening socket, and that must stay fast (see ``node_main``).
"""

from disq.config.errors import (
    ConfigCommandError,
    ConfigFileError,
    ConfigRewriteError,
    ConfigSetError,
)
from disq.config.loader import load_config, options_from_argv, parse_config
from disq.config.settings import (
    DEFAULT_BIND,
    DisqueSettings,
    FsyncPolicy,
    LogLevel,
    MaxmemoryPolicy,
)
from disq.config.store import REWRITE_SIGNATURE, ConfigStore
from disq.config.syntax import format_memory, parse_memory, quote_arg, split_args, string_match

__all__ = [
    "DEFAULT_BIND",
    "REWRITE_SIGNATURE",
    "ConfigCommandError",
    "ConfigFileError",
    "ConfigRewriteError",
    "ConfigSetError",
    "ConfigStore",
    "DisqueSettings",
    "FsyncPolicy",
    "LogLevel",
    "MaxmemoryPolicy",
    "format_memory",
    "load_config",
    "options_from_argv",
    "parse_config",
    "parse_memory",
    "quote_arg",
    "split_args",
    "string_match",
]
