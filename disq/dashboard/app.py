"""The dashboard's routes, mounted on the node's admin aiohttp app (disq/server/admin_http.py).

Pages (GET, HTML from the Jinja2 templates, autoescaped): ``/dashboard/`` (cluster),
``/dashboard/queues``, ``/dashboard/queue?name=Q[&node=N&state=S&cursor=C]``,
``/dashboard/job?id=ID``, ``/dashboard/dead``, ``/dashboard/schedules``,
``/dashboard/policies``; ``/dashboard/login``
(GET, POST), ``/dashboard/logout`` (POST). Live data: ``/dashboard/api/queues`` (JSON, with
the charts' history) and ``/dashboard/stream`` (server-sent events, one sample every two
seconds).
Actions: ``POST /dashboard/action`` (``action`` = pause, requeue, requeue_all, delete,
delete_all, kick, leaving, redrive), each with the CSRF token, each answered first with a
confirmation page and done only when that page's form comes back with ``confirm=yes``; each
logged (``dashboard_action``) in the node's log.

Bad input gets an error page with a status code and says what was wrong: 400 (malformed),
401 (login needed, wrong password), 403 (CSRF, read-only), 404 (no such job, queue, tube or
node), 502 (a node did not answer), 503 (too many live streams).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2
import structlog
from aiohttp import web

from disq.client.errors import DisqError
from disq.core.disque.deadletter import REDRIVE_MAX
from disq.dashboard import auth
from disq.dashboard.gather import JOB_STATES, MAX_BULK, PAGE_DEFAULT, PAGE_MAX, Gatherer
from disq.dashboard.render import (
    REASON_HEADER,
    SOURCE_HEADER,
    body_preview,
    dead_letter_origin,
    dead_letter_targets,
    fmt_age,
    header_text,
    is_job_id,
    iso_utc,
    render_body,
    sparkline_points,
)
from disq.dashboard.sampler import Sampler

if TYPE_CHECKING:
    from disq.server.metrics import MetricsHost

_log: Any = structlog.get_logger("disq.dashboard")

PREFIX = "/dashboard"
MAX_STREAMS = 16  # live event streams at once (each costs a task and a socket)
STREAM_MAX_S = 600.0  # a stream ends after this; EventSource reconnects by itself
MAX_NAME = 1024  # queue and tube names longer than this are refused
MAX_FLASH = 256  # sessions with a pending message
PAUSE_STATES = ("none", "in", "out", "all")
ACTIONS = (
    "pause", "requeue", "requeue_all", "delete", "delete_all", "kick", "leaving", "redrive",
)  # fmt: skip


class Refused(Exception):
    """Bad input: answered with an error page of ``status``, nothing changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("disq.dashboard", "templates"),
        autoescape=True,  # every template is HTML: escape everything not marked safe
    )
    env.filters["age"] = fmt_age
    env.filters["preview"] = body_preview
    env.filters["spark"] = sparkline_points
    env.filters["short"] = lambda s: str(s)[:8]
    return env


