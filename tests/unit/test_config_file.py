"""Disque configuration files: Redis's parsing rules and error texts, CONFIG GET/SET/REWRITE."""

from __future__ import annotations

import io
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disq.config import (
    ConfigFileError,
    ConfigRewriteError,
    ConfigSetError,
    ConfigStore,
    DisqueSettings,
    format_memory,
    load_config,
    options_from_argv,
    parse_config,
    parse_memory,
    quote_arg,
    split_args,
    string_match,
)
from disq.config.options import DAEMONIZE_REFUSED

ADVERTISE_WILDCARD = (
    "advertise-host {} is a wildcard: give the address peers and clients reach this node at"
)


def parse(text: str, cwd: Path) -> DisqueSettings:
    return parse_config(text, cwd=cwd).settings


def error_of(text: str, cwd: Path) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        parse_config(text, cwd=cwd)
    return info.value


# --------------------------------------------------------------------------------------------
# sdssplitargs, sdscatrepr, memtoll, stringmatch


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("port 7711", ["port", "7711"]),
        ("  a \t  b  ", ["a", "b"]),
        ("", []),
        ('"a b" c', ["a b", "c"]),
        ('""', [""]),
        (r'"\n\r\t\b\a\\\"\x41"', ['\n\r\t\b\a\\"A']),
        (r'"\q"', ["q"]),  # unknown escape: the character itself
        (r'"\xzz"', ["xzz"]),  # \x without two hex digits is just x
        (r'"\xc3\xa9"', ["é"]),  # bytes, decoded once the argument is complete
        (r"'it\'s'", ["it's"]),
        (r"'a\nb'", ["a\\nb"]),  # single quotes: only \' is an escape
        ('a"b c"', ["ab c"]),  # a quote inside a bare word opens a quoted part
        ("a'b c'", ["ab c"]),
        ('rename-command CONFIG ""', ["rename-command", "CONFIG", ""]),
        ("a\vb", ["a\vb"]),  # \v separates arguments only before one starts
    ],
)
def test_split_args(line: str, expected: list[str]) -> None:
    assert split_args(line) == expected


@pytest.mark.parametrize("line", ['"abc', "'abc", '"abc"def', "'abc'def", '"abc\\', "x 'y"])
def test_split_args_unbalanced(line: str) -> None:
    assert split_args(line) is None


def test_quote_arg_escapes_like_sdscatrepr() -> None:
    assert quote_arg('a"b\\c\n\r\t\a\b\x01é') == r'"a\"b\\c\n\r\t\a\b\x01\xc3\xa9"'
    assert quote_arg("") == '""'


@given(st.text())
def test_quote_arg_round_trips(value: str) -> None:
    assert split_args(quote_arg(value)) == [value]


def test_non_utf8_bytes_survive() -> None:
    value = split_args(r'"\xff"')
    assert value is not None
    assert quote_arg(value[0]) == r'"\xff"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100", 100),
        ("100b", 100),
        ("1k", 1000),
        ("1kb", 1024),
        ("1K", 1000),
        ("1KB", 1024),
        ("2m", 2_000_000),
        ("2mb", 2 << 20),
        ("5Mb", 5 << 20),
        ("1g", 1_000_000_000),
        ("1gb", 1 << 30),
        ("1GB", 1 << 30),
        ("1gB", 1 << 30),
        ("-1", -1),
        ("abc", None),
        ("", None),
        ("mb", None),
        ("1tb", None),
        ("1.5gb", None),
        (" 1", None),
        ("99999999999999999999", None),
    ],
)
def test_parse_memory(text: str, expected: int | None) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (1000, "1000"), (1024, "1kb"), (1536, "1536"), (3 << 10, "3kb"),
     (64 << 20, "64mb"), (1 << 30, "1gb"), (5 << 30, "5gb")],
)  # fmt: skip
def test_format_memory(n: int, text: str) -> None:
    assert format_memory(n) == text
    assert parse_memory(text) == n


@pytest.mark.parametrize(
    ("pattern", "name", "nocase", "expected"),
    [
        ("*", "maxmemory", True, True),
        ("max*", "maxmemory", True, True),
        ("MAX*", "maxmemory", True, True),
        ("MAX*", "maxmemory", False, False),
        ("*-port", "grpc-port", True, True),
        ("*-port", "port", True, False),
        ("?ort", "port", True, True),
        ("p[a-z]rt", "port", True, True),
        ("p[^o]rt", "port", True, False),
        ("p[^x]rt", "port", True, True),
        ("p[z-a]rt", "port", True, True),  # reversed range
        ("h[z]", "hz", True, True),
        ("h[z", "hz", True, True),  # unterminated class
        ("\\*", "*", True, True),
        ("a\\*", "ab", True, False),
        ("*memory*", "maxmemory-policy", True, True),
        ("a**", "a", True, True),
        ("", "", True, True),
        ("", "a", True, False),
        ("port", "ports", True, False),
    ],
)
def test_string_match(pattern: str, name: str, nocase: bool, expected: bool) -> None:
    assert string_match(pattern, name, nocase) is expected


