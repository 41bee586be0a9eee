"""The node's job lifecycle event log: segmented, bounded, read by sequence number.

Events come from the cores (disq/core/events.py) and get consecutive sequence numbers here,
per node, kept across restarts. The log is a list of segments, each holding the events from
its first sequence number on: files ``DIR/seg-<first seq, 20 digits>.log`` when the node has a
data directory, byte arrays otherwise. A segment closes at ``segment_bytes``; whole segments
are dropped, oldest first, once the log passes ``max_bytes`` or a segment's newest event is
older than ``retention_ms``. So readers see a window ``first_seq .. next_seq - 1`` that
moves forward; a reader behind it has lost events (the Spark source's ``failOnDataLoss``).

One frame per batch of events (what the node drained after a batch of commands), columnar:
``<u32 payload length> <u32 crc32 of the payload>``, then the payload ``<u64 first seq>
<u32 count> <u32 ids length>``, the kinds (u8 each), times (i64), attempts, sizes and queue
name lengths (u32 each), the job ids joined by newlines, the queue names; little-endian.
Events are best effort, not acknowledged data: they are written without fsync, and a torn or
corrupt tail found at start-up is cut (a warning is logged).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from disq.core.events import KIND_NAMES, EventBuffer
from disq.logging import get_logger

_LEN = struct.Struct("<II")  # payload length, crc32 of the payload
_FRAME = struct.Struct("<QII")  # first seq, event count, length of the ids column
_SEG_PREFIX = "seg-"
_SEG_SUFFIX = ".log"
DEFAULT_SEGMENT_BYTES = 4 << 20
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MEMORY_MAX_BYTES = 32 << 20
DEFAULT_RETENTION_MS = 7 * 86_400_000
MAX_READ_EVENTS = 10_000
# A deferred log writes at once past this much unwritten (memory and loss on kill -9 bounded).
MAX_UNWRITTEN_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    time_ms: int
    kind: str
    queue: str
    job_id: str
    attempt: int
    size: int


@dataclass(slots=True)
class _Segment:
    first_seq: int
    path: Path | None  # None: in memory
    data: bytearray  # in memory only
    size: int
    last_time_ms: int


def encode(buf: EventBuffer, first_seq: int) -> bytes:
    """One frame for a whole buffer: the columns as they are in memory, so encoding costs
    a few C calls per batch rather than Python work per event."""
    count = len(buf)
    ids = "\n".join([x if isinstance(x, str) else str(x) for x in buf.job_ids]).encode("latin-1")
    queues = [q.encode("utf-8", "surrogateescape") for q in buf.queues]
    qlens = array("I", map(len, queues))
    cols = [buf.times, buf.attempts, buf.sizes, qlens]
    if sys.byteorder != "little":
        cols = [array(c.typecode, c) for c in cols]
        for c in cols:
            c.byteswap()
    payload = b"".join(
        (
            _FRAME.pack(first_seq, count, len(ids)),
            buf.kinds.tobytes(),
            *[c.tobytes() for c in cols],
            ids,
            *queues,
        )
    )
    return _LEN.pack(len(payload), zlib.crc32(payload)) + payload


def _whole_frames(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """(start, end) of each whole frame's payload whose CRC holds, in order, up to the first
    torn or corrupt frame."""
    pos = 0
    n = len(data)
    while pos + _LEN.size <= n:
        plen, crc = _LEN.unpack_from(data, pos)
        start = pos + _LEN.size
        end = start + plen
        if end > n or plen < _FRAME.size:
            return
        if zlib.crc32(memoryview(data)[start:end]) != crc:
            return
        yield start, end
        pos = end


def decode(data: bytes | bytearray | memoryview, from_seq: int = 0) -> tuple[list[Event], int]:
    """The events of the whole frames in ``data`` with ``seq >= from_seq``, and the length
    the whole frames span (a torn or corrupt frame ends the decoding there)."""
    out: list[Event] = []
    pos = 0
    for start, end in _whole_frames(data):
        payload = memoryview(data)[start:end]
        first, count, ids_len = _FRAME.unpack_from(payload, 0)
        if first + count > from_seq:  # a frame older than wanted is not decoded
            try:
                out.extend(_frame_events(payload, first, count, ids_len))
            except (ValueError, UnicodeDecodeError):
                break  # a good CRC over a frame that does not decode ends it there too
        pos = end
    return out, pos


def scan(data: bytes | bytearray) -> tuple[int, int, list[Event]]:
    """What a start-up needs of a segment, without decoding all of it: the length its whole
    frames span, the sequence number after them, and the last frame's events (its last
    event's time). Only the CRCs of the others are checked: a segment holds up to 4 MiB of
    events, which decode() turns into a hundred thousand objects, on the start's path."""
    pos = 0
    last: tuple[int, int] | None = None  # (start, end) of the last whole frame's payload
    for last in _whole_frames(data):
        pos = last[1]
    if last is None:
        return pos, 0, []
    payload = memoryview(data)[last[0] : last[1]]
    first, count, ids_len = _FRAME.unpack_from(payload, 0)
    try:
        events = _frame_events(payload, first, count, ids_len)
    except (ValueError, UnicodeDecodeError):
        # A frame with a good CRC that does not decode: rare enough to take the slow path,
        # which cuts the segment at that frame.
        events, pos = decode(data)
        return pos, (events[-1].seq + 1 if events else 0), events[-1:]
    return pos, first + count, events[-1:]


