#!/usr/bin/env python3
"""Throughput probe of the node-to-node link (disq/server/peer_link.py), two processes.

The sender (this process) streams ReplJob messages with BODY-byte bodies in batches of BATCH
per loop iteration to a receiver in a child process. The receiver answers every frame with
one GotJob whose id is its running count (or, with --reply-each, every job with its own
GotJob, as a replica confirming copies would). The sender keeps at most WINDOW batches
unacknowledged, so the figure is what the link sustains without dropping, not how fast a
queue can be overrun.

    .venv/bin/python scripts/probe_peer_link.py [--messages 200000] [--batch 1000]
        [--window 8] [--body 100] [--reply-each] [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from disq.core.messages import GotJob, JobData, Message, ReplJob  # noqa: E402
from disq.logging import configure_logging  # noqa: E402
from disq.server.peer_link import PeerLinks  # noqa: E402

SENDER = "5" * 40
RECEIVER = "7" * 40


def _run(main: Coroutine[Any, Any, None], loop: str) -> None:
    configure_logging()  # to stderr: the receiver's stdout carries its port to the sender
    if loop == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


async def receiver(sender_port: int, reply_each: bool) -> None:
    links: PeerLinks
    count = 0

    def on_messages(sender: str, msgs: list[Message]) -> None:
        nonlocal count
        jobs = [m for m in msgs if isinstance(m, ReplJob)]
        count += len(jobs)
        if reply_each:
            for m in jobs:
                links.send(sender, GotJob(m.job.id))
        else:
            links.send(sender, GotJob(str(count)))

    links = PeerLinks(RECEIVER, on_messages, max_queued_frames=4096)
    port = await links.start()
    links.set_address(SENDER, "127.0.0.1", sender_port)
    if not await links.wait_link_up(SENDER, 10):
        raise SystemExit("receiver: no link to the sender")
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    # Until the parent closes our stdin.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await links.close()


async def sender(args: argparse.Namespace) -> None:
    acked = 0
    reply_each = args.reply_each
    progress = asyncio.Event()

    def on_messages(_sender: str, msgs: list[Message]) -> None:
        nonlocal acked
        if reply_each:
            acked += len(msgs)
        else:
            acked = max(acked, int(msgs[-1].job_id))  # type: ignore[union-attr]
        progress.set()

    links = PeerLinks(SENDER, on_messages, max_queued_frames=4096)
    port = await links.start()
    child = subprocess.Popen(
        [sys.executable, __file__, "--role", "receiver", "--sender-port", str(port)]
        + (["--reply-each"] if reply_each else [])
        + ["--loop", args.loop],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, child.stdout.readline)
        links.set_address(RECEIVER, "127.0.0.1", int(line))
        if not await links.wait_link_up(RECEIVER, 10):
            raise SystemExit("sender: no link to the receiver")

        body = b"b" * args.body
        n, batch, window = args.messages, args.batch, args.window * args.batch
        jobs = [
            ReplJob(JobData(f"D-{i:08x}-{i:024x}-0e10", "probe", body, 2, i, 0, 300, 3600))
            for i in range(n)
        ]
        sent = 0
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        while acked < n:
            if sent < n and sent - acked < window:
                for job in jobs[sent : sent + batch]:
                    links.send(RECEIVER, job)
                sent = min(n, sent + batch)
                await asyncio.sleep(0)  # one iteration: one frame
            else:
                progress.clear()
                async with asyncio.timeout(30):
                    await progress.wait()
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        st = links.stats()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)
        await links.close()
    print(
        f"peer link probe ({args.loop}, 2 processes): {n} ReplJob messages, {args.body}-byte "
        f"bodies, {batch} per frame, window {args.window} frames"
        + (", every job answered with GotJob" if reply_each else ", one GotJob per frame")
    )
    print(
        f"  {n / elapsed:,.0f} messages/s ({elapsed:.2f} s; sender CPU {cpu / elapsed:.0%}); "
        f"frames sent {st['frames_sent']}, dropped {st['frames_dropped']}, "
        f"acks received {st['messages_received']}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000, help="messages per loop iteration")
    p.add_argument("--window", type=int, default=8, help="unacknowledged batches allowed")
    p.add_argument("--body", type=int, default=100, help="job body size in bytes")
    p.add_argument("--reply-each", action="store_true", help="answer every job with a GotJob")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    p.add_argument(
        "--role", choices=("sender", "receiver"), default="sender", help=argparse.SUPPRESS
    )
    p.add_argument("--sender-port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "receiver":
        _run(receiver(args.sender_port, args.reply_each), args.loop)
    else:
        _run(sender(args), args.loop)


if __name__ == "__main__":
    main()