# --------------------------------------------------------------------------------------------
# Loading: defaults, every key, errors


def test_defaults(tmp_path: Path) -> None:
    s = parse("", tmp_path)
    assert s == DisqueSettings(dir=tmp_path.resolve())
    assert (s.port, s.grpc_port, s.beanstalk_port, s.beanstalk_replicate) == (7711, 17711, 0, 1)
    assert s.bind == () and s.effective_bind == ("127.0.0.1",)
    assert (s.appendonly, s.appendfsync, s.appendfilename) == (False, "always", "disq.aof")
    assert s.cluster_node_timeout_ms == 15000 and s.maxmemory_bytes == 0
    assert s.maxmemory_policy == "acks" and s.loglevel == "notice" and s.logfile == ""
    assert s.auto_aof_rewrite_min_size_bytes == 64 << 20 and s.auto_aof_rewrite_percentage == 100
    assert s.aof_load_truncated and not s.aof_enqueue_jobs_once and not s.daemonize
    assert (s.hz, s.tcp_backlog, s.timeout_s, s.tcp_keepalive_s) == (10, 511, 0, 0)
    assert s.requirepass is None and s.pidfile == "/var/run/disque.pid"
    assert s.pidfile_path is None  # the default path alone is not written (Redis 3.2+)
    # disq's AOF is DIR/disq.aof whatever the file says (Disque's name is read as that)
    assert s.aof_path == tmp_path.resolve() / "disq.aof" and s.logfile_path is None


@pytest.mark.parametrize(
    ("line", "attr", "value"),
    [
        ("port 7712", "port", 7712),
        ("port 0", "port", 0),
        ("port +42", "port", 42),
        ("bind 10.0.0.1 ::1", "bind", ("10.0.0.1", "::1")),
        ("bind 0.0.0.0", "effective_bind", ("0.0.0.0",)),
        ("loglevel DEBUG", "loglevel", "debug"),
        ("loglevel verbose", "loglevel", "verbose"),
        ("loglevel warning", "loglevel", "warning"),
        ("appendonly yes", "appendonly", True),
        ("appendonly NO", "appendonly", False),
        ("appendfilename disque.aof", "appendfilename", "disq.aof"),
        ("appendfsync always", "appendfsync", "always"),
        ("appendfsync no", "appendfsync", "no"),
        ("appendfsync EverySec", "appendfsync", "everysec"),
        ("cluster-node-timeout 5000", "cluster_node_timeout_ms", 5000),
        ("maxmemory 1gb", "maxmemory_bytes", 1 << 30),
        ("maxmemory 1k", "maxmemory_bytes", 1000),
        ("maxmemory 2MB", "maxmemory_bytes", 2 << 20),
        ("maxmemory 123456", "maxmemory_bytes", 123456),
        ("maxmemory-policy ACKS", "maxmemory_policy", "acks"),
        ("requirepass s3cret", "requirepass", "s3cret"),
        ('requirepass "with space"', "requirepass", "with space"),
        ('requirepass ""', "requirepass", None),
        ("requirepass " + "x" * 512, "requirepass", "x" * 512),
        ("daemonize no", "daemonize", False),
        ("pidfile /tmp/d.pid", "pidfile", "/tmp/d.pid"),
        ("tcp-backlog 128", "tcp_backlog", 128),
        ("timeout 30", "timeout_s", 30),
        ("tcp-keepalive 60", "tcp_keepalive_s", 60),
        ("hz 10", "hz", 10),
        ("aof-enqueue-jobs-once yes", "aof_enqueue_jobs_once", True),
        ("auto-aof-rewrite-percentage 100", "auto_aof_rewrite_percentage", 100),
        ("auto-aof-rewrite-min-size 1mb", "auto_aof_rewrite_min_size_bytes", 1 << 20),
        ("aof-load-truncated yes", "aof_load_truncated", True),
        ("beanstalk-port 11300", "beanstalk_port", 11300),
        ("grpc-port 9000", "grpc_port", 9000),
        ("beanstalk-replicate 3", "beanstalk_replicate", 3),
        ("job-lane-port 7709", "job_lane_port", 7709),
        ("job-lane-port -1", "job_lane_port", -1),
        ("advertise-host 10.1.2.3", "advertise_host", "10.1.2.3"),
        ("advertise-host fd00::7", "advertise_host", "fd00::7"),
        ("advertise-host disq-0.disq-peers.q.svc", "advertise_host", "disq-0.disq-peers.q.svc"),
        ("maxclients 5", "maxclients", 5),
        ("unixsocket /tmp/d.sock", "unixsocket", "/tmp/d.sock"),
        ("unixsocketperm 700", "unixsocketperm", 0o700),
        ("rename-command CONFIG s3cretconfig", "renamed_commands", (("config", "s3cretconfig"),)),
        ('rename-command FLUSHALL ""', "renamed_commands", (("flushall", ""),)),
    ],
)
def test_valid_directive(tmp_path: Path, line: str, attr: str, value: object) -> None:
    assert getattr(parse(line + "\n", tmp_path), attr) == value


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("slowlog-log-slower-than -1", "slowlog-log-slower-than", "-1"),
        ("slowlog-max-len 10", "slowlog-max-len", "10"),
        ("latency-monitor-threshold 100", "latency-monitor-threshold", "100"),
        ("cluster-config-file nodes.conf", "cluster-config-file", "cluster.json"),
        ("syslog-enabled yes", "syslog-enabled", "yes"),
        ("syslog-ident dq", "syslog-ident", "dq"),
        ("syslog-facility LOCAL3", "syslog-facility", "local3"),
        ("databases 16", "databases", "16"),
        ("maxmemory-samples 5", "maxmemory-samples", "5"),
        ("activerehashing yes", "activerehashing", "yes"),
        ("aof-rewrite-incremental-fsync yes", "aof-rewrite-incremental-fsync", "yes"),
        ("no-appendfsync-on-rewrite no", "no-appendfsync-on-rewrite", "no"),
        ("unixsocketperm 0755", "unixsocketperm", "755"),
        (
            "client-output-buffer-limit pubsub 1mb 512kb 10",
            "client-output-buffer-limit",
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 10",
        ),
    ],
)
def test_disque_keys_we_do_not_use_are_kept(
    tmp_path: Path, line: str, name: str, value: str
) -> None:
    assert parse_config(line, cwd=tmp_path).get(name) == [(name, value)]


