"""beanstalkd's own flags (``-l ADDR -p PORT -b DIR ...``), read without argparse.

Why this exists beside ``disq.node_main.build_parser``: beanstalk client suites (greenstalk's,
for one) spawn the server with beanstalkd's flags and connect 0.1 s later, and issue 31 gives
disq 15 ms beyond the interpreter's own start to answer. argparse with gettext and the 40
options' set-up is about 3 ms of that. So the argv shapes such harnesses pass, and only those,
are read here: every flag one of beanstalkd's short flags, a token of its own, its value (if
it takes one) the next token. Anything else (a long option, ``-p11300``, grouped ``-VF``, a
value that starts with ``-``, a number that does not parse, ``-h``, a positional config file)
returns None, and argparse reads the whole argv as before, with its usual help and errors.

The trade-off is a second reader of the same flags; tests/unit/test_node_flags.py keeps it
honest: on a corpus of argvs its answer equals argparse's, attribute for attribute, and the
defaults below equal ``build_parser().parse_args([])``'s.
"""

from __future__ import annotations

from types import SimpleNamespace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

# Every option's default, as build_parser gives it (the test compares the two).
DEFAULTS: dict[str, object] = {
    "listen": None,
    "port": None,
    "binlog_dir": None,
    "fsync_ms": None,
    "no_fsync": False,
    "binlog_size": None,
    "max_job_size": None,
    "user": None,
    "compact": False,
    "no_compact": False,
    "verbose": 0,
    "show_version": False,
    "data_dir": None,
    "in_memory": False,
    "fsync": None,
    "max_memory": 0,
    "repair_aof": None,
    "config": None,
    "resp_port": None,
    "grpc_port": None,
    "job_lane_port": 0,
    "join": [],
    "advertise_host": None,
    "node_timeout_ms": 15000,
    "beanstalk_replicate": 1,
    "requirepass": None,
    "metrics_port": 0,
    "dashboard_actions": False,
    "drain_timeout_s": 20.0,
    "events_max_bytes": None,
    "tls_cert": None,
    "tls_key": None,
    "tls_ca": None,
    "tls_client_auth": None,
    "tls_server_name": None,
    "resp_tls_port": 0,
    "beanstalk_tls_port": 0,
}


def size_arg(text: str) -> int:
    """A size with an optional unit (``64k``, ``1mb``, ``2G``), as -s and -z take it."""
    units = {"k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
    t = text.strip().lower()
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            return int(t[: -len(suffix)]) * units[suffix]
    return int(t)


def _text(value: str) -> str:
    return value


# flag -> (attribute, how its value is read); None: the flag takes no value.
VALUED: dict[str, tuple[str, Callable[[str], object]]] = {
    "-l": ("listen", _text),
    "-p": ("port", int),
    "-b": ("binlog_dir", _text),
    "-f": ("fsync_ms", int),
    "-s": ("binlog_size", size_arg),
    "-z": ("max_job_size", size_arg),
    "-u": ("user", _text),
}
SWITCHES = {"-F": "no_fsync", "-c": "compact", "-n": "no_compact", "-v": "show_version"}


def beanstalkd_args(argv: Sequence[str]) -> SimpleNamespace | None:
    """The flags of ``argv`` if it is only beanstalkd's short flags in their plain shape, else
    None (argparse decides)."""
    values = dict(DEFAULTS)
    values["join"] = []  # a fresh list, as argparse makes one per parse
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in SWITCHES:
            values[SWITCHES[flag]] = True
            i += 1
            continue
        if flag == "-V":
            values["verbose"] = int(str(values["verbose"])) + 1
            i += 1
            continue
        spec = VALUED.get(flag)
        if spec is None or i + 1 >= len(argv):
            return None
        value = argv[i + 1]
        if not value or value.startswith("-"):
            return None
        attr, read = spec
        try:
            values[attr] = read(value)
        except ValueError:
            return None
        i += 2
    return SimpleNamespace(**values)