class Dashboard:
    """The pages and actions of one node's dashboard."""

    def __init__(
        self, host: MetricsHost, password: Callable[[], str | None], actions: bool
    ) -> None:
        self.host = host
        self.password = password
        self.actions_flag = actions
        self.signer = auth.Signer()
        self.gather = Gatherer(host, password)
        self.sampler = Sampler(self.gather)
        self.env = _env()
        self._static = resources.files("disq.dashboard").joinpath("static")
        self._streams = 0
        self._closing = False
        self._flash: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ mounting
    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/", self._root)
        r.add_get(PREFIX, self._root)
        # Under PREFIX: the pages and what their scripts fetch, then the forms' posts (the
        # login page's right after it: one resource for both methods).
        gets = {
            "/": self._cluster,
            "/queues": self._queues,
            "/queue": self._queue,
            "/job": self._job,
            "/dead": self._dead,
            "/schedules": self._schedules,
            "/policies": self._policies,
            "/api/queues": self._api_queues,
            "/stream": self._stream,
            "/static/{name}": self._static_file,
            "/login": self._login_form,
        }
        posts = {"/login": self._login, "/logout": self._logout, "/action": self._action}
        for path, handler in gets.items():
            r.add_get(PREFIX + path, handler)
        for path, handler in posts.items():
            r.add_post(PREFIX + path, handler)
        app.on_shutdown.append(self._on_shutdown)

    async def _on_shutdown(self, app: web.Application) -> None:
        self._closing = True
        await self.sampler.close()
        await self.gather.close()

    # ------------------------------------------------------------------ plumbing
    def _session(self, request: web.Request) -> tuple[auth.Session, bool]:
        """The request's session, or a new anonymous one (True: the cookie must be set)."""
        bind = auth.password_digest(self.password())
        s = self.signer.load(request.cookies.get(auth.COOKIE), bind=bind)
        if s is not None:
            return s, False
        return self.signer.new_session(), True

    def _set_cookie(self, resp: web.StreamResponse, s: auth.Session) -> None:
        resp.set_cookie(
            auth.COOKIE,
            self.signer.dump(s, auth.password_digest(self.password())),
            max_age=auth.SESSION_TTL_S,
            path=PREFIX,
            httponly=True,
            samesite="Strict",
        )

    def _render(
        self,
        request: web.Request,
        template: str,
        status: int = 200,
        session: tuple[auth.Session, bool] | None = None,
        **ctx: Any,
    ) -> web.Response:
        s, new = session if session is not None else self._session(request)
        pw = self.password()
        refusal = auth.action_refusal(s, pw, self.actions_flag, request.remote)
        flash = self._flash.pop(s.sid, None)
        ctx.setdefault("page", "")
        html = self.env.get_template(template).render(
            prefix=PREFIX,
            csrf=self.signer.csrf_token(s),
            logged_in=s.authenticated,
            has_password=bool(pw),
            can_act=refusal is None,
            readonly_reason=refusal,
            node_id=self.gather.self_id(),
            flash=flash,
            **ctx,
        )
        resp = web.Response(status=status, text=html, content_type="text/html")
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"
        )
        if new:
            self._set_cookie(resp, s)
        return resp

    def _error(
        self,
        request: web.Request,
        status: int,
        message: str,
        session: tuple[auth.Session, bool] | None = None,
    ) -> web.Response:
        return self._render(
            request,
            "error.html",
            status=status,
            session=session,
            status_code=status,
            message=message,
        )

    def _viewer(self, request: web.Request) -> tuple[auth.Session, bool]:
        """The session of a request that may see pages; else a redirect to the login."""
        s = self._session(request)
        if not auth.may_view(s[0], self.password()):
            raise web.HTTPSeeOther(PREFIX + "/login?next=" + _quote(request.path_qs))
        return s

    def _flash_set(self, s: auth.Session, message: str) -> None:
        self._flash[s.sid] = message
        while len(self._flash) > MAX_FLASH:
            self._flash.popitem(last=False)

    # ------------------------------------------------------------------ login
    async def _root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(PREFIX + "/")

    async def _login_form(self, request: web.Request) -> web.Response:
        s = self._session(request)
        return self._render(
            request, "login.html", session=s, next=_safe_next(request.query.get("next")), error=None
        )

    async def _login(self, request: web.Request) -> web.Response:
        s = self._session(request)
        form = await _form(request)
        nxt = _safe_next(form.get("next"))
        if not self.signer.check_csrf(None if s[1] else s[0], form.get("csrf")):
            return self._error(
                request, 403, "missing or invalid CSRF token: reload the login page", s
            )
        pw = self.password()
        if not pw:
            return self._render(
                request, "login.html", status=400, session=s, next=nxt,
                error="this node has no password (requirepass): there is nothing to log in to",
            )  # fmt: skip
        if not auth.password_ok(form.get("password"), pw):
            _log.warning("dashboard_login_failed", remote=request.remote)
            await asyncio.sleep(0.2)  # a little friction for guessers
            return self._render(
                request, "login.html", status=401, session=s, next=nxt, error="wrong password"
            )
        _log.info("dashboard_login", remote=request.remote)
        fresh = self.signer.new_session(authenticated=True)
        resp = web.HTTPSeeOther(nxt)
        self._set_cookie(resp, fresh)
        raise resp

    async def _logout(self, request: web.Request) -> web.Response:
        s = self._session(request)
        form = await _form(request)
        if not self.signer.check_csrf(None if s[1] else s[0], form.get("csrf")):
            return self._error(request, 403, "missing or invalid CSRF token", s)
        resp = web.HTTPSeeOther(PREFIX + "/login")
        self._set_cookie(resp, self.signer.new_session())
        raise resp

    # ------------------------------------------------------------------ pages
    async def _cluster(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        if not self.gather.has_cluster:
            return self._render(request, "cluster.html", session=s, nodes=[], page="cluster")
        nodes = await self.gather.cluster()
        return self._render(request, "cluster.html", session=s, nodes=nodes, page="cluster")

    async def _queues(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        self.sampler.want()
        if self.sampler.samples == 0:
            await self.sampler.wait_next(5.0)
        snap = self.sampler.snapshot(with_history=True)
        return self._render(request, "queues.html", session=s, snap=snap, page="queues")

    async def _queue(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        q = request.query
        try:
            name = _name(q.get("name"), "queue")
            state = q.get("state", "")
            if state and state not in JOB_STATES:
                raise Refused(400, f"unknown state {state!r}: one of {', '.join(JOB_STATES)}")
            cursor = _int(q.get("cursor", "0"), "cursor", 0, 2**64 - 1)
            count = _int(q.get("count", str(PAGE_DEFAULT)), "count", 1, PAGE_MAX)
            nodes = self.gather.reachable()
            node = _pick_node(nodes, q.get("node"))
        except Refused as exc:
            return self._error(request, exc.status, exc.message, s)
        try:
            jobs, next_cursor = await self.gather.queue_page(
                node, name, (state,) if state else (), cursor, count
            )
            stat = await self.gather.client(node.addr).qstat(name)
        except (DisqError, OSError) as exc:
            return self._error(request, 502, f"node {node.short} did not answer: {exc}", s)
        if stat is None and not jobs and cursor == 0:
            known = await self.gather.cluster_queue_names()
            if name not in known:
                return self._error(request, 404, f"no queue named {name!r} on any node", s)
        return self._render(
            request, "queue.html", session=s, page="queues", name=name, state=state,
            states=JOB_STATES, nodes=nodes, node=node, jobs=jobs, cursor=cursor,
            next_cursor=next_cursor, count=count, stat=stat, origin=self._origin(name),
        )  # fmt: skip

    async def _job(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        # A "+" of an id pasted into a URL unquoted arrives as a space.
        job_id = request.query.get("id", "").strip().replace(" ", "+")
        if not job_id:
            return self._error(request, 400, "which job? give its id: /dashboard/job?id=D-...", s)
        if not is_job_id(job_id):
            return self._error(
                request, 400, f"{job_id[:100]!r} is not a job id (D-<node8>-<24 chars>-<ttl4>)", s
            )
        story = await self.gather.job_story(job_id)
        if not story.found:
            return self._error(request, 404, f"job {job_id} is not known to any node", s)
        body = render_body(story.body) if story.body is not None else None
        result = render_body(story.result) if story.result is not None else None
        queue = next((c.info["queue"] for c in story.copies if c.info), "")
        return self._render(
            request, "job.html", session=s, page="job", story=story, body=body, queue=queue,
            origin=self._origin(queue) if queue else None, result=result,
        )  # fmt: skip

    def _origin(self, queue: str) -> str | None:
        """The queue a dead-letter queue's jobs came from: the one queue whose policy names it
        as DEADLETTER, else by its name (see dead_letter_origin); None: not a dead-letter
        queue."""
        origins = dead_letter_targets(self.gather.policies() or []).get(queue)
        if origins is not None:
            return origins[0] if len(origins) == 1 else ""
        return dead_letter_origin(queue)

    async def _dead(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        by_policy = dead_letter_targets(self.gather.policies() or [])
        names = await self.gather.cluster_queue_names()
        dead: dict[str, tuple[str, list[str]]] = {}
        for n in names:
            origin = dead_letter_origin(n)
            if origin is not None:
                dead[n] = (origin, [])
        for n, origins in by_policy.items():  # listed even while empty: the policy names it
            dead[n] = (origins[0] if len(origins) == 1 else "", origins)
        groups = []
        for name in sorted(dead):
            origin, origins = dead[name]
            jobs, counts = await asyncio.gather(
                self.gather.dead_letter_jobs(name, PAGE_DEFAULT), self.gather.queue_counts(name)
            )
            rows = [
                {
                    "job": j,
                    "node": n,
                    "source": header_text(j.headers, SOURCE_HEADER),
                    "reason": header_text(j.headers, REASON_HEADER),
                }
                for j, n in jobs
            ]
            total = sum(c for _, c in counts if c is not None)
            groups.append(
                {"name": name, "origin": origin, "origins": origins, "jobs": rows,
                 "counts": counts, "total": total}
            )  # fmt: skip
        return self._render(request, "dead.html", session=s, page="dead", groups=groups)

    async def _schedules(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        got = await self.gather.schedules()
        rows, total = got if got is not None else ([], 0)
        return self._render(
            request, "schedules.html", session=s, page="schedules", schedules=rows,
            total=total, has_scheduler=got is not None, now_iso=iso_utc(self.host.wall_ms() / 1000),
        )  # fmt: skip

    async def _policies(self, request: web.Request) -> web.Response:
        s = self._viewer(request)
        rows = self.gather.policies()
        return self._render(
            request, "policies.html", session=s, page="policies", policies=rows or [],
            has_policies=rows is not None,
        )  # fmt: skip

    # ------------------------------------------------------------------ live data
    async def _api_queues(self, request: web.Request) -> web.Response:
        s, _ = self._session(request)
        if not auth.may_view(s, self.password()):
            return web.json_response({"error": "log in first"}, status=401)
        self.sampler.want()
        if self.sampler.samples == 0:
            await self.sampler.wait_next(5.0)
        resp = web.Response(body=self.sampler.api_json(), content_type="application/json")
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        s, _ = self._session(request)
        if not auth.may_view(s, self.password()):
            return web.Response(status=401, text="log in first\n")
        if self._streams >= MAX_STREAMS:
            return web.Response(status=503, text="too many live dashboards open on this node\n")
        self._streams += 1
        try:
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
            )
            await resp.prepare(request)
            await resp.write(b"retry: 2000\n\n")
            ends = time.monotonic() + STREAM_MAX_S
            while not self._closing and time.monotonic() < ends:
                self.sampler.want()
                got = await self.sampler.wait_next(15.0)
                if self._closing:
                    break
                if got:
                    await resp.write(self.sampler.frame())  # the same bytes for every stream
                else:
                    await resp.write(b": idle\n\n")
            return resp
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        finally:
            self._streams -= 1

    async def _static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        types = {".js": "text/javascript", ".css": "text/css"}
        ext = name[name.rfind(".") :] if "." in name else ""
        if "/" in name or name.startswith(".") or ext not in types:
            raise web.HTTPNotFound(text="no such file\n")
        f = self._static.joinpath(name)
        if not f.is_file():
            raise web.HTTPNotFound(text="no such file\n")
        resp = web.Response(body=f.read_bytes(), content_type=types[ext])
        resp.headers["Cache-Control"] = "max-age=300"
        return resp

    # ------------------------------------------------------------------ actions
    async def _action(self, request: web.Request) -> web.Response:
        s = self._session(request)
        form = await _form(request)
        if not auth.may_view(s[0], self.password()):
            return self._error(request, 401, "log in first: actions need the node's password", s)
        if not self.signer.check_csrf(None if s[1] else s[0], form.get("csrf")):
            _log.warning("dashboard_csrf_refused", remote=request.remote, action=form.get("action"))
            return self._error(
                request, 403, "missing or invalid CSRF token: the action was not done", s
            )
        refusal = auth.action_refusal(s[0], self.password(), self.actions_flag, request.remote)
        if refusal is not None:
            return self._error(request, 403, refusal, s)
        nxt = _safe_next(form.get("next"))
        try:
            what, run = self._plan(form)
        except Refused as exc:
            return self._error(request, exc.status, exc.message, s)
        if form.get("confirm") != "yes":
            fields = {k: v for k, v in form.items() if k not in ("csrf", "confirm")}
            return self._render(
                request, "confirm.html", session=s, page="", what=what, fields=fields, next=nxt
            )
        log_fields = {k: v for k, v in form.items() if k not in ("csrf", "confirm", "next")}
        try:
            result = await run()
        except Refused as exc:
            _log.info(
                "dashboard_action_refused", remote=request.remote, error=exc.message, **log_fields
            )
            return self._error(request, exc.status, exc.message, s)
        except (DisqError, LookupError, RuntimeError, OSError, TimeoutError) as exc:
            _log.warning(
                "dashboard_action_failed", remote=request.remote, error=str(exc), **log_fields
            )
            return self._error(request, 502, f"{what}: failed: {exc}", s)
        _log.info("dashboard_action", remote=request.remote, result=result, **log_fields)
        self._flash_set(s[0], f"{what}: {result}")
        raise web.HTTPSeeOther(nxt)

    def _plan(self, form: dict[str, str]) -> tuple[str, Callable[[], Any]]:
        """The action a form asks for: what it will do (for the confirmation page) and the
        coroutine function doing it. Refused (400/404) for bad input."""
        action = form.get("action", "")
        g = self.gather
        if action not in ACTIONS:
            raise Refused(400, f"unknown action {action[:50]!r}")
        if action == "pause":
            queue = _name(form.get("queue"), "queue")
            state = form.get("state", "")
            if state not in PAUSE_STATES:
                raise Refused(400, f"pause state must be one of {', '.join(PAUSE_STATES)}")

            async def pause() -> str:
                return f"now {await g.pause(queue, state)}"

            verb = "resume" if state == "none" else f"pause ({state})"
            return f"{verb} queue {queue!r} on every node", pause
        if action in ("requeue", "delete"):
            job_id = form.get("job", "")
            if not is_job_id(job_id):
                raise Refused(400, f"{job_id[:100]!r} is not a job id")
            if action == "delete":

                async def delete() -> str:
                    n = await g.delete([job_id])
                    if n == 0:
                        raise Refused(404, f"job {job_id} is not known to its node")
                    return "deleted"

                return f"delete job {job_id}", delete
            to = _name(form.get("to"), "target queue")

            async def requeue() -> str:
                return f"added as {await g.requeue(job_id, to)}"

            return f"requeue job {job_id} into {to!r} (add its body there, then ack it)", requeue
        if action in ("requeue_all", "delete_all"):
            queue = _name(form.get("queue"), "queue")
            to = _name(form.get("to"), "target queue") if action == "requeue_all" else ""

            async def bulk() -> str:
                jobs = await g.dead_letter_jobs(queue, MAX_BULK)
                done = 0
                for j, _ in jobs:
                    if to:
                        await g.requeue(j.id, to)
                        done += 1
                    else:
                        done += await g.delete([j.id])
                return f"{done} job(s)"

            if to:
                return f"requeue every queued job of {queue!r} (up to {MAX_BULK}) into {to!r}", bulk
            return f"delete every queued job of {queue!r} (up to {MAX_BULK})", bulk
        if action == "redrive":
            return self._plan_redrive(form)
        if action == "kick":
            tube = _name(form.get("tube"), "tube")
            if tube not in self.host.beanstalk.tubes:
                raise Refused(404, f"no tube named {tube!r} on this node")

            async def kick() -> str:
                return f"{g.kick(tube, MAX_BULK)} job(s) kicked"

            return f"kick up to {MAX_BULK} buried jobs of tube {tube!r} on this node", kick
        # leaving
        node_arg = form.get("node", "")
        value = form.get("value", "yes")
        if value not in ("yes", "no"):
            raise Refused(400, "value must be yes or no")
        node = g.member(node_arg) if len(node_arg) >= 8 else None
        if node is None:
            raise Refused(404, f"no node {node_arg[:40]!r} in this node's view")

        async def leaving() -> str:
            return await g.set_leaving(node, value == "yes")

        return (
            f"CLUSTER LEAVING {value} on node {node.short} ({node.host}:{node.resp_port})",
            leaving,
        )

    def _plan_redrive(self, form: dict[str, str]) -> tuple[str, Callable[[], Any]]:
        """QREDRIVE of a dead-letter queue on every node: back to each job's source queue (or
        into ``to``), at most ``count`` jobs per node."""
        queue = _name(form.get("queue"), "dead-letter queue")
        to = _name(form["to"], "target queue") if form.get("to") else ""
        count_arg = form.get("count", "").strip()
        count = _int(count_arg, "count", 1, REDRIVE_MAX) if count_arg else 0
        if to == queue:
            raise Refused(400, f"redrive {queue!r} into itself: give another queue, or none")
        g = self.gather

        async def redrive() -> str:
            moved, failed = await g.redrive(queue, to, count)
            said = f"redrove {moved} jobs"
            if failed:
                said += "; not asked: " + ", ".join(f"node {k} ({v})" for k, v in failed.items())
            return said

        where = f"into {to!r}" if to else "back to their source queues"
        limit = f", at most {count} per node" if count else ""
        return f"redrive the dead letters of {queue!r} on every node {where}{limit}", redrive


# ---------------------------------------------------------------------- helpers
async def _form(request: web.Request) -> dict[str, str]:
    if request.content_length is not None and request.content_length > 64 * 1024:
        raise web.HTTPRequestEntityTooLarge(max_size=64 * 1024, actual_size=request.content_length)
    data = await request.post()
    return {k: v for k, v in data.items() if isinstance(v, str)}


def _name(value: str | None, what: str) -> str:
    if not value:
        raise Refused(400, f"which {what}? none given")
    if len(value) > MAX_NAME:
        raise Refused(400, f"{what} name longer than {MAX_NAME} characters")
    return value


def _int(value: str, what: str, lo: int, hi: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise Refused(400, f"{what} must be a number, not {value[:40]!r}") from None
    if not lo <= n <= hi:
        raise Refused(400, f"{what} must be between {lo} and {hi}")
    return n


def _pick_node(nodes: list[Any], arg: str | None) -> Any:
    if not nodes:
        raise Refused(502, "no reachable node (is the gRPC port on?)")
    if not arg:
        return nodes[0]
    for n in nodes:
        if n.node_id.startswith(arg) and len(arg) >= 8:
            return n
    raise Refused(404, f"no reachable node {arg[:40]!r}")


def _safe_next(value: str | None) -> str:
    """Only our own pages: no open redirect."""
    if value and value.startswith(PREFIX + "/") and "//" not in value and "\\" not in value:
        return value
    return PREFIX + "/"


def _quote(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")