FACILITY = "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"
NO_DIR = "/nonexistent-disq-dir"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("port 65536", "Invalid port"),
        ("port -1", "Invalid port"),
        ("port abc", "Invalid port"),
        ("port 7711 7712", "Bad directive or wrong number of arguments"),
        ("port", "Bad directive or wrong number of arguments"),
        ("bind", "Bad directive or wrong number of arguments"),
        ("bind " + " ".join(f"10.0.0.{i}" for i in range(17)), "Too many bind addresses specified"),
        ("loglevel loud", "Invalid log level. Must be one of debug, verbose, notice, warning"),
        ("appendonly maybe", "argument must be 'yes' or 'no'"),
        ("appendfilename a/b.aof", "appendfilename can't be a path, just a filename"),
        ("appendfsync sometimes", "argument must be 'no', 'always' or 'everysec'"),
        ("cluster-node-timeout 0", "cluster node timeout must be 1 or greater"),
        ("cluster-node-timeout soon", "cluster node timeout must be 1 or greater"),
        ("maxmemory 0", "You need to specify a memory limit greater than zero"),
        ("maxmemory lots", "You need to specify a memory limit greater than zero"),
        ("maxmemory 1tb", "You need to specify a memory limit greater than zero"),
        ("maxmemory-policy allkeys-lru", "Invalid maxmemory policy"),
        ("requirepass " + "x" * 513, "Password is longer than CONFIG_AUTHPASS_MAX_LEN"),
        ("daemonize yes", DAEMONIZE_REFUSED),
        ("daemonize perhaps", "argument must be 'yes' or 'no'"),
        ("tcp-backlog -1", "Invalid backlog value"),
        ("timeout -1", "Invalid timeout value"),
        ("tcp-keepalive -5", "Invalid tcp-keepalive value"),
        ("hz fast", "argument couldn't be parsed into an integer"),
        ("aof-enqueue-jobs-once 1", "argument must be 'yes' or 'no'"),
        ("auto-aof-rewrite-percentage -1", "Invalid negative percentage for AOF auto rewrite"),
        ("auto-aof-rewrite-min-size big", "argument must be a memory value"),
        ("auto-aof-rewrite-min-size -1", "argument must be a memory value"),
        ("aof-load-truncated x", "argument must be 'yes' or 'no'"),
        ("beanstalk-port 70000", "Invalid port"),
        ("grpc-port -2", "Invalid port"),
        ("beanstalk-replicate 0", "beanstalk-replicate must be between 1 and 65535"),
        ("beanstalk-replicate 65536", "beanstalk-replicate must be between 1 and 65535"),
        ("job-lane-port -2", "Invalid job-lane-port: 0 (any free port), -1 (off) or a port"),
        ("job-lane-port 65536", "Invalid job-lane-port: 0 (any free port), -1 (off) or a port"),
        ("advertise-host 0.0.0.0", ADVERTISE_WILDCARD.format("0.0.0.0")),
        ("advertise-host ::", ADVERTISE_WILDCARD.format("::")),
        ("advertise-host [::1]", "advertise-host: write an IPv6 address without brackets"),
        ('advertise-host ""', "advertise-host must be one address or host name"),
        ("advertise-host a b", "Bad directive or wrong number of arguments"),
        ("unixsocketperm 999", "Invalid socket file permissions"),
        ("unixsocketperm 1777", "Invalid socket file permissions"),
        ("maxclients 0", "Invalid max clients limit"),
        ("databases 0", "Invalid number of databases"),
        ("maxmemory-samples 0", "maxmemory-samples must be 1 or greater"),
        ("latency-monitor-threshold -1", "The latency threshold can't be negative"),
        ("slowlog-max-len -1", "slowlog-max-len can't be negative"),
        ("slowlog-log-slower-than x", "argument couldn't be parsed into an integer"),
        ("client-output-buffer-limit vip 0 0 0", "Unrecognized client limit class"),
        (
            "client-output-buffer-limit normal 0 0 -1",
            "Negative number of seconds in soft limit is invalid",
        ),
        ("client-output-buffer-limit normal x 0 0", "argument must be a memory value"),
        ("client-output-buffer-limit normal 0 0", "Bad directive or wrong number of arguments"),
        ("syslog-facility local9", FACILITY),
        ("rename-command CONFIG", "Bad directive or wrong number of arguments"),
        ("save 900 1", "Bad directive or wrong number of arguments"),
        ("protected-mode no", "Bad directive or wrong number of arguments"),
        ("watchdog-period 10", "Bad directive or wrong number of arguments"),
        ("include", "Bad directive or wrong number of arguments"),
        ("dir /nonexistent-disq-dir", f"Can't chdir to '{NO_DIR}': No such file or directory"),
        ('port "7711', "Unbalanced quotes in configuration line"),
        ("port '7711'x", "Unbalanced quotes in configuration line"),
    ],
)  # fmt: skip
def test_invalid_directive(tmp_path: Path, line: str, reason: str) -> None:
    err = error_of(f"# a comment\n\n{line}\nport 7711\n", tmp_path)
    assert (err.reason, err.line_number, err.line) == (reason, 3, line)
    assert str(err) == (
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        f"Reading the configuration file, at line 3\n>>> '{line}'\n{reason}"
    )


