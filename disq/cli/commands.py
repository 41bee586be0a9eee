"""``disq``: the command-line tool, a thin layer over the SDK (:mod:`disq.client`).

``disq [--addr A] [--password P] [--json] [--timeout S] COMMAND ...``; see docs/cli.md.
Output goes to the streams in :class:`Out` (stdout unless a test passes another): tables or
plain values for people, one JSON document per command with ``--json``. Errors print
``disq: REASON: message`` on stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from disq import __version__
from disq.cli import events
from disq.cli.format import (
    JOB_HEADERS,
    body_text,
    job_json,
    job_row,
    key_values,
    node_state,
    schedule_fields,
    schedule_json,
    show_json,
    table,
)
from disq.cli.top import queue_rows, run_top, sample_once
from disq.client import Client, DisqError, NoJobError
from disq.client.adds import AddOptions
from disq.tls import TlsError

DEFAULT_ADDR = "127.0.0.1:7710"
PAUSE_STATES = ("none", "in", "out", "all")


class CliError(DisqError):
    """A failure the CLI itself finds, with its own reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Out:
    """Where a command writes: ``emit`` one result, as JSON or as the human text."""

    def __init__(self, stream: TextIO, err: TextIO, as_json: bool) -> None:
        self.stream = stream
        self.err = err
        self.as_json = as_json

    def emit(self, doc: object, human: str) -> None:
        self.stream.write(json.dumps(doc) + "\n" if self.as_json else human)

    def warn(self, text: str) -> None:
        self.err.write(f"disq: {text}\n")


Command = Callable[[argparse.Namespace, Client, Out], int]


# ---------------------------------------------------------------------- commands
def _body(args: argparse.Namespace) -> bytes:
    """The job's body: the argument, or standard input for "-"."""
    return sys.stdin.buffer.read() if args.body == "-" else os.fsencode(args.body)


def _job_options(args: argparse.Namespace) -> AddOptions:
    """The options ``put`` and ``schedule add`` (for each job it adds) both take."""
    return AddOptions(
        replicate=args.replicate, retry_s=args.retry, ttl_s=args.ttl, async_=args.async_
    )


def cmd_put(args: argparse.Namespace, c: Client, out: Out) -> int:
    options = _job_options(args)
    options.update(
        AddOptions(repl_timeout_ms=args.timeout_ms, delay_s=args.delay, maxlen=args.maxlen)
    )
    if args.headers:
        options["headers"] = args.headers
    job_id = c.add_job(args.queue, _body(args), **options)
    out.emit({"id": job_id}, job_id + "\n")
    return 0


def cmd_get(args: argparse.Namespace, c: Client, out: Out) -> int:
    wait_s = None if args.wait_s == 0 else args.wait_s
    jobs = c.get_jobs(args.queues, count=args.count, timeout_s=wait_s, nohang=args.nohang)
    human = table(JOB_HEADERS, [job_row(j) for j in jobs]) if jobs else ""
    out.emit([job_json(j) for j in jobs], human)
    return 0


def cmd_ack(args: argparse.Namespace, c: Client, out: Out) -> int:
    n = c.ack(*args.ids)
    out.emit({"acked": n}, f"{n}\n")
    return 0


def cmd_nack(args: argparse.Namespace, c: Client, out: Out) -> int:
    n = c.nack(*args.ids)
    out.emit({"nacked": n}, f"{n}\n")
    return 0


def cmd_show(args: argparse.Namespace, c: Client, out: Out) -> int:
    fields = c.show(args.id)
    if fields is None:
        raise NoJobError(f"no job {args.id}")
    human_fields = {**fields, "body": body_text(fields["body"])}
    if human_fields.get("idempotency_key") is None:
        human_fields.pop("idempotency_key", None)  # shown for keyed jobs only, as SHOW does
    headers = human_fields.pop("headers", None)
    if headers:  # shown for jobs with headers only, as SHOW does
        human_fields["headers"] = [f"{k}={body_text(v)}" for k, v in headers.items()]
    out.emit(show_json(fields), key_values(human_fields))
    return 0


def cmd_peek(args: argparse.Namespace, c: Client, out: Out) -> int:
    jobs = c.qpeek(args.queue, args.count)
    out.emit([job_json(j) for j in jobs], table(JOB_HEADERS, [job_row(j) for j in jobs]))
    return 0


