"""A node whose data directory's filesystem fills up, for real (docs/disk-full.md).

The test mounts a 4 MiB tmpfs as the node's data directory (root only; skipped otherwise),
fills it with beanstalk puts and Disque adds until the node refuses them, and checks the
exact refusals of the three doors, that reads, acks and deletes still work, that every job
that was acknowledged survives a restart, and that adds are taken again, without a restart,
once space comes back: first by deleting jobs (the node rewrites its AOF to shrink it), then
by removing a filler file the test wrote.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import SERVER_KIND, ServerFactory, ServerProcess, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.resp_client import RespClient, encode_command  # noqa: E402
from disq.client import Client, OutOfMemoryError  # noqa: E402
from disq.proto_gen import api_pb2, api_pb2_grpc  # noqa: E402
from disq.server.aof_service import DiskPolicy, disk_full_message  # noqa: E402

pytestmark = pytest.mark.skipif(SERVER_KIND != "disq", reason="disq's own disk handling")

FS_BYTES = 4 << 20
BODY = b"x" * 2000
OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
MAX_ROUNDS = 10_000  # a 4 MiB filesystem holds under 2,000 such jobs


def mounted(mnt: Path, kind: str, *options: str) -> Iterator[Path]:
    """A filesystem of ``kind`` mounted at ``mnt`` for one test (root only: skipped else),
    unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a {kind} needs root")
    mnt.mkdir()
    try:
        r = subprocess.run(
            ["mount", "-t", kind, *options, kind, str(mnt)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a {kind}: {exc}")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a {kind}: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)


@pytest.fixture
def small_fs(short_tmp: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs."""
    yield from mounted(short_tmp / "fs", "tmpfs", "-o", f"size={FS_BYTES}")


@pytest.fixture
def sizeless_fs(short_tmp: Path) -> Iterator[Path]:
    """A ramfs: its statvfs reports zero blocks, as some FUSE and network filesystems do
    (LazyFS did)."""
    yield from mounted(short_tmp / "rfs", "ramfs")


class Node:
    """One disq-node on the small filesystem, with its three doors."""

    def __init__(self, factory: ServerFactory, data_dir: Path) -> None:
        self.resp_port = free_port()
        self.grpc_port = free_port()
        self.data_dir = data_dir
        self.srv: ServerProcess = factory.new(
            "-b",
            str(data_dir),
            "--resp-port",
            str(self.resp_port),
            "--grpc-port",
            str(self.grpc_port),
            # The event log lives in the data directory too: keep it small.
            "--events-max-bytes",
            "65536",
            start=False,
        )
        self.start()

    def start(self) -> None:
        self.srv.start()
        self.bs = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        self.bs_in = self.bs.makefile("rb")
        self.resp = RespClient("127.0.0.1", self.resp_port, timeout=10)
        eventually(lambda: self.resp.call("PING") == "PONG", "the RESP door")

    def restart(self) -> None:
        self.close_clients()
        assert self.srv.stop() == 0, self.srv.log_text()
        self.start()

    def close_clients(self) -> None:
        self.bs_in.close()
        self.bs.close()
        self.resp.close()

    # ------------------------------------------------------------------ beanstalk
    def bs_cmd(self, data: bytes) -> bytes:
        self.bs.sendall(data)
        return self.bs_in.readline()

    def put(self, body: bytes = BODY) -> bytes:
        return self.bs_cmd(b"put 0 0 600 %d\r\n%s\r\n" % (len(body), body))

    def peek(self, job_id: int) -> bytes:
        line = self.bs_cmd(b"peek %d\r\n" % job_id)
        if line.startswith(b"FOUND"):
            self.bs_in.read(int(line.split()[2]) + 2)
        return line

    # ------------------------------------------------------------------ RESP
    def addjob_raw(self, body: bytes = BODY) -> bytes:
        """ADDJOB's reply exactly as sent (a status or an error line)."""
        with socket.create_connection(("127.0.0.1", self.resp_port), timeout=10) as s:
            s.sendall(encode_command(["ADDJOB", "q", body, "0"]))
            buf = b""
            while not buf.endswith(b"\r\n"):
                chunk = s.recv(4096)
                assert chunk, "connection closed"
                buf += chunk
            return buf

    def info(self) -> dict[str, str]:
        text = self.resp.call("INFO", "persistence")
        assert isinstance(text, bytes)
        return dict(line.split(":", 1) for line in text.decode().split("\r\n") if ":" in line)


def expected_oom(data_dir: Path) -> str:
    st = os.statvfs(data_dir)
    low = DiskPolicy.for_total(st.f_blocks * st.f_frsize).low_bytes
    return "OOM " + disk_full_message(low)


def fill_until_refused(node: Node) -> tuple[list[int], list[str], bytes, bytes]:
    """Beanstalk puts and Disque adds, alternating, until both doors refuse."""
    bs_ids: list[int] = []
    dq_ids: list[str] = []
    bs_refusal = dq_refusal = b""
    for _ in range(MAX_ROUNDS):
        if not bs_refusal:
            line = node.put()
            if line.startswith(b"INSERTED "):
                bs_ids.append(int(line.split()[1]))
            else:
                bs_refusal = line
        if not dq_refusal:
            reply = node.addjob_raw()
            if reply.startswith(b"+D-"):
                dq_ids.append(reply[1:-2].decode())
            else:
                dq_refusal = reply
        if bs_refusal and dq_refusal:
            return bs_ids, dq_ids, bs_refusal, dq_refusal
    raise AssertionError(f"no refusal after {MAX_ROUNDS} rounds")


def fill_with_filler(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem is full (ENOSPC)."""
    with open(path, "wb", buffering=0) as f:
        for size in (64 << 10, 4096):
            chunk = bytes(size)
            try:
                while True:
                    f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


def assert_all_there(node: Node, bs_ids: list[int], dq_ids: list[str]) -> None:
    for job_id in bs_ids:
        assert node.peek(job_id).startswith(b"FOUND %d " % job_id), job_id
    for job_id in dq_ids:
        assert node.resp.call("SHOW", job_id) is not None, job_id


def test_disk_full_refuses_adds_only_and_recovers_without_restart(
    small_fs: Path, server_factory: ServerFactory
) -> None:
    node = Node(server_factory, small_fs)
    oom = expected_oom(small_fs)
    try:
        # ---- fill the filesystem through both doors until the node refuses
        bs_ids, dq_ids, bs_refusal, dq_refusal = fill_until_refused(node)
        assert bs_refusal == OUT_OF_MEMORY
        assert dq_refusal == f"-{oom}\r\n".encode()
        assert len(bs_ids) > 100 and len(dq_ids) > 100, (len(bs_ids), len(dq_ids))
        info = node.info()
        assert info["aof_disk_full"] == "1", info
        assert int(info["aof_disk_free_bytes"]) < int(info["aof_disk_high_bytes"]), info
        assert info["aof_last_write_status"] == "ok", info  # refused before any write failed

        # ---- the gRPC door and the SDK refuse too, with the same text
        with grpc.insecure_channel(f"127.0.0.1:{node.grpc_port}") as ch:
            stub = api_pb2_grpc.QueueStub(ch)
            with pytest.raises(grpc.RpcError) as rpc:
                stub.AddJob(api_pb2.AddJobRequest(queue="q", body=b"x"), timeout=10)
            assert rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert rpc.value.details() == oom
        with Client(f"127.0.0.1:{node.grpc_port}", discover=False) as client:
            with pytest.raises(OutOfMemoryError) as sdk:
                client.add_job("q", b"x")
            assert sdk.value.message == oom
            # A batch: every job gets the error, none is added.
            batch = client.add_jobs([{"queue": "q", "body": b"y"}, {"queue": "q2", "body": b"z"}])
            assert [type(r) for r in batch] == [OutOfMemoryError, OutOfMemoryError]
            assert all(r.message == oom for r in batch if isinstance(r, OutOfMemoryError))
            assert client.qlen("q2") == 0

        # ---- reads, acks and deletes go on
        stats = node.bs_cmd(b"stats\r\n")
        assert stats.startswith(b"OK "), stats
        node.bs_in.read(int(stats.split()[1]) + 2)
        reserved = node.bs_cmd(b"reserve-with-timeout 0\r\n")
        assert reserved.startswith(b"RESERVED %d " % bs_ids[0]), reserved
        node.bs_in.read(len(BODY) + 2)
        assert node.bs_cmd(b"delete %d\r\n" % bs_ids[0]) == b"DELETED\r\n"
        assert node.bs_cmd(b"delete %d\r\n" % bs_ids[1]) == b"DELETED\r\n"
        del bs_ids[:2]
        got = node.resp.call("GETJOB", "NOHANG", "FROM", "q")
        assert isinstance(got, list) and got[0][1].decode() == dq_ids[0], got
        assert node.resp.call("ACKJOB", dq_ids[0]) == 1
        assert node.resp.call("FASTACK", dq_ids[1]) == 1
        assert node.resp.call("DELJOB", dq_ids[2]) == 1
        del dq_ids[:3]
        assert node.resp.call("SHOW", dq_ids[0]) is not None
        assert node.put() == OUT_OF_MEMORY  # still refused: those few records freed nothing

        # ---- nothing acknowledged is lost, in memory and after a restart (AOF replay)
        assert_all_there(node, bs_ids, dq_ids)
        node.restart()
        assert_all_there(node, bs_ids, dq_ids)
        assert node.put() == OUT_OF_MEMORY  # still full after the restart
        assert node.addjob_raw() == f"-{oom}\r\n".encode()

        # ---- free space by deleting jobs: the node rewrites its AOF and takes adds again
        size_full = int(node.info()["aof_current_size"])
        keep_bs, keep_dq = bs_ids[:20], dq_ids[:20]
        for job_id in bs_ids[20:]:
            assert node.bs_cmd(b"delete %d\r\n" % job_id) == b"DELETED\r\n"
        for i in range(20, len(dq_ids), 100):
            assert node.resp.call("ACKJOB", *dq_ids[i : i + 100]) == len(dq_ids[i : i + 100])
        bs_ids, dq_ids = keep_bs, keep_dq
        eventually(lambda: node.info()["aof_disk_full"] == "0", "adds taken again", 30)
        line = node.put()
        assert line.startswith(b"INSERTED "), line
        bs_ids.append(int(line.split()[1]))
        reply = node.addjob_raw()
        assert reply.startswith(b"+D-"), reply
        dq_ids.append(reply[1:-2].decode())
        assert int(node.info()["aof_current_size"]) < size_full // 4
        log = node.srv.log_text()
        assert '"aof_rewrite_for_space"' in log and '"aof_disk_ok"' in log

        # ---- a filler file fills the disk again: adds refused, deletes work
        eventually(
            lambda: int(node.info()["aof_disk_reserve_bytes"]) > 0, "the reserve made again", 30
        )
        filler = small_fs / "filler"
        fill_with_filler(filler)
        eventually(lambda: node.put() == OUT_OF_MEMORY, "adds refused (filler)", 30)
        assert node.addjob_raw() == f"-{oom}\r\n".encode()
        assert node.bs_cmd(b"delete %d\r\n" % bs_ids.pop()) == b"DELETED\r\n"
        assert node.resp.call("ACKJOB", dq_ids.pop()) == 1
        assert_all_there(node, bs_ids, dq_ids)

        # ---- the operator removes the filler: adds are taken again, no restart
        filler.unlink()
        eventually(lambda: node.put().startswith(b"INSERTED "), "adds taken again (filler)", 30)
        reply = node.addjob_raw()
        assert reply.startswith(b"+D-"), reply
        assert node.info()["aof_disk_full"] == "0"
        entered = len(re.findall(r'"event": "aof_disk_full"', node.srv.log_text()))
        left = len(re.findall(r'"event": "aof_disk_ok"', node.srv.log_text()))
        assert entered >= 2 and left >= 2, (entered, left)

        # ---- and after one more restart, every acknowledged job is still there
        node.restart()
        assert_all_there(node, bs_ids, dq_ids)
    finally:
        node.close_clients()
        node.srv.kill()


def test_a_filesystem_that_reports_no_size_takes_adds(
    sizeless_fs: Path, server_factory: ServerFactory
) -> None:
    """Zero blocks is "size unknown", not "full": every door takes adds, the node says why
    it keeps no free-space marks, and what it took survives a restart."""
    assert os.statvfs(sizeless_fs).f_blocks == 0
    node = Node(server_factory, sizeless_fs)
    try:
        bs_ids = [int(node.put().split()[1]) for _ in range(50)]
        dq_ids = []
        for _ in range(50):
            reply = node.addjob_raw()
            assert reply.startswith(b"+D-"), reply
            dq_ids.append(reply[1:-2].decode())
        with grpc.insecure_channel(f"127.0.0.1:{node.grpc_port}") as ch:
            added = api_pb2_grpc.QueueStub(ch).AddJob(
                api_pb2.AddJobRequest(queue="q", body=b"grpc", timeout_ms=5000), timeout=10
            )
        dq_ids.append(added.id)
        info = node.info()
        assert info["aof_disk_full"] == "0", info
        assert "aof_disk_size_unknown" in node.srv.log_text()
        node.restart()
        assert_all_there(node, bs_ids, dq_ids)
    finally:
        node.close_clients()