def test_error_quotes_the_trimmed_line(tmp_path: Path) -> None:
    err = error_of("port 7711\n# c\n \t loglevel   loud  \r\n", tmp_path)
    assert str(err) == (
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        "Reading the configuration file, at line 3\n"
        ">>> 'loglevel   loud'\n"
        "Invalid log level. Must be one of debug, verbose, notice, warning"
    )


def test_comments_blank_lines_crlf_and_case(tmp_path: Path) -> None:
    s = parse(
        "# port 1\r\n\r\n   \r\nPORT 7000\r\nLogLevel Warning\r\n  # indented comment\n", tmp_path
    )
    assert (s.port, s.loglevel) == (7000, "warning")


def test_later_lines_win(tmp_path: Path) -> None:
    s = parse("port 1\nbind 10.0.0.1 10.0.0.2\nport 2\nbind 10.0.0.3\nappendonly yes\n"
              "appendonly no\n", tmp_path)  # fmt: skip
    assert (s.port, s.bind, s.appendonly) == (2, ("10.0.0.3",), False)


def test_cluster_port_must_fit(tmp_path: Path) -> None:
    err = error_of("port 55536\nloglevel debug\n", tmp_path)
    assert err.line_number == 1 and err.line == "port 55536"
    assert err.reason.startswith("Invalid port: the cluster port (port + 10000) would be 65536")
    assert parse("port 55535\n", tmp_path).grpc_port == 65535
    assert parse("port 60000\ngrpc-port 7000\n", tmp_path).grpc_port == 7000


def test_logfile_is_opened_at_start(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    s = parse("dir logs\nlogfile disque.log\n", tmp_path)
    assert s.logfile_path == (tmp_path / "logs" / "disque.log").resolve()
    assert s.logfile_path.exists()  # opened for append, as Disque does while parsing
    err = error_of("port 7711\nlogfile /nonexistent-disq-dir/x.log\n", tmp_path)
    assert (err.line_number, err.reason) == (
        2,
        "Can't open the log file: No such file or directory",
    )


def test_dir_is_relative_to_the_start_directory(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    s = parse("dir a\ndir b\nappendfilename disque.aof\n", tmp_path)
    assert s.dir == (tmp_path / "a" / "b").resolve()
    assert s.aof_path == s.dir / "disq.aof"
    assert parse("dir ./\n", tmp_path).dir == tmp_path.resolve()
    (tmp_path / "file").write_text("")
    err = error_of("dir file\n", tmp_path)
    assert err.reason == "Can't chdir to 'file': Not a directory"


# --------------------------------------------------------------------------------------------
# include, files, command-line options


def test_include_relative_to_the_working_directory(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "disque.conf").write_text("port 7000\ninclude common.conf\nloglevel debug\n")
    (run / "common.conf").write_text("port 7001\nloglevel warning\nappendonly yes\n")
    store = load_config(etc / "disque.conf", cwd=run)
    s = store.settings
    assert (s.port, s.loglevel, s.appendonly) == (7001, "debug", True)
    assert s.config_file == etc / "disque.conf"


def test_include_follows_earlier_dir_lines(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "extra.conf").write_text("beanstalk-port 11300\n")
    s = parse("dir conf.d\ninclude extra.conf\n", tmp_path)
    assert s.beanstalk_port == 11300


def test_error_in_an_included_file_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "bad.conf").write_text("# ok\nhz 10\nappendfsync sometimes\n")
    err = error_of("port 7000\ninclude bad.conf\n", tmp_path)
    assert (err.line_number, err.line, err.path) == (
        3,
        "appendfsync sometimes",
        str(tmp_path.resolve() / "bad.conf"),
    )


def test_include_errors(tmp_path: Path) -> None:
    err = error_of("include missing.conf\n", tmp_path)
    assert str(err) == "Fatal error, can't open config file 'missing.conf'"
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("port 1\ninclude a.conf\n")
    with pytest.raises(ConfigFileError) as info:
        load_config(tmp_path / "a.conf", cwd=tmp_path)
    assert info.value.line_number == 2
    assert info.value.reason == "include loop: 'a.conf' is already being read"


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as info:
        load_config("nope.conf", cwd=tmp_path)
    assert str(info.value) == "Fatal error, can't open config file 'nope.conf'"


def test_config_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("port 7005\n"))
    store = load_config("-", cwd=tmp_path)
    assert store.settings.port == 7005 and store.config_file is None


