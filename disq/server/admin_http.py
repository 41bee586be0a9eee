"""The HTTP admin port: ``GET /metrics`` (Prometheus) and ``GET /healthz``, an aiohttp app on
the node's own loop.

Off unless asked for (``--metrics-port`` in flag mode; ``metrics-port``, default ``port +
2000``, in config-file mode). When the node has a ``requirepass``, ``/metrics`` wants it:
HTTP Basic auth (any user name) or ``Authorization: Bearer <password>``; 401 otherwise.
``/healthz`` never asks. The collector (disq/server/metrics.py) reads the node's state only
when scraped.

The same app serves the web dashboard under ``/dashboard/`` (disq/dashboard/, mounted here):
same port, same password (a login form and a session cookie instead of the Authorization
header), read-only unless there is a password or ``--dashboard-actions``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import socket
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from disq.dashboard import mount as mount_dashboard
from disq.server.event_metrics import NodeMetrics
from disq.server.metrics import MetricsHost, NodeCollector

_log: Any = structlog.get_logger("disq.admin_http")


def _password(host: MetricsHost) -> str | None:
    """The node's current requirepass (CONFIG SET requirepass applies at once)."""
    cluster = host.cluster
    if cluster is None:
        return None
    services = getattr(cluster, "services", None)
    if services is not None:
        pw = getattr(services, "requirepass", None)
        return pw or None
    return cluster.settings.requirepass or None


def authorized(header: str | None, password: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``password`` (Basic, any user; Bearer)."""
    if not password:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "bearer":
        given = value
    elif scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        _, sep, given = decoded.partition(":")
        if not sep:
            return False
    else:
        return False
    return hmac.compare_digest(given.encode(), password.encode())


class AdminServer:
    """The aiohttp app, its runner and site; :attr:`port` is the bound port."""

    def __init__(self, host: MetricsHost, metrics: NodeMetrics) -> None:
        self.host = host
        self.metrics = metrics
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(host, metrics))
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self.dashboard = mount_dashboard(
            app,
            host,
            password=lambda: _password(host),
            actions=bool(getattr(host.config, "dashboard_actions", False)),
        )
        self.app = app
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start_on(self, sock: socket.socket) -> None:
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        self._runner = runner
        bind, port = sock.getsockname()[:2]
        self.port = int(port)
        _log.info("metrics_listening", address=f"{bind}:{self.port}")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        if not authorized(request.headers.get("Authorization"), _password(self.host)):
            return web.Response(
                status=401,
                text="authentication required\n",
                headers={"WWW-Authenticate": 'Basic realm="disq"'},
            )
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        if self.host.aof_error is not None:
            return web.Response(status=503, text=f"aof: {self.host.aof_error}\n")
        return web.Response(text="ok\n")


async def start_admin(host: MetricsHost, sock: socket.socket) -> AdminServer:
    """Serve the admin port on ``sock`` (bound and listening already: the runtime binds it
    before the client ports serve, so a busy port fails the start as before, and imports
    this module, aiohttp's weight, only afterwards) and count what the metrics need counted
    (event drain, fsyncs)."""
    metrics = NodeMetrics()
    metrics.host = host
    server = AdminServer(host, metrics)
    await server.start_on(sock)
    host.metrics = metrics
    host.aof.on_fsync = metrics.on_fsync
    return server