def cmd_qlen(args: argparse.Namespace, c: Client, out: Out) -> int:
    n = c.qlen(args.queue)
    out.emit({"queue": args.queue, "len": n}, f"{n}\n")
    return 0


def cmd_purge(args: argparse.Namespace, c: Client, out: Out) -> int:
    n = c.purge_queue(args.queue)
    out.emit({"queue": args.queue, "purged": n}, f"{n}\n")
    return 0


def cmd_redrive(args: argparse.Namespace, c: Client, out: Out) -> int:
    n = c.redrive(args.queue, to=args.to, count=args.count)
    out.emit({"queue": args.queue, "redriven": n}, f"{n}\n")
    return 0


POLICY_HEADERS = ("QUEUE", "MAXDELIVERIES", "DEADLETTER", "BACKOFF_BASE_S", "BACKOFF_MAX_S")


def cmd_policies(args: argparse.Namespace, c: Client, out: Out) -> int:
    policies = c.queue_policies()
    docs = [dataclasses.asdict(p) for p in policies]  # queue, max_deliveries, ...
    rows = [
        (
            p.queue,
            p.max_deliveries or None,
            p.dead_letter or None,
            p.backoff_base_s if p.backoff_max_s else None,
            p.backoff_max_s or None,
        )
        for p in policies
    ]
    out.emit(docs, table(POLICY_HEADERS, rows))
    return 0


def cmd_routes(args: argparse.Namespace, c: Client, out: Out) -> int:
    r = c.list_routes()
    data = {
        "exchanges": r.exchanges,
        "bindings": [{"exchange": e, "queue": q, "routing_key": k} for e, q, k in r.bindings],
        "queues": {n: {"expires_ms": x, "message_ttl_ms": t} for n, (x, t) in r.queues.items()},
    }
    human = (
        table(("EXCHANGE", "TYPE"), sorted(r.exchanges.items()))
        + "\n"
        + table(("EXCHANGE", "QUEUE", "ROUTING_KEY"), r.bindings)
        + "\n"
        + table(
            ("QUEUE", "EXPIRES_MS", "MESSAGE_TTL_MS"),
            [(n, x, t) for n, (x, t) in sorted(r.queues.items())],
        )
    )
    out.emit(data, human)
    return 0


def cmd_queues(args: argparse.Namespace, c: Client, out: Out) -> int:
    sample = asyncio.run(sample_once(args.addr, _options(args)))
    for n in sample.nodes:
        if n.error is not None:
            out.warn(f"node {n.id[:8]} ({n.addr or 'no gRPC port'}) not counted: {n.error}")
    rows = [{k: q[k] for k in ("name", "len", "blocked", "pause")} for q in queue_rows(sample)]
    human = table(("QUEUE", "LEN", "BLOCKED", "PAUSE"), [tuple(r.values()) for r in rows])
    out.emit(rows, human)
    return 0


def cmd_pause(args: argparse.Namespace, c: Client, out: Out) -> int:
    state = c.pause(args.queue, args.state, bcast=args.bcast)
    out.emit({"queue": args.queue, "state": state}, state + "\n")
    return 0


def cmd_nodes(args: argparse.Namespace, c: Client, out: Out) -> int:
    hello = c.hello()
    nodes = [
        {
            "id": n.id,
            "host": n.host,
            "resp_port": n.resp_port,
            "grpc_port": n.grpc_port,
            "priority": n.priority,
            "state": node_state(n.priority),
        }
        for n in sorted(hello.nodes, key=lambda n: (n.host, n.resp_port, n.id))
    ]
    rows = [
        (
            n["id"],
            f"{n['host']}:{n['resp_port']}" if n["resp_port"] else n["host"],
            n["grpc_port"] or None,
            n["priority"],
            n["state"],
            "*" if n["id"] == hello.my_id else "",
        )
        for n in nodes
    ]
    human = table(("ID", "ADDRESS", "GRPC", "PRIO", "STATE", "SELF"), rows)
    out.emit({"my_id": hello.my_id, "nodes": nodes}, human)
    return 0