def test_command_line_options_follow_the_file(tmp_path: Path) -> None:
    (tmp_path / "d.conf").write_text("port 7000\nloglevel debug\n")
    options = options_from_argv(["--port", "7777", "--bind", "10.0.0.1", "10.0.0.2"])
    assert options == 'port "7777" \nbind "10.0.0.1" "10.0.0.2" '
    s = load_config(tmp_path / "d.conf", options, cwd=tmp_path).settings
    assert (s.port, s.bind, s.loglevel) == (7777, ("10.0.0.1", "10.0.0.2"), "debug")
    with pytest.raises(ConfigFileError) as info:
        load_config(tmp_path / "d.conf", options_from_argv(["--hz", "10", "--port", "x"]))
    # file: 2 lines + the empty line after its final newline; then the appended "\n" + options
    assert (info.value.line_number, info.value.reason) == (5, "Invalid port")


DISQUE_SAMPLE = """\
# Disque configuration file example
daemonize no
pidfile /var/run/disque.pid
port 7711
tcp-backlog 511
# bind 192.168.1.100 10.0.0.1
timeout 0
tcp-keepalive 0
loglevel notice
logfile ""
dir ./
# requirepass foobared
appendonly no

appendfilename "disque.aof"
# appendfsync always
appendfsync everysec
auto-aof-rewrite-percentage 100
auto-aof-rewrite-min-size 64mb
aof-load-truncated yes
aof-enqueue-jobs-once no
# cluster-node-timeout 15000
slowlog-log-slower-than 10000
slowlog-max-len 128
latency-monitor-threshold 0
client-output-buffer-limit normal 0 0 0
client-output-buffer-limit slave 256mb 64mb 60
client-output-buffer-limit pubsub 32mb 8mb 60
hz 10
aof-rewrite-incremental-fsync yes
"""


def test_rename_error_is_reported_at_the_rename_line(tmp_path: Path) -> None:
    store = parse_config(
        'rename-command CONFIG x\nport 7000\nrename-command DEBUG ""\n', cwd=tmp_path
    )
    assert store.settings.renamed_commands == (("config", "x"), ("debug", ""))
    err = store.rename_error(1, "No such command in rename-command")
    assert (err.line_number, err.line) == (3, 'rename-command DEBUG ""')
    assert str(err).endswith(">>> 'rename-command DEBUG \"\"'\nNo such command in rename-command")


def test_pidfile_path_is_relative_to_dir(tmp_path: Path) -> None:
    s = parse_config(f"dir {tmp_path}\npidfile run/d.pid\n", cwd=tmp_path).settings
    assert s.pidfile_path == tmp_path.resolve() / "run/d.pid"
    assert parse_config('pidfile ""\n', cwd=tmp_path).settings.pidfile_path is None


def test_disque_sample_file_loads(tmp_path: Path) -> None:
    (tmp_path / "disque.conf").write_text(DISQUE_SAMPLE)
    store = load_config(tmp_path / "disque.conf", cwd=tmp_path)
    # The sample's values are the defaults; its pidfile line is configured, so it is written;
    # its appendfsync is Disque's default, everysec (disq's is always: README, "What an
    # answer promises").
    assert store.settings == replace(
        DisqueSettings(dir=tmp_path.resolve()),
        config_file=tmp_path / "disque.conf",
        pidfile_configured=True,
        appendfsync="everysec",
    )
    assert store.settings.pidfile_path == Path("/var/run/disque.pid")


# --------------------------------------------------------------------------------------------
# CONFIG GET


