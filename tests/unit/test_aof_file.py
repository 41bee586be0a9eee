"""The AOF file layer against real files: torn tails, corruption, locking, rewrite.

The pure framing functions are tested in ``test_aof_framing.py``.
"""

from __future__ import annotations

import os
import resource
import signal
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from disq.persistence import framing
from disq.persistence.aof_errors import (
    AofCorruptError,
    AofLockedError,
    AofRewriteError,
    AofWriteError,
)
from disq.persistence.aof_reader import read_aof, repair_aof
from disq.persistence.aof_writer import AOF_NAME, REWRITE_NAME, AofWriter, FsyncPolicy
from disq.persistence.framing import HEADER, HEADER_SIZE, frame
from disq.persistence.fs import LOCK_NAME

Record = tuple[int, bytes]

RECORDS: list[Record] = [(1, b"alpha"), (2, b""), (3, b"x" * 300), (255, bytes(range(256)))]


def write_raw(directory: Path, records: list[Record], tail: bytes = b"") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / AOF_NAME
    path.write_bytes(HEADER + b"".join(frame(t, p) for t, p in records) + tail)
    return path


def offsets(records: list[Record]) -> list[int]:
    """Start offset of each record, then the end offset."""
    out = [HEADER_SIZE]
    for _t, p in records:
        out.append(out[-1] + 9 + len(p))
    return out


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[AofWriter]:
    w = AofWriter(tmp_path / "data")
    yield w
    w.close()


# ----------------------------------------------------------------------------------- reading


def test_round_trip_through_writer(tmp_path: Path) -> None:
    d = tmp_path / "data"
    with AofWriter(d) as w:
        assert w.size == HEADER_SIZE
        w.write(b"".join(frame(t, p) for t, p in RECORDS[:2]))
        w.write(frame(*RECORDS[2]), records=1)
        w.fsync()
        assert w.records_written == 3
        assert w.bytes_written == w.size - HEADER_SIZE
    with AofWriter(d) as w:
        res = w.load()
        assert res.records == RECORDS[:3]
        assert res.torn_bytes == 0
        assert res.valid_end == w.size == offsets(RECORDS[:3])[-1]
        w.write(frame(*RECORDS[3]))
    res = read_aof(d / AOF_NAME)
    assert res.records == RECORDS
    assert all(type(p) is bytes for _t, p in res.records)


def test_empty_file_is_just_a_header(tmp_path: Path) -> None:
    with AofWriter(tmp_path) as w:
        pass
    assert (tmp_path / AOF_NAME).read_bytes() == HEADER
    assert read_aof(tmp_path / AOF_NAME).records == []
    assert not (tmp_path / "disq.aof.init").exists()
    assert w.size == HEADER_SIZE


def test_torn_tail_at_every_cut_of_the_last_record(tmp_path: Path) -> None:
    offs = offsets(RECORDS)
    full = write_raw(tmp_path / "src", RECORDS).read_bytes()
    last_start = offs[-2]
    for cut in range(last_start, len(full)):
        path = write_raw(tmp_path / f"cut{cut}", [])
        path.write_bytes(full[:cut])
        with capture_logs() as logs:
            res = read_aof(path)
        assert res.records == RECORDS[:-1], cut
        assert res.valid_end == last_start
        assert res.torn_bytes == cut - last_start
        assert path.stat().st_size == last_start
        if cut > last_start:
            (event,) = [e for e in logs if e["event"] == "aof_torn_tail_cut"]
            assert event["log_level"] == "warning"
            assert event["offset"] == last_start
            assert event["bytes_cut"] == cut - last_start
        else:
            assert logs == []


def test_crc_flip_in_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    path = write_raw(tmp_path, RECORDS)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(data)
    res = read_aof(path)
    assert res.records == RECORDS[:-1]
    assert res.torn_bytes == len(data) - offsets(RECORDS)[-2]


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    # What a filesystem can leave when the size update survived a crash but the data did not.
    path = write_raw(tmp_path, RECORDS, tail=bytes(70_000))
    res = read_aof(path)
    assert res.records == RECORDS
    assert res.torn_bytes == 70_000