STATS_HEADERS = (
    "NODE",
    "ADDRESS",
    "STATE",
    "UPTIME_S",
    "JOBS",
    "QUEUES",
    "CLIENTS",
    "MEMORY",
    "COMMANDS",
)
STATS_KEYS = (
    "uptime_in_seconds",
    "registered_jobs",
    "registered_queues",
    "connected_clients",
    "used_memory",
    "total_commands_processed",
)


def cmd_stats(args: argparse.Namespace, c: Client, out: Out) -> int:
    docs: list[dict[str, Any]] = []
    rows: list[tuple[object, ...]] = []
    for n in sorted(c.hello().nodes, key=lambda n: (n.host, n.grpc_port, n.id)):
        addr = f"{n.host}:{n.grpc_port}" if n.grpc_port else ""
        doc: dict[str, Any] = {"id": n.id, "addr": addr, "priority": n.priority}
        doc["state"] = node_state(n.priority)
        try:
            doc["info"] = _node_info(c, n.id, addr)
        except DisqError as exc:
            doc["error"] = {"reason": exc.reason, "message": _message(exc)}
        docs.append(doc)
        info = doc.get("info", {})
        state = doc["error"]["reason"] if "error" in doc else doc["state"]
        figures = [_number(info.get(k)) for k in STATS_KEYS]
        rows.append((n.id[:8], addr or "-", state, *figures))
    out.emit(docs, table(STATS_HEADERS, rows))
    return 0


def _node_info(c: Client, node_id: str, addr: str) -> dict[str, str]:
    if not addr:
        raise CliError("NOGRPC", "the node serves no gRPC port")
    info = c.info(node=addr)
    if info.get("node_id", node_id) != node_id:  # the SDK did not know the address
        raise CliError("WRONGNODE", f"{addr} answered for node {info['node_id'][:8]}")
    return info


def _number(value: str | None) -> int | str | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value


def cmd_events(args: argparse.Namespace, c: Client, out: Out) -> int:
    summaries = events.export(args, c)
    rows = [
        (d["node"][:8], d["events"], d["first_seq"], d["last_seq"], d["file"]) for d in summaries
    ]
    out.emit(summaries, table(("NODE", "EVENTS", "FIRST", "LAST", "FILE"), rows))
    for d in summaries:
        if d["lost_before_first"]:
            out.warn(f"node {d['node'][:8]}: {d['lost_before_first']} events gone (retention)")
    return 0


def cmd_schedule(args: argparse.Namespace, c: Client, out: Out) -> int:
    action = args.action
    if action == "add":
        replaced = c.add_schedule(
            args.name,
            args.spec,
            args.queue,
            _body(args),
            tz=args.tz,
            misfire=args.misfire,
            catchup=args.catchup,
            **_job_options(args),
        )
        word = "replaced" if replaced else "added"
        out.emit({"name": args.name, "replaced": replaced}, word + "\n")
    elif action in SCHEDULE_CHANGES:
        found = getattr(c, SCHEDULE_CHANGES[action])(args.name)
        out.emit({"name": args.name, "found": found}, f"{int(found)}\n")
    elif action == "list":
        names = c.list_schedules()
        out.emit(names, "".join(n + "\n" for n in names))
    else:
        sched = c.show_schedule(args.name)
        if sched is None:
            raise CliError("NOSCHEDULE", f"no schedule {args.name}")
        out.emit(schedule_json(sched), key_values(schedule_fields(sched)))
    return 0


SCHEDULE_CHANGES = {
    "del": "delete_schedule",
    "pause": "pause_schedule",
    "resume": "resume_schedule",
}


COMMANDS: dict[str, Command] = {
    "events": cmd_events,
    "put": cmd_put,
    "get": cmd_get,
    "ack": cmd_ack,
    "nack": cmd_nack,
    "show": cmd_show,
    "peek": cmd_peek,
    "qlen": cmd_qlen,
    "purge": cmd_purge,
    "redrive": cmd_redrive,
    "policies": cmd_policies,
    "routes": cmd_routes,
    "queues": cmd_queues,
    "pause": cmd_pause,
    "nodes": cmd_nodes,
    "stats": cmd_stats,
    "schedule": cmd_schedule,
}