def test_get_exact_and_glob(tmp_path: Path) -> None:
    store = parse_config("maxmemory 1gb\nappendonly yes\nunixsocketperm 700\n", cwd=tmp_path)
    assert store.get("port") == [("port", "7711")]
    assert store.get("MAXMEMORY") == [("maxmemory", "1073741824")]
    assert [n for n, _ in store.get("max*")] == [
        "maxmemory",
        "maxmemory-samples",
        "maxclients",
        "maxmemory-policy",
    ]
    assert store.get("*port*") == [
        ("port", "7711"),
        ("beanstalk-port", "0"),
        ("grpc-port", "17711"),
        ("metrics-port", "9711"),
        ("job-lane-port", "0"),
        ("tls-port", "0"),
        ("beanstalk-tls-port", "0"),
    ]
    assert store.get("appendonly") == [("appendonly", "yes")]
    assert store.get("aof-load-truncated") == [("aof-load-truncated", "yes")]
    assert store.get("unixsocketperm") == [("unixsocketperm", "700")]
    assert store.get("nomatch") == []


def test_advertise_host_get_rewrite_and_set(tmp_path: Path) -> None:
    # Unset by default: CONFIG GET says "" (as Redis's cluster-announce-ip), and the node
    # gives out its bind address (disq.server.advertise).
    assert parse_config("", cwd=tmp_path).get("advertise-host") == [("advertise-host", "")]
    assert parse("", tmp_path).advertise_host is None
    conf = tmp_path / "disque.conf"
    conf.write_text("bind 0.0.0.0\nadvertise-host 10.1.2.3\n")
    store = load_config(conf)
    assert store.get("advertise-*") == [("advertise-host", "10.1.2.3")]
    # REWRITE keeps it (the next start gives out the same address) ...
    rewritten = store.rewrite_content(conf.read_text())
    assert parse(rewritten, tmp_path).advertise_host == "10.1.2.3"
    # ... and CONFIG SET cannot change it: the address travels in the node's own gossip
    # record, and peers follow an address change only through a restart's incarnation.
    with pytest.raises(ConfigSetError, match="Unsupported CONFIG parameter"):
        store.set("advertise-host", "10.9.9.9")


def test_get_special_values(tmp_path: Path) -> None:
    store = parse_config("", cwd=tmp_path)
    got = dict(store.get("*"))
    assert len(got) == len(store.get("*"))  # each name once
    assert got["bind"] == "127.0.0.1"  # the effective address, not Disque's ""
    assert got["dir"] == str(tmp_path.resolve())
    assert got["requirepass"] == "" and got["unixsocket"] == "" and got["logfile"] == ""
    assert got["maxmemory"] == "0" and got["auto-aof-rewrite-min-size"] == str(64 << 20)
    assert got["client-output-buffer-limit"] == (
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    )
    assert got["daemonize"] == "no" and got["tcp-keepalive"] == "0" and got["hz"] == "10"
    for name in ("cluster-node-timeout", "appendfsync", "maxmemory-policy", "loglevel",
                 "appendfilename", "beanstalk-replicate", "watchdog-period"):  # fmt: skip
        assert name in got


# --------------------------------------------------------------------------------------------
# CONFIG SET


def test_set_applies_and_calls_on_change(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    store = parse_config("", cwd=tmp_path, on_change=lambda k, v: calls.append((k, v)))
    store.set("maxmemory", "3MB")
    store.set("MAXMEMORY-POLICY", "ACKS")
    store.set("appendonly", "YES")
    store.set("timeout", "7")
    store.set("beanstalk-replicate", "2")
    s = store.settings
    assert (s.maxmemory_bytes, s.maxmemory_policy, s.appendonly, s.timeout_s) == (
        3 << 20,
        "acks",
        True,
        7,
    )
    assert s.beanstalk_replicate == 2
    assert calls == [
        ("maxmemory", str(3 << 20)),
        ("maxmemory-policy", "acks"),
        ("appendonly", "yes"),
        ("timeout", "7"),
        ("beanstalk-replicate", "2"),
    ]
    assert store.get("maxmemory") == [("maxmemory", str(3 << 20))]


@pytest.mark.parametrize(
    ("key", "value", "attr", "expected"),
    [
        ("timeout", "30", "timeout_s", 30),
        ("tcp-keepalive", "60", "tcp_keepalive_s", 60),
        ("cluster-node-timeout", "2000", "cluster_node_timeout_ms", 2000),
        ("appendfsync", "always", "appendfsync", "always"),
        ("loglevel", "WARNING", "loglevel", "warning"),
        ("aof-enqueue-jobs-once", "yes", "aof_enqueue_jobs_once", True),
        ("aof-load-truncated", "yes", "aof_load_truncated", True),
        ("auto-aof-rewrite-percentage", "100", "auto_aof_rewrite_percentage", 100),
        ("auto-aof-rewrite-min-size", "1gb", "auto_aof_rewrite_min_size_bytes", 1 << 30),
        ("maxmemory", "0", "maxmemory_bytes", 0),
        ("maxclients", "100", "maxclients", 100),
        ("requirepass", "pw", "requirepass", "pw"),
        ("requirepass", "", "requirepass", None),
        ("hz", "10", "hz", 10),
    ],
)
def test_set_valid(tmp_path: Path, key: str, value: str, attr: str, expected: object) -> None:
    store = parse_config("requirepass old\n", cwd=tmp_path)
    store.set(key, value)
    assert getattr(store.settings, attr) == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("maxmemory", "x"),
        ("maxmemory", "-1"),
        ("maxmemory", ""),
        ("appendfsync", "sometimes"),
        ("appendonly", "1"),
        ("timeout", "-1"),
        ("timeout", "01"),
        ("timeout", "+1"),
        ("timeout", "1.5"),
        ("hz", "-1"),
        ("cluster-node-timeout", "0"),
        ("maxclients", "0"),
        ("loglevel", "loud"),
        ("maxmemory-policy", "allkeys-lru"),
        ("requirepass", "x" * 513),
        ("beanstalk-replicate", "0"),
        ("client-output-buffer-limit", "normal 0 0"),
        ("client-output-buffer-limit", "vip 0 0 0"),
        ("client-output-buffer-limit", "normal 0 0 -1"),
    ],
)
def test_set_invalid_argument(tmp_path: Path, key: str, value: str) -> None:
    calls: list[tuple[str, str]] = []
    store = parse_config("", cwd=tmp_path, on_change=lambda k, v: calls.append((k, v)))
    before = store.settings
    with pytest.raises(ConfigSetError) as info:
        store.set(key, value)
    assert str(info.value) == f"ERR Invalid argument '{value}' for CONFIG SET '{key}'"
    assert store.settings == before and calls == []


