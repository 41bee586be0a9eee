"""The beanstalk door: one connection's commands applied to the engine, replies as bytes.

Sans-IO like the codec: the TCP layer hands in bytes and a clock reading and writes out the
returned bytes. Commands of one connection are answered strictly in order; a blocked reserve
holds the later commands of that connection (beanstalkd does the same: it stops reading).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Protocol

from disq.core.beanstalk import errors
from disq.core.beanstalk.model import DELAYED, RESERVED, STATE_NAMES, Job
from disq.protocol import beanstalk as bp

if TYPE_CHECKING:
    from disq.core.beanstalk.core import BeanstalkCore
    from disq.core.beanstalk.model import Session

_INSERTED = b"INSERTED %d\r\n"
_RESERVED = b"RESERVED %d %d\r\n"
_FOUND = b"FOUND %d %d\r\n"
_DELETED = b"DELETED\r\n"
_RELEASED = b"RELEASED\r\n"
_BURIED = b"BURIED\r\n"
_TOUCHED = b"TOUCHED\r\n"
_KICKED = b"KICKED\r\n"
_KICKED_N = b"KICKED %d\r\n"
_PAUSED = b"PAUSED\r\n"
_NOT_FOUND = b"NOT_FOUND\r\n"
_CRLF = b"\r\n"
_ERROR_REPLIES = {
    code: (code + "\r\n").encode()
    for code in (
        "NOT_FOUND",
        "OUT_OF_MEMORY",
        "DRAINING",
        "NOT_IGNORED",
        "DEADLINE_SOON",
        "TIMED_OUT",
        "INTERNAL_ERROR",
    )
}


# One read's replies are written in batches of about this size: a client that pipelines
# expensive commands (big peeks, big YAML) and never reads cannot make the node build
# unbounded output, nor keep the loop from other clients for long.
OUT_BATCH_BYTES = 256 * 1024
_CMD_COST = 64  # bytes charged per queued command besides a put's body


def _size(out: list[bytes]) -> int:
    return sum(map(len, out))


class ServerInfo(Protocol):
    """What ``stats`` reports about the process; provided by the server."""

    op_counts: list[int]

    def stats_tail(self, now_ms: int) -> list[tuple[str, object]]:
        """pid .. platform keys of ``stats`` (process, binlog and host facts)."""
        ...


class Replicator(Protocol):
    """The cluster's side of a beanstalk put (``--beanstalk-replicate`` > 1)."""

    def beanstalk_put(self, s: Session, job_id: int, now_ms: int) -> int:
        """0: copies made, answer INSERTED now; 1: pending, the answer comes as a wake-up
        (the job id, or an error code); -1: not enough nodes, the job was dropped."""
        ...