def test_torn_large_record_of_random_bytes_is_cut(tmp_path: Path) -> None:
    big = frame(9, os.urandom(3_000_000))
    path = write_raw(tmp_path, RECORDS, tail=big[: len(big) // 2])
    res = read_aof(path, truncate=False)
    assert res.records == RECORDS
    assert res.torn_bytes == len(big) // 2
    assert path.stat().st_size == offsets(RECORDS)[-1] + len(big) // 2


def test_read_without_truncate_leaves_the_file(tmp_path: Path) -> None:
    path = write_raw(tmp_path, RECORDS, tail=b"\x05\x00\x00")
    before = path.read_bytes()
    res = read_aof(path, truncate=False)
    assert res.records == RECORDS and res.torn_bytes == 3
    assert path.read_bytes() == before


def assert_corrupt_with_hint(path: Path, offset: int) -> AofCorruptError:
    before = path.read_bytes()
    with pytest.raises(AofCorruptError) as info:
        read_aof(path)
    err = info.value
    msg = str(err)
    assert err.code == "AOF_CORRUPT"
    assert err.offset == offset
    assert str(path) in msg
    assert f"offset {offset}" in msg
    assert f"run: disq-node --repair-aof {path.parent}" in msg
    assert path.read_bytes() == before, "a corrupt file must not be modified"
    return err


def test_crc_flip_in_the_middle_refuses_with_repair_hint(tmp_path: Path) -> None:
    path = write_raw(tmp_path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = offsets(RECORDS)[2]
    data[bad + 100] ^= 0x01
    path.write_bytes(data)
    assert_corrupt_with_hint(path, bad)


def test_huge_length_in_the_middle_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    # A flipped high bit makes the record "run past EOF": exactly what a torn write looks like,
    # except that good records follow. Cutting here would silently drop them.
    path = write_raw(tmp_path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = offsets(RECORDS)[1]
    data[bad + 3] ^= 0x10
    path.write_bytes(data)
    assert_corrupt_with_hint(path, bad)


def test_zeroed_length_in_the_middle_is_corruption(tmp_path: Path) -> None:
    path = write_raw(tmp_path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = offsets(RECORDS)[2]
    data[bad : bad + 8] = bytes(8)
    path.write_bytes(data)
    assert_corrupt_with_hint(path, bad)


def test_zero_type_byte_is_bad(tmp_path: Path) -> None:
    body = b"\x00payload"
    rec = struct.pack("<II", len(body), zlib.crc32(body)) + body
    path = write_raw(tmp_path, RECORDS[:1], tail=rec + frame(1, b"after"))
    assert_corrupt_with_hint(path, offsets(RECORDS[:1])[-1])


def test_torn_record_whose_payload_embeds_a_frame_is_reported_not_cut(tmp_path: Path) -> None:
    # Documented conservative choice: if anything after the bad spot parses as a valid record,
    # refuse (repair is available) rather than guess and maybe drop acknowledged data.
    inner = frame(4, b"looks like a record")
    outer = frame(5, b"prefix" + inner + b"suffix" * 10)
    path = write_raw(tmp_path, RECORDS, tail=outer[: len(outer) - 20])
    assert_corrupt_with_hint(path, offsets(RECORDS)[-1])


def test_record_claiming_more_than_the_file_holds_is_never_accepted(tmp_path: Path) -> None:
    # The CRC matches the bytes that are there, but the length says more should follow.
    body = b"\x01short"
    liar = struct.pack("<II", len(body) + 5, zlib.crc32(body)) + body
    path = write_raw(tmp_path, RECORDS, tail=liar)
    res = read_aof(path)
    assert res.records == RECORDS
    assert res.torn_bytes == len(liar)


def test_zero_run_then_valid_records_is_corruption(tmp_path: Path) -> None:
    # Zeros skipped in blocks must not skip over a record that starts right after them.
    for zeros in (8, 65_536 - 1, 65_536, 65_536 * 2 + 5):
        d = tmp_path / f"z{zeros}"
        path = write_raw(d, RECORDS, tail=bytes(zeros) + frame(1, b"survivor"))
        err = assert_corrupt_with_hint(path, offsets(RECORDS)[-1])
        assert f"offset {offsets(RECORDS)[-1] + zeros}" in str(err)


def test_large_valid_record_after_corruption_is_found(tmp_path: Path) -> None:
    # A long candidate is checked through the O(1) range CRC rather than by hashing it.
    big = frame(6, os.urandom(200_000))
    path = write_raw(tmp_path, RECORDS, tail=b"\x09garbage" + big)
    err = assert_corrupt_with_hint(path, offsets(RECORDS)[-1])
    assert f"offset {offsets(RECORDS)[-1] + 8}" in str(err)
    # ... and a single flipped bit in it makes the tail a torn one again.
    data = bytearray(path.read_bytes())
    data[-1000] ^= 0x08
    path.write_bytes(data)
    assert read_aof(path).records == RECORDS


def test_search_gives_up_with_repair_hint_when_over_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(framing, "_SEARCH_BUDGET", 50)
    # Mostly-zero bytes make nearly every offset a candidate: the pathological case.
    noise = bytes(1 if i % 5 == 0 else 0 for i in range(20_000))
    path = write_raw(tmp_path, RECORDS, tail=frame(2, noise)[:15_000])
    err = assert_corrupt_with_hint(path, offsets(RECORDS)[-1])
    assert "too many" in str(err) and "torn tail" in str(err)


@pytest.mark.parametrize(
    "content",
    [b"", b"DISQAOF\n\x01\x00", b"NOTANAOF" + bytes(8), b"DISQAOF\n\x02\x00" + bytes(6)],
    ids=["empty", "short", "bad-magic", "bad-version"],
)
def test_bad_header_is_corrupt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / AOF_NAME
    path.write_bytes(content + frame(1, b"x"))
    if len(content) < HEADER_SIZE:
        path.write_bytes(content)
    with pytest.raises(AofCorruptError) as info:
        read_aof(path)
    assert info.value.code == "AOF_CORRUPT"
    assert str(path) in str(info.value)
    with AofWriter(tmp_path) as w, pytest.raises(AofCorruptError):
        w.load()
    with pytest.raises(AofCorruptError):
        repair_aof(path)


# ------------------------------------------------------------------------------------ repair


def test_repair_cuts_at_first_bad_record_and_keeps_a_backup(tmp_path: Path) -> None:
    path = write_raw(tmp_path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = offsets(RECORDS)[2]
    data[bad + 12] ^= 0xFF
    path.write_bytes(data)
    with capture_logs() as logs:
        dropped = repair_aof(path)
    assert dropped == len(data) - bad
    assert path.stat().st_size == bad
    (backup,) = tmp_path.glob(f"{AOF_NAME}.corrupt-*")
    assert backup.read_bytes() == bytes(data)
    assert [e["event"] for e in logs] == ["aof_repaired"]
    assert read_aof(path).records == RECORDS[:2]
    assert repair_aof(path) == 0
    assert len(list(tmp_path.glob(f"{AOF_NAME}.corrupt-*"))) == 1


def test_repair_refuses_while_a_node_holds_the_directory(writer: AofWriter) -> None:
    with pytest.raises(AofLockedError):
        repair_aof(writer.path)


# ----------------------------------------------------------------------------------- locking


def test_second_writer_on_same_dir_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "data"
    first = AofWriter(d)
    try:
        with pytest.raises(AofLockedError) as info:
            AofWriter(d)
        assert info.value.code == "AOF_LOCKED"
        msg = str(info.value)
        assert str(d) in msg and str(os.getpid()) in msg
        assert (d / LOCK_NAME).exists()
    finally:
        first.close()
    # Closing releases the lock.
    AofWriter(d).close()


# ----------------------------------------------------------------------------------- writing


def test_write_before_load_on_existing_file_is_a_programming_error(tmp_path: Path) -> None:
    write_raw(tmp_path, RECORDS)
    with AofWriter(tmp_path) as w:
        with pytest.raises(RuntimeError, match="load"):
            w.write(frame(1, b"x"))
        w.load()
        w.write(frame(1, b"x"))
    assert read_aof(tmp_path / AOF_NAME).records == [*RECORDS, (1, b"x")]


def test_write_rejects_partial_records_before_writing(writer: AofWriter) -> None:
    with pytest.raises(ValueError):
        writer.write(frame(1, b"abc")[:-1])
    assert writer.size == HEADER_SIZE == writer.path.stat().st_size
    assert writer.records_written == 0


def test_closed_writer_refuses(writer: AofWriter) -> None:
    writer.close()
    writer.close()
    with pytest.raises(AofWriteError):
        writer.write(frame(1, b"x"))


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Let the test lower RLIMIT_FSIZE: writes past it fail with EFBIG, a real short write.
    The limit binds the whole process, pytest's own output file included: a test lifts it
    again before it ends (pytest writes the test's result before this teardown)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def set_fsize_limit(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_failed_write_rolls_back_and_can_be_retried(tmp_path: Path, file_size_limit: None) -> None:
    with AofWriter(tmp_path) as w:
        w.write(frame(1, b"first"))
        size = w.size
        batch = frame(2, b"a" * 5000) + frame(3, b"b" * 5000)
        set_fsize_limit(size + 7000)  # the kernel writes part of the batch, then refuses
        with pytest.raises(AofWriteError) as info:
            w.write(batch)
        assert info.value.code == "AOF_WRITE"
        assert w.size == size == (tmp_path / AOF_NAME).stat().st_size
        assert w.records_written == 1
        set_fsize_limit(resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        w.write(batch)
        assert w.records_written == 3
    assert read_aof(tmp_path / AOF_NAME).records == [
        (1, b"first"),
        (2, b"a" * 5000),
        (3, b"b" * 5000),
    ]


def test_rewrite_file_failure_aborts_rewrite_but_not_the_write(
    tmp_path: Path, file_size_limit: None
) -> None:
    with AofWriter(tmp_path) as w:
        w.begin_rewrite()
        w.write_snapshot(frame(1, b"s" * 20_000))
        set_fsize_limit(w.rewrite_size + 100)  # live file is small, rewrite file is not
        with capture_logs() as logs:
            w.write(frame(2, b"live" * 100))
        # Lifted here, not only by the fixture's teardown: pytest reports the test's result
        # before the teardown, and its write to a stdout file past the limit fails (EFBIG).
        set_fsize_limit(resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        assert not w.rewrite_active
        assert not (tmp_path / REWRITE_NAME).exists()
        assert [e["event"] for e in logs] == ["aof_rewrite_aborted"]
        with pytest.raises(AofRewriteError, match="aborted"):
            w.write_snapshot(frame(1, b"more"))
        with pytest.raises(AofRewriteError):
            w.commit_rewrite()
    assert read_aof(tmp_path / AOF_NAME).records == [(2, b"live" * 100)]


def test_fsync_in_thread_while_writing(writer: AofWriter) -> None:
    stop = threading.Event()
    marks: list[int] = []
    errors: list[BaseException] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                marks.append(writer.fsync_in_thread())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        for i in range(300):
            writer.write(frame(1, b"%d" % i))
            if i == 100:
                writer.begin_rewrite()
                writer.write_snapshot(frame(2, b"snap"))
            if i == 200:
                writer.commit_rewrite()
    finally:
        stop.set()
        t.join()
    assert not errors
    assert marks == sorted(marks)
    assert writer.fsync_in_thread() == writer.bytes_written
    writer.close()
    assert writer.fsync_in_thread() == writer.bytes_written  # closed: harmless no-op


def failing_fsync(fd: int) -> None:
    raise OSError(5, "Input/output error")


def test_failed_fsync_disables_the_writer(
    writer: AofWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer.write(frame(1, b"a"))
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(AofWriteError) as info:
        writer.fsync()
    assert info.value.code == "AOF_FSYNC"
    monkeypatch.undo()
    # A retried fsync could "succeed" on pages the kernel already dropped: never trust it.
    with pytest.raises(AofWriteError, match="restart"):
        writer.write(frame(1, b"b"))
    with pytest.raises(AofWriteError):
        writer.fsync_in_thread()
    writer.close()


def test_failed_commit_keeps_the_old_file_live(
    writer: AofWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer.write(frame(1, b"a"))
    writer.begin_rewrite()
    writer.write_snapshot(frame(1, b"snap"))
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(AofRewriteError) as info:
        writer.commit_rewrite()
    monkeypatch.undo()
    assert info.value.code == "AOF_REWRITE"
    assert not writer.rewrite_active and not writer.rewrite_path.exists()
    writer.write(frame(1, b"b"))
    writer.fsync()
    assert [p for _t, p in read_aof(writer.path).records] == [b"a", b"b"]


def test_fsync_policy_values() -> None:
    assert FsyncPolicy("always") is FsyncPolicy.ALWAYS
    assert FsyncPolicy("everysec") is FsyncPolicy.EVERYSEC
    assert FsyncPolicy("no") is FsyncPolicy.NO


# ----------------------------------------------------------------------------------- rewrite


def test_rewrite_interleaves_snapshot_and_live_records(tmp_path: Path) -> None:
    d = tmp_path / "data"
    with AofWriter(d) as w:
        w.write(frame(1, b"old-1") + frame(1, b"old-2"))
        w.begin_rewrite()
        assert w.rewrite_active and (d / REWRITE_NAME).exists()
        w.write_snapshot(frame(10, b"snap-1"))
        w.write(frame(2, b"live-1"))
        w.write_snapshot(frame(10, b"snap-2") + frame(10, b"snap-3"))
        w.write(frame(2, b"live-2"))
        # Until the commit the live file is the old one, complete with live-1 and live-2.
        assert [p for _t, p in read_aof(d / AOF_NAME, truncate=False).records] == [
            b"old-1",
            b"old-2",
            b"live-1",
            b"live-2",
        ]
        w.commit_rewrite()
        assert not w.rewrite_active and not (d / REWRITE_NAME).exists()
        assert w.rewrites_done == 1
        assert w.size == (d / AOF_NAME).stat().st_size
        w.write(frame(2, b"live-3"))
        assert w.size == (d / AOF_NAME).stat().st_size
        assert w.records_written == 5
    assert [p for _t, p in read_aof(d / AOF_NAME).records] == [
        b"snap-1",
        b"live-1",
        b"snap-2",
        b"snap-3",
        b"live-2",
        b"live-3",
    ]


def test_abort_rewrite_removes_the_temp_file(writer: AofWriter) -> None:
    writer.write(frame(1, b"a"))
    writer.begin_rewrite()
    with pytest.raises(AofRewriteError):
        writer.begin_rewrite()
    writer.write_snapshot(frame(1, b"s"))
    writer.abort_rewrite()
    writer.abort_rewrite()
    assert not writer.rewrite_path.exists()
    writer.write(frame(1, b"b"))
    with pytest.raises(AofRewriteError, match="no rewrite"):
        writer.commit_rewrite()
    assert [p for _t, p in read_aof(writer.path).records] == [b"a", b"b"]


def test_close_during_rewrite_aborts_it(tmp_path: Path) -> None:
    w = AofWriter(tmp_path)
    w.begin_rewrite()
    w.close()
    assert not (tmp_path / REWRITE_NAME).exists()


def test_leftover_rewrite_from_a_crash_is_removed_at_open(tmp_path: Path) -> None:
    write_raw(tmp_path, RECORDS)
    (tmp_path / REWRITE_NAME).write_bytes(HEADER + frame(1, b"half a snapshot")[:7])
    with capture_logs() as logs, AofWriter(tmp_path) as w:
        assert not (tmp_path / REWRITE_NAME).exists()
        assert w.load().records == RECORDS
    assert "aof_leftover_removed" in [e["event"] for e in logs]


# -------------------------------------------------------------------------------- properties

records_st = st.lists(st.tuples(st.integers(1, 255), st.binary(max_size=300)), max_size=25).map(
    lambda rs: [(t, bytes(p)) for t, p in rs]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, cut_frac=st.floats(0.0, 1.0))
def test_random_records_round_trip_and_any_truncation_is_torn(
    records: list[Record], cut_frac: float
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        with AofWriter(d) as w:
            w.write(b"".join(frame(t, p) for t, p in records), records=len(records))
        path = d / AOF_NAME
        assert read_aof(path).records == records

        offs = offsets(records)
        cut = HEADER_SIZE + round(cut_frac * (offs[-1] - HEADER_SIZE))
        with open(path, "r+b") as f:
            f.truncate(cut)
        res = read_aof(path)
        kept = sum(1 for end in offs[1:] if end <= cut)
        assert res.records == records[:kept]
        assert res.valid_end == offs[kept]
        assert res.torn_bytes == cut - offs[kept]
        assert path.stat().st_size == offs[kept]
