"""Seeing a client hang up while its socket is not being read.

A door stops reading a connection whose client does not read its replies (or pipelines too
much); asyncio then does not notice the client going away, and whatever the connection holds
(reserved jobs, a blocked GETJOB) would wait. Both TCP doors poll for the hang-up instead,
as beanstalkd asks epoll for it.
"""

from __future__ import annotations

import asyncio
import select

HANGUP_POLL_S = 0.2
_HANGUP = select.POLLRDHUP | select.POLLHUP | select.POLLERR


def hung_up(transport: asyncio.BaseTransport) -> bool:
    """True (and the transport aborted) if the peer has hung up."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), _HANGUP)
    if poller.poll(0):
        transport.abort()  # type: ignore[attr-defined]
        return True
    return False