class BeanstalkDoor:
    __slots__ = (
        "blocked",
        "closing",
        "engine",
        "info",
        "op_counts",
        "parser",
        "pending",
        "pending_bytes",
        "replicator",
        "session",
    )

    def __init__(self, engine: BeanstalkCore, info: ServerInfo) -> None:
        self.engine = engine
        self.info = info
        self.op_counts = info.op_counts
        self.session = engine.open_session()
        self.parser = bp.BeanstalkParser(engine.limits.max_job_size)
        self.pending: collections.deque[bp.Command] = collections.deque()
        self.pending_bytes = 0
        self.blocked = False
        self.closing = False
        self.replicator: Replicator | None = None

    def receive(self, data: bytes, now_ms: int, out: list[bytes]) -> None:
        """Parse ``data`` and append the replies of the commands that can run now.

        Commands that cannot run yet (behind a blocked reserve, or past one batch of output)
        wait in ``pending``; ``pending_bytes`` lets the transport stop reading when a client
        pipelines more than it reads, so one client cannot grow the node without bound.
        """
        commands = self.parser.feed(data)
        if self.pending or self.blocked or self.closing:
            self._queue(commands)
            return
        run = self._run
        if len(commands) == 1:  # pipeline-1 clients: skip the batching bookkeeping
            run(commands[0], now_ms, out)
            return
        for i, cmd in enumerate(commands):
            run(cmd, now_ms, out)
            if self.blocked or self.closing or (i & 15 == 15 and _size(out) > OUT_BATCH_BYTES):
                self._queue(commands[i + 1 :])
                return

    def _queue(self, commands: list[bp.Command]) -> None:
        if not commands:
            return
        self.pending.extend(commands)
        self.pending_bytes += sum(
            _CMD_COST + (len(c[4]) if c[0] == bp.OP_PUT else 0) for c in commands
        )

    def run_pending(self, now_ms: int, out: list[bytes]) -> None:
        """Run queued commands until blocked, closing, or one batch of output is ready."""
        pending = self.pending
        run = self._run
        n = 0
        while pending and not self.blocked and not self.closing:
            cmd = pending.popleft()
            self.pending_bytes -= _CMD_COST + (len(cmd[4]) if cmd[0] == bp.OP_PUT else 0)
            run(cmd, now_ms, out)
            n += 1
            if n & 15 == 0 and _size(out) > OUT_BATCH_BYTES:
                return

    def resume(self, result: Job | str | int, now_ms: int, out: list[bytes]) -> None:
        """A blocked reserve (or replicated put) was answered; go on with queued commands."""
        self.blocked = False
        if isinstance(result, int):
            out.append(_INSERTED % result)
        elif isinstance(result, Job):
            out.append(_RESERVED % (result.id, len(result.body)))
            out.append(result.body)
            out.append(_CRLF)
        else:
            out.append(_ERROR_REPLIES[result])
        self.run_pending(now_ms, out)

    @property
    def runnable(self) -> bool:
        """Queued commands that could run now (not behind a blocked reserve)."""
        return bool(self.pending) and not self.blocked and not self.closing

    def close(self, now_ms: int) -> None:
        self.engine.close_session(self.session, now_ms)

    # ---------------------------------------------------------------- dispatch
    def _run(self, cmd: bp.Command, now_ms: int, out: list[bytes]) -> None:
        op = cmd[0]
        if op == bp.OP_ERROR:
            if len(cmd) == 3:
                self.op_counts[cmd[2]] += 1
            out.append(cmd[1])
            return
        engine = self.engine
        s = self.session
        if op == bp.OP_BAD_BODY:
            self.op_counts[bp.OP_PUT] += 1
            engine.spend_id(s)
            out.append(bp.EXPECTED_CRLF)
            return
        self.op_counts[op] += 1
        try:
            if op == bp.OP_PUT:
                job_id = engine.put(s, cmd[1], cmd[2] * 1000, cmd[3] * 1000, cmd[4], now_ms)
                repl = self.replicator
                if repl is None:
                    out.append(_INSERTED % job_id)
                else:
                    r = repl.beanstalk_put(s, job_id, now_ms)
                    if r == 0:
                        out.append(_INSERTED % job_id)
                    elif r > 0:
                        self.blocked = True
                    else:
                        out.append(_ERROR_REPLIES["INTERNAL_ERROR"])
            elif op == bp.OP_DELETE:
                engine.delete(s, cmd[1], now_ms)
                out.append(_DELETED)
            elif op == bp.OP_RESERVE or op == bp.OP_RESERVE_TIMEOUT:
                timeout_s = cmd[1] if op == bp.OP_RESERVE_TIMEOUT else -1
                timeout_ms = timeout_s * 1000 if timeout_s >= 0 else -1
                job = engine.reserve(s, timeout_ms, now_ms)
                if job is None:
                    self.blocked = True
                else:
                    out.append(_RESERVED % (job.id, len(job.body)))
                    out.append(job.body)
                    out.append(_CRLF)
            elif op == bp.OP_RESERVE_JOB:
                job = engine.reserve_job(s, cmd[1], now_ms)
                out.append(_RESERVED % (job.id, len(job.body)))
                out.append(job.body)
                out.append(_CRLF)
            elif op == bp.OP_RELEASE:
                engine.release(s, cmd[1], cmd[2], cmd[3] * 1000, now_ms)
                out.append(_RELEASED)
            elif op == bp.OP_BURY:
                engine.bury(s, cmd[1], cmd[2], now_ms)
                out.append(_BURIED)
            elif op == bp.OP_TOUCH:
                engine.touch(s, cmd[1], now_ms)
                out.append(_TOUCHED)
            elif op == bp.OP_USE:
                tube = engine.use(s, cmd[1])
                out.append(b"USING %s\r\n" % tube.name.encode())
            elif op == bp.OP_WATCH:
                out.append(b"WATCHING %d\r\n" % engine.watch(s, cmd[1]))
            elif op == bp.OP_IGNORE:
                out.append(b"WATCHING %d\r\n" % engine.ignore(s, cmd[1]))
            elif op == bp.OP_PEEK:
                self._found(engine.peek(cmd[1]), out)
            elif op == bp.OP_PEEK_READY:
                self._found(engine.peek_ready(s), out)
            elif op == bp.OP_PEEK_DELAYED:
                self._found(engine.peek_delayed(s), out)
            elif op == bp.OP_PEEK_BURIED:
                self._found(engine.peek_buried(s), out)
            elif op == bp.OP_KICK:
                out.append(_KICKED_N % engine.kick(s, cmd[1], now_ms))
            elif op == bp.OP_KICK_JOB:
                engine.kick_job(cmd[1], now_ms)
                out.append(_KICKED)
            elif op == bp.OP_STATS:
                out.append(bp.yaml_dict(self._stats(now_ms)))
            elif op == bp.OP_STATS_JOB:
                out.append(bp.yaml_dict(self._stats_job(engine.peek(cmd[1]), now_ms)))
            elif op == bp.OP_STATS_TUBE:
                if engine.find_tube(cmd[1]) is None:
                    raise errors.NotFound()
                out.append(bp.yaml_dict(self._stats_tube(cmd[1], now_ms)))
            elif op == bp.OP_LIST_TUBES:
                out.append(bp.yaml_list([t.name for t in engine.tube_order]))
            elif op == bp.OP_LIST_TUBE_USED:
                out.append(b"USING %s\r\n" % s.use.name.encode())
            elif op == bp.OP_LIST_TUBES_WATCHED:
                out.append(bp.yaml_list([t.name for t in s.watch]))
            elif op == bp.OP_PAUSE_TUBE:
                engine.pause_tube(cmd[1], cmd[2] * 1000, now_ms)
                out.append(_PAUSED)
            elif op == bp.OP_QUIT:
                self.closing = True
        except errors.BeanstalkError as exc:
            out.append(_ERROR_REPLIES.get(exc.code, b"INTERNAL_ERROR\r\n"))

    @staticmethod
    def _found(job: Job, out: list[bytes]) -> None:
        out.append(_FOUND % (job.id, len(job.body)))
        out.append(job.body)
        out.append(_CRLF)

    # ------------------------------------------------------------------ stats
    def _stats(self, now_ms: int) -> list[tuple[str, object]]:
        e = self.engine
        c = self.info.op_counts
        return [
            ("current-jobs-urgent", e.urgent_count),
            ("current-jobs-ready", e.ready_count),
            ("current-jobs-reserved", e.reserved_count),
            ("current-jobs-delayed", e.delayed_count),
            ("current-jobs-buried", e.buried_count),
            ("cmd-put", c[bp.OP_PUT]),
            ("cmd-peek", c[bp.OP_PEEK]),
            ("cmd-peek-ready", c[bp.OP_PEEK_READY]),
            ("cmd-peek-delayed", c[bp.OP_PEEK_DELAYED]),
            ("cmd-peek-buried", c[bp.OP_PEEK_BURIED]),
            ("cmd-reserve", c[bp.OP_RESERVE]),
            ("cmd-reserve-with-timeout", c[bp.OP_RESERVE_TIMEOUT]),
            ("cmd-delete", c[bp.OP_DELETE]),
            ("cmd-release", c[bp.OP_RELEASE]),
            ("cmd-use", c[bp.OP_USE]),
            ("cmd-watch", c[bp.OP_WATCH]),
            ("cmd-ignore", c[bp.OP_IGNORE]),
            ("cmd-bury", c[bp.OP_BURY]),
            ("cmd-kick", c[bp.OP_KICK]),
            ("cmd-touch", c[bp.OP_TOUCH]),
            ("cmd-stats", c[bp.OP_STATS]),
            ("cmd-stats-job", c[bp.OP_STATS_JOB]),
            ("cmd-stats-tube", c[bp.OP_STATS_TUBE]),
            ("cmd-list-tubes", c[bp.OP_LIST_TUBES]),
            ("cmd-list-tube-used", c[bp.OP_LIST_TUBE_USED]),
            ("cmd-list-tubes-watched", c[bp.OP_LIST_TUBES_WATCHED]),
            ("cmd-pause-tube", c[bp.OP_PAUSE_TUBE]),
            ("job-timeouts", e.job_timeouts),
            ("total-jobs", e.total_jobs),
            ("max-job-size", e.limits.max_job_size),
            ("current-tubes", len(e.tubes)),
            ("current-connections", len(e.sessions)),
            ("current-producers", e.producer_count),
            ("current-workers", e.worker_count),
            ("current-waiting", e.waiting_count),
            ("total-connections", e.total_sessions),
            *self.info.stats_tail(now_ms),
        ]

    def _stats_tube(self, name: str, now_ms: int) -> list[tuple[str, object]]:
        t = self.engine.tubes[name]
        paused = t.pause_until_ms != 0 and t.pause_until_ms >= now_ms  # until passed, as the core
        return [
            ("name", t.name),
            ("current-jobs-urgent", t.urgent_count),
            ("current-jobs-ready", len(t.ready)),
            ("current-jobs-reserved", t.reserved_count),
            ("current-jobs-delayed", len(t.delayed)),
            ("current-jobs-buried", len(t.buried)),
            ("total-jobs", t.total_jobs),
            ("current-using", t.using_count),
            ("current-watching", t.watching_count),
            ("current-waiting", len(t.waiting)),
            ("cmd-delete", t.cmd_delete),
            ("cmd-pause-tube", t.cmd_pause),
            ("pause", t.pause_ms // 1000 if paused else 0),
            ("pause-time-left", (t.pause_until_ms - now_ms) // 1000 if paused else 0),
        ]

    @staticmethod
    def _stats_job(job: Job, now_ms: int) -> list[tuple[str, object]]:
        time_left = 0
        if job.state in (RESERVED, DELAYED):
            # beanstalkd counts in microseconds: a just-reserved ttr-1 job has 0 s left.
            time_left = max(0, (job.deadline_ms - now_ms - 1) // 1000)
        return [
            ("id", job.id),
            ("tube", job.tube.name),
            ("state", STATE_NAMES[job.state]),
            ("pri", job.pri),
            ("age", max(0, (now_ms - job.ctime_ms) // 1000)),
            ("delay", job.delay_ms // 1000),
            ("ttr", job.ttr_ms // 1000),
            ("time-left", time_left),
            ("file", 0),
            ("reserves", job.reserves),
            ("timeouts", job.timeouts),
            ("releases", job.releases),
            ("buries", job.buries),
            ("kicks", job.kicks),
        ]
