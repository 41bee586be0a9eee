"""The web dashboard, served by every node on its admin HTTP port (docs: README "Dashboard").

:func:`mount` adds its routes to the admin port's aiohttp app; the pages gather the other
nodes through the client SDK and read this node's own state in the process (gather.py),
sample the queues while someone looks (sampler.py) and render Jinja2 templates with
autoescaping (templates/); the browser side is a small hand-written script and stylesheet
(static/), no build step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from disq.dashboard.app import Dashboard
    from disq.server.metrics import MetricsHost


def mount(
    app: web.Application, host: MetricsHost, password: Callable[[], str | None], actions: bool
) -> Dashboard:
    """Add the dashboard's routes to ``app``; ``password`` reads the node's requirepass."""
    from disq.dashboard.app import Dashboard

    dash = Dashboard(host, password, actions)
    dash.install(app)
    return dash