@pytest.mark.parametrize(
    "key", ["foo", "Foo", "port", "bind", "daemonize", "logfile", "beanstalk-port", "grpc-port"]
)
def test_set_unsupported(tmp_path: Path, key: str) -> None:
    store = parse_config("", cwd=tmp_path)
    with pytest.raises(ConfigSetError) as info:
        store.set(key, "1")
    assert str(info.value) == f"ERR Unsupported CONFIG parameter: {key}"


def test_set_client_output_buffer_limit(tmp_path: Path) -> None:
    store = parse_config("", cwd=tmp_path)
    store.set("client-output-buffer-limit", "normal 0 0 0 pubsub 0 0 0")
    assert store.get("client-output-buffer-limit") == [
        ("client-output-buffer-limit", "normal 0 0 0 slave 268435456 67108864 60 pubsub 0 0 0")
    ]


def test_set_dir(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    store = parse_config("", cwd=tmp_path)
    store.set("dir", "data")  # relative to the current dir, as chdir
    assert store.settings.dir == (tmp_path / "data").resolve()
    with pytest.raises(ConfigSetError) as info:
        store.set("dir", "/nonexistent-disq-dir")
    assert str(info.value) == "ERR Changing directory: No such file or directory"


def test_on_change_can_refuse(tmp_path: Path) -> None:
    def refuse(name: str, value: str) -> None:
        raise ConfigSetError("ERR Unable to turn on AOF. Check server logs.")

    store = parse_config("", cwd=tmp_path, on_change=refuse)
    with pytest.raises(ConfigSetError, match="Unable to turn on AOF"):
        store.set("appendonly", "yes")
    assert store.settings.appendonly is False
    assert store.get("appendonly") == [("appendonly", "no")]


# --------------------------------------------------------------------------------------------
# CONFIG REWRITE


ORIGINAL = """\
# My Disque node
port 7000

# logging
loglevel notice
include extra.conf
rename-command CONFIG hidden
databases 16
   port 7001
slowlog-max-len 64
"""


def test_rewrite_without_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigRewriteError) as info:
        parse_config("", cwd=tmp_path).rewrite()
    assert str(info.value) == "ERR The server is running without a config file"


def test_rewrite_round_trip(tmp_path: Path) -> None:
    conf = tmp_path / "disque.conf"
    conf.write_text(ORIGINAL)
    (tmp_path / "extra.conf").write_text("beanstalk-replicate 2\n")
    os.chmod(conf, 0o640)
    store = load_config(conf, cwd=tmp_path)
    assert store.settings.port == 7001
    store.set("loglevel", "debug")
    store.set("maxmemory", "2mb")
    store.set("aof-enqueue-jobs-once", "yes")
    store.rewrite()
    assert conf.read_text() == (
        "# My Disque node\n"
        "port 7001\n"  # the first port line takes the value, the second goes
        "\n"
        "# logging\n"
        "loglevel debug\n"  # replaced in place
        "include extra.conf\n"  # lines we do not rewrite stay as they are
        "rename-command CONFIG hidden\n"
        "databases 16\n"
        "\n"
        "slowlog-max-len 64\n"
        "# Generated by CONFIG REWRITE\n"
        f'dir "{tmp_path.resolve()}"\n'
        "maxmemory 2mb\n"
        "aof-enqueue-jobs-once yes\n"
        "beanstalk-replicate 2\n"  # set by the include, away from its default
    )
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640
    again = load_config(conf, cwd=tmp_path)
    assert again.settings == store.settings
    before = conf.read_text()
    again.rewrite()
    assert conf.read_text() == before  # a second rewrite changes nothing
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_rewrite_every_changed_key_reparses_the_same(tmp_path: Path) -> None:
    conf = tmp_path / "d.conf"
    conf.write_text(DISQUE_SAMPLE + "bind 10.0.0.1 10.0.0.2\nrequirepass 'a \"b\"'\n")
    store = load_config(conf, cwd=tmp_path)
    for key, value in [
        ("timeout", "5"), ("tcp-keepalive", "30"), ("cluster-node-timeout", "3000"),
        ("appendfsync", "no"), ("appendonly", "yes"), ("maxmemory", "1000"),
        ("maxmemory-policy", "acks"), ("auto-aof-rewrite-min-size", "3kb"),
        ("beanstalk-replicate", "3"), ("client-output-buffer-limit", "pubsub 1kb 0 5"),
        ("slowlog-log-slower-than", "7"), ("latency-monitor-threshold", "9"),
        ("loglevel", "warning"), ("maxclients", "77"), ("requirepass", "p\nw\"x"),
    ]:  # fmt: skip
        store.set(key, value)
    store.rewrite()
    again = load_config(conf, cwd=tmp_path)
    assert again.settings == store.settings
    assert again.get("*") == store.get("*")
    text = conf.read_text()
    assert "client-output-buffer-limit pubsub 1kb 0 5\n" in text
    assert 'requirepass "p\\nw\\"x"\n' in text
    assert "# Disque configuration file example\n" in text