# ---------------------------------------------------------------------- arguments
def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return value


class _Header(argparse.Action):
    """``--header key=value``, repeatable, into one dict; a key given twice is refused."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        key, eq, value = str(values).partition("=")
        if not eq or not key:
            parser.error(f"{option_string}: KEY=VALUE, not {values!r}")
        headers: dict[str, str] = dict(getattr(namespace, self.dest) or {})
        if key in headers:
            parser.error(f"{option_string}: header {key!r} given twice")
        headers[key] = value
        setattr(namespace, self.dest, headers)


def _peek_count(text: str) -> int:
    value = int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must not be 0 (< 0: newest first)")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="disq", description="Administer a disq cluster.")
    p.add_argument("--version", action="version", version=f"disq {__version__}")
    p.add_argument(
        "--addr",
        default=os.environ.get("DISQ_ADDR") or DEFAULT_ADDR,
        help="host:port[,host:port...] gRPC ports of nodes (env DISQ_ADDR; %(default)s)",
    )
    p.add_argument("--password", default=os.environ.get("DISQ_PASSWORD"), help="env DISQ_PASSWORD")
    tls = p.add_argument_group("TLS (plaintext unless one of these is given)")
    tls.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=os.environ.get("DISQ_TLS_CA") or None,
        help="CA certificate that signs the nodes' certificates (env DISQ_TLS_CA)",
    )
    tls.add_argument(
        "--tls-cert",
        metavar="FILE",
        default=os.environ.get("DISQ_TLS_CERT") or None,
        help="client certificate, for nodes that require one (env DISQ_TLS_CERT)",
    )
    tls.add_argument(
        "--tls-key",
        metavar="FILE",
        default=os.environ.get("DISQ_TLS_KEY") or None,
        help="the key of --tls-cert (env DISQ_TLS_KEY)",
    )
    p.add_argument("--json", action="store_true", help="machine output: JSON")
    p.add_argument("--timeout", dest="timeout_s", type=_seconds, default=5.0, help="RPC seconds")
    # --json is also accepted after the command (SUPPRESS keeps the global one otherwise).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, parents=[common])

    s = cmd("put", "add a job; prints its id")
    s.add_argument("queue")
    s.add_argument("body", help="the job's body; - reads it from stdin (bytes as they are)")
    s.add_argument("--replicate", type=_positive, help="copies (default min(3, nodes))")
    s.add_argument("--timeout-ms", type=_non_negative, default=5000, help="replication wait")
    s.add_argument("--delay", type=_non_negative, default=0, help="seconds before queued")
    s.add_argument("--retry", type=_non_negative, help="seconds before redelivery; 0: once")
    s.add_argument("--ttl", type=_non_negative, help="seconds the job lives (default 1 day)")
    s.add_argument("--maxlen", type=_non_negative, help="refuse if the queue is this long")
    s.add_argument("--async", dest="async_", action="store_true", help="replicate later")
    s.add_argument(
        "--header",
        dest="headers",
        action=_Header,
        metavar="KEY=VALUE",
        help="a header the job carries (repeatable; the value as UTF-8 text)",
    )

    s = cmd("get", "take jobs from queues (nothing printed if none came)")
    s.add_argument("queues", nargs="+", metavar="QUEUE")
    s.add_argument("--count", type=_positive, default=1)
    s.add_argument("--timeout", dest="wait_s", type=_seconds, default=1.0, help="0: forever")
    s.add_argument("--nohang", action="store_true", help="do not wait at all")

    cmd("ack", "acknowledge jobs; prints how many were known").add_argument("ids", nargs="+")
    cmd("nack", "queue jobs again now; prints how many").add_argument("ids", nargs="+")
    cmd("show", "a job's state").add_argument("id")
    s = cmd("peek", "jobs of a queue without taking them")
    s.add_argument("queue")
    s.add_argument("--count", type=_peek_count, default=10, help="< 0: newest first")
    cmd("qlen", "a queue's length at the node answering").add_argument("queue")
    cmd("purge", "ack every queued job of a queue on every node; prints how many").add_argument(
        "queue"
    )
    s = cmd("redrive", "dead letters back to their source queue, on every node; prints how many")
    s.add_argument("queue", metavar="DLQ", help="the dead-letter queue")
    s.add_argument("--to", help="into this queue instead of each job's source queue")
    s.add_argument("--count", type=_positive, help="at most this many per node (1..10000)")
    cmd("policies", "every queue policy the cluster keeps (QPOLICY LIST)")
    cmd("routes", "the exchanges, bindings and queue declarations the cluster keeps")
    cmd("queues", "every queue of the cluster, lengths summed over nodes")
    s = cmd("pause", "read or set a queue's pause state")
    s.add_argument("queue")
    s.add_argument("state", nargs="?", choices=PAUSE_STATES)
    s.add_argument("--bcast", action="store_true", help="to every node")
    cmd("nodes", "the cluster's nodes, as HELLO gives them")
    cmd("stats", "INFO of each node")
    s = cmd("top", "a live view of queues and nodes with rates")
    s.add_argument("--interval", type=_seconds, default=1.0, help="seconds between frames")
    s.add_argument("--iterations", type=_positive, help="frames to show (default: until ^C)")
    events.add_parser(sub, common)
    _schedule_parser(sub, common)
    return p


def _schedule_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    help_ = "recurring jobs the cluster keeps (SCHEDULE)"
    s = sub.add_parser("schedule", help=help_, description=help_, parents=[common])
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=help_, description=help_, parents=[common]
        )
        return parser

    a = action("add", "add or replace a schedule: each tick of SPEC adds a job to QUEUE")
    a.add_argument("name")
    a.add_argument("spec", help="cron (5 or 6 fields), @daily, @hourly, ..., '@every 30s'")
    a.add_argument("queue")
    a.add_argument("body", help="each job's body; - reads it from stdin")
    a.add_argument("--tz", default="UTC", help="IANA zone of the cron fields (%(default)s)")
    a.add_argument("--replicate", type=_positive, help="copies (default min(3, nodes))")
    a.add_argument("--retry", type=_non_negative, help="seconds before redelivery; 0: once")
    a.add_argument("--ttl", type=_positive, help="seconds each job lives (default 1 day)")
    a.add_argument("--async", dest="async_", action="store_true", help="replicate later")
    a.add_argument(
        "--misfire",
        choices=("catchup", "skip"),
        default="catchup",
        help="ticks missed while the cluster was down: fire the last --catchup, or none",
    )
    a.add_argument("--catchup", type=_non_negative, default=1, help="with catchup (1)")
    action("del", "delete a schedule; prints 1, or 0 if there was none").add_argument("name")
    action("pause", "stop firing; prints 1, or 0 if no such schedule").add_argument("name")
    action("resume", "fire again from the next tick; prints 1 or 0").add_argument("name")
    action("list", "every schedule's name")
    action("show", "a schedule: its definition, next ticks, last job").add_argument("name")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "password": args.password,
        "timeout_s": args.timeout_s,
        # "" (an empty flag or variable) turns one off, as unset.
        "tls_ca": args.tls_ca or None,
        "tls_cert": args.tls_cert or None,
        "tls_key": args.tls_key or None,
    }


def _message(exc: DisqError) -> str:
    """The message without the reason it may start with (``BADID Invalid ...``)."""
    msg = exc.message
    if msg.startswith(exc.reason + " "):
        msg = msg[len(exc.reason) + 1 :]
    return msg


def _run(args: argparse.Namespace, out: Out) -> int:
    if args.command == "top":
        coro = run_top(
            args.addr,
            _options(args),
            out.stream,
            interval_s=args.interval,
            iterations=args.iterations,
            as_json=out.as_json,
        )
        try:
            return asyncio.run(coro)
        except KeyboardInterrupt:
            return 0  # the way to leave a live view
    with Client(args.addr, **_options(args)) as client:
        return COMMANDS[args.command](args, client, out)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage error (2), --help or --version (0)
        return exc.code if isinstance(exc.code, int) else 2
    out = Out(sys.stdout, sys.stderr, args.json)
    try:
        code = _run(args, out)
        out.stream.flush()
        return code
    except DisqError as exc:
        out.warn(f"{exc.reason}: {_message(exc)}")
        return 1
    except TlsError as exc:
        out.warn(str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `disq top | head`: the reader is gone
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