def _frame_events(payload: memoryview, first: int, count: int, ids_len: int) -> list[Event]:
    at = _FRAME.size
    kinds = payload[at : at + count]
    at += count
    cols = []
    for code, width in (("q", 8), ("I", 4), ("I", 4), ("I", 4)):
        col = array(code)
        col.frombytes(payload[at : at + width * count])
        if sys.byteorder != "little":
            col.byteswap()
        cols.append(col)
        at += width * count
    times, attempts, sizes, qlens = cols
    ids = bytes(payload[at : at + ids_len]).decode("latin-1").split("\n")
    at += ids_len
    if len(ids) != count or at + sum(qlens) != len(payload):
        raise ValueError("event frame columns do not match its count")
    out = []
    for i in range(count):
        q = bytes(payload[at : at + qlens[i]]).decode("utf-8", "surrogateescape")
        at += qlens[i]
        kind = kinds[i]
        out.append(
            Event(
                first + i,
                times[i],
                KIND_NAMES.get(kind, str(kind)),
                q,
                ids[i],
                attempts[i],
                sizes[i],
            )
        )
    return out


class EventLog:
    def __init__(
        self,
        directory: Path | None,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_bytes: int | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        deferred: bool = False,
    ) -> None:
        self.directory = directory
        self.segment_bytes = max(1024, segment_bytes)
        if max_bytes is None:
            max_bytes = DEFAULT_MAX_BYTES if directory is not None else DEFAULT_MEMORY_MAX_BYTES
        self.max_bytes = max(self.segment_bytes, max_bytes)
        self.retention_ms = retention_ms
        self.log = get_logger("disq.events")
        self.segments: list[_Segment] = []
        self.next_seq = 1
        self.total_bytes = 0
        self.write_errors = 0
        self._file: FileIO | None = None  # the last segment, open for appends
        self._file_path: Path | None = None
        # ``deferred``: appends stay in memory until flush() (the node calls it a few
        # milliseconds later, from a timer, and every read first), so the write of a
        # busy node's events is one syscall for many flushes, off the path of a reply.
        self.deferred = deferred
        self._unwritten: list[bytes] = []
        self._unwritten_bytes = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._load()

    # ------------------------------------------------------------------ start-up
    def _load(self) -> None:
        assert self.directory is not None
        files = sorted(
            p
            for p in self.directory.iterdir()
            if p.name.startswith(_SEG_PREFIX) and p.name.endswith(_SEG_SUFFIX)
        )
        for p in files:
            try:
                first = int(p.name[len(_SEG_PREFIX) : -len(_SEG_SUFFIX)])
            except ValueError:
                continue
            size = p.stat().st_size
            mtime_ms = int(p.stat().st_mtime * 1000)
            self.segments.append(_Segment(first, p, bytearray(), size, mtime_ms))
            self.total_bytes += size
        if not self.segments:
            return
        last = self.segments[-1]
        assert last.path is not None
        data = last.path.read_bytes()
        good, next_seq, events = scan(data)
        if good < len(data):
            self.log.warning("event_log_tail_cut", path=str(last.path), cut_bytes=len(data) - good)
            with open(last.path, "r+b") as f:
                f.truncate(good)
            self.total_bytes -= len(data) - good
            last.size = good
        self.next_seq = next_seq if events else last.first_seq
        if events:
            last.last_time_ms = events[-1].time_ms

    # ------------------------------------------------------------------ writing
    @property
    def first_seq(self) -> int:
        return self.segments[0].first_seq if self.segments else self.next_seq

    def append(self, buf: EventBuffer) -> None:
        """Give the buffered events their sequence numbers and store them."""
        n = len(buf)
        if n == 0:
            return
        data = encode(buf, self.next_seq)
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.size >= self.segment_bytes:
            self.flush()  # what the last segment still owes goes to its own file first
            seg = self._new_segment(self.next_seq)
        if seg.path is None:
            seg.data += data
        else:
            self._unwritten.append(data)
            self._unwritten_bytes += len(data)
        seg.size += len(data)
        seg.last_time_ms = buf.times[n - 1]
        self.total_bytes += len(data)
        self.next_seq += n
        if not self.deferred or self._unwritten_bytes >= MAX_UNWRITTEN_BYTES:
            self.flush()
        self._enforce_bounds(buf.times[n - 1])

    @property
    def has_unwritten(self) -> bool:
        """Appended events are waiting for :meth:`flush` (``deferred`` logs only)."""
        return bool(self._unwritten)

    def flush(self) -> None:
        """Write the appended events still in memory to the last segment's file."""
        if not self._unwritten:
            return
        data = b"".join(self._unwritten)
        self._unwritten.clear()
        self._unwritten_bytes = 0
        seg = self.segments[-1]
        assert seg.path is not None
        try:
            f = self._file
            if f is None or self._file_path != seg.path:
                # The last segment stays open (unbuffered, appending): one write per flush
                # instead of an open, a seek and a close too.
                self._close_file()
                f = self._file = open(seg.path, "ab", buffering=0)
                self._file_path = seg.path
            f.write(data)
        except OSError as exc:
            self._close_file()
            # Events are best effort: a full disk must not stop the node. The sequence
            # numbers of lost events are skipped, so readers can tell.
            self.write_errors += 1
            self.log.warning("event_log_write_failed", error=str(exc), bytes=len(data))
            seg.size -= len(data)
            self.total_bytes -= len(data)

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError as exc:
                self.log.warning("event_log_close_failed", error=str(exc))

    def close(self) -> None:
        """Write what is unwritten and close the open segment file (appends reopen it)."""
        self.flush()
        self._close_file()

    def _new_segment(self, first_seq: int) -> _Segment:
        path = None
        if self.directory is not None:
            path = self.directory / f"{_SEG_PREFIX}{first_seq:020d}{_SEG_SUFFIX}"
            path.touch()
        seg = _Segment(first_seq, path, bytearray(), 0, 0)
        self.segments.append(seg)
        return seg

    def _enforce_bounds(self, now_ms: int) -> None:
        segs = self.segments
        while len(segs) > 1 and (
            self.total_bytes > self.max_bytes or segs[0].last_time_ms < now_ms - self.retention_ms
        ):
            old = segs.pop(0)
            self.total_bytes -= old.size
            if old.path is not None:
                try:
                    os.unlink(old.path)
                except OSError as exc:
                    self.log.warning(
                        "event_segment_not_removed", path=str(old.path), error=str(exc)
                    )

    # ------------------------------------------------------------------ reading
    def read(self, from_seq: int, max_events: int, since_ms: int = 0) -> list[Event]:
        """Up to ``max_events`` events with ``seq >= from_seq`` and ``time_ms >= since_ms``,
        in order. Events before ``first_seq`` are gone (retention)."""
        max_events = max(1, min(max_events, MAX_READ_EVENTS))
        self.flush()
        out: list[Event] = []
        segs = self.segments
        for k, seg in enumerate(segs):
            nxt = segs[k + 1].first_seq if k + 1 < len(segs) else self.next_seq
            if nxt <= from_seq or seg.size == 0:
                continue
            if seg.path is not None:
                try:
                    data: bytes | bytearray = seg.path.read_bytes()[: seg.size]
                except OSError:
                    continue  # removed by retention meanwhile
            else:
                data = seg.data
            events, _ = decode(data, from_seq)
            for e in events:
                if e.seq >= from_seq and e.time_ms >= since_ms:
                    out.append(e)
                    if len(out) >= max_events:
                        return out
        return out