def test_rewrite_removes_unset_values(tmp_path: Path) -> None:
    conf = tmp_path / "d.conf"
    conf.write_text("requirepass secret\nmaxmemory 1gb\nport 7002\n")
    store = load_config(conf, cwd=tmp_path)
    store.set("requirepass", "")
    store.set("maxmemory", "0")  # a file cannot say maxmemory 0: the line must go
    store.rewrite()
    assert (
        conf.read_text()
        == f'\nport 7002\n# Generated by CONFIG REWRITE\ndir "{tmp_path.resolve()}"\n'
    )
    assert load_config(conf, cwd=tmp_path).settings == store.settings


def test_rewrite_keeps_an_existing_signature_and_unparsable_lines(tmp_path: Path) -> None:
    store = parse_config("timeout 50\n", cwd=tmp_path)
    old = 'port 7711\n# Generated by CONFIG REWRITE\nfoo "bar\n'
    assert store.rewrite_content(old) == (
        "port 7711\n"
        "# Generated by CONFIG REWRITE\n"
        '# ??? foo "bar\n'
        "timeout 50\n"
        f'dir "{tmp_path.resolve()}"\n'
    )
    assert store.rewrite_content(None) == (
        f'# Generated by CONFIG REWRITE\ntimeout 50\ndir "{tmp_path.resolve()}"\n'
    )


def test_rewrite_recreates_a_deleted_file_and_follows_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real.conf"
    link = tmp_path / "link.conf"
    real.write_text("port 7003\n")
    link.symlink_to(real)
    store = load_config(link, cwd=tmp_path)
    store.set("loglevel", "debug")
    store.rewrite()
    assert link.is_symlink() and "loglevel debug\n" in real.read_text()
    real.unlink()
    link.unlink()
    store.rewrite()
    assert link.read_text().startswith("# Generated by CONFIG REWRITE\nport 7003\n")


def test_rewrite_error_when_the_directory_is_gone(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / "d.conf").write_text("port 7004\n")
    store = load_config(gone / "d.conf", cwd=tmp_path)
    (gone / "d.conf").unlink()
    gone.rmdir()
    with pytest.raises(ConfigRewriteError) as info:
        store.rewrite()
    assert str(info.value) == "ERR Rewriting config file: No such file or directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_rewrite_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "d.conf").write_text("port 7004\n")
    store = load_config(locked / "d.conf", cwd=tmp_path)
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigRewriteError) as info:
            store.rewrite()
    finally:
        locked.chmod(0o700)
    assert str(info.value) == "ERR Rewriting config file: Permission denied"


# --------------------------------------------------------------------------------------------
# A cluster of config files


def test_seven_nodes_differing_by_port_and_dir(tmp_path: Path) -> None:
    stores: list[ConfigStore] = []
    for i in range(7):
        node_dir = tmp_path / f"node{i}"
        node_dir.mkdir()
        conf = tmp_path / f"disque-{i}.conf"
        conf.write_text(f"port {7711 + i}\ndir {node_dir}\nappendonly yes\n")
        stores.append(load_config(conf, cwd=tmp_path))
    settings = [s.settings for s in stores]
    grpc = [s.grpc_port for s in settings]
    assert grpc == [17711 + i for i in range(7)]
    ports = {p for s in settings for p in (s.port, s.grpc_port)}
    assert len(ports) == 14  # no node's cluster port is another node's client port
    assert len({s.dir for s in settings}) == 7
    assert len({s.aof_path for s in settings}) == 7
    for s in settings:
        assert replace(s, port=7711, dir=tmp_path, config_file=None) == replace(
            settings[0], port=7711, dir=tmp_path, config_file=None
        )


def test_constructor_without_state_uses_defaults() -> None:
    store = ConfigStore()
    assert store.settings.port == 7711 and store.config_file is None
