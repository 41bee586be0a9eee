"""The dashboard over plain HTTP against real nodes: bad input gets a clear answer (status and
message) and changes nothing; login, CSRF and read-only mode; the Schedules page."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import re
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerFactory
from dashboard_cluster import DashNode, start_cluster

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eventually import eventually  # noqa: E402

from disq.client.aio import AsyncClient  # noqa: E402
from disq.client.sync import Client  # noqa: E402
from disq.core.disque.deadletter import REDRIVE_MAX  # noqa: E402

PASSWORD = "pw-http"


class Browser:
    """urllib with a cookie jar; no redirects followed unless asked."""

    def __init__(self) -> None:
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def req(self, url: str, data: dict[str, str] | None = None) -> tuple[int, str]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        try:
            with self.opener.open(urllib.request.Request(url, data=body), timeout=15) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    @staticmethod
    def csrf(html: str) -> str:
        m = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
        assert m, "no CSRF token in the page"
        return m.group(1)


def message(html: str) -> str:
    m = re.search(r'id="error-message">([^<]*)<', html)
    return m.group(1) if m else ""


@pytest.fixture
def pw_cluster(server_factory: ServerFactory) -> list[DashNode]:
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    return start_cluster(server_factory, 2, password=PASSWORD)


def test_login_csrf_and_bad_input(pw_cluster: list[DashNode]) -> None:
    n0 = pw_cluster[0]
    b = Browser()
    # Pages want a login; the JSON API and the stream say 401.
    status, html = b.req(n0.url + "/queues")
    assert status == 200 and 'id="login-form"' in html  # redirected to the form
    assert b.req(n0.url + "/api/queues")[0] == 401
    assert b.req(n0.url + "/stream")[0] == 401
    token = b.csrf(html)
    # Wrong password: 401, still logged out.
    status, html = b.req(n0.url + "/login", {"csrf": token, "password": "nope"})
    assert status == 401 and "wrong password" in html
    assert b.req(n0.url + "/api/queues")[0] == 401
    # A login without the token is refused even with the right password.
    status, html = b.req(n0.url + "/login", {"password": PASSWORD})
    assert status == 403 and "CSRF" in message(html)
    status, html = b.req(n0.url + "/login", {"csrf": token, "password": PASSWORD})
    assert status == 200 and 'id="nodes"' in html
    token = b.csrf(html)

    with Client(n0.grpc_addr, password=PASSWORD) as c:
        job = c.add_job("<b>q</b>", b"<script>alert(1)</script>\x00\xff", replicate=2)
        # Unknown job id, malformed job id.
        status, html = b.req(n0.url + "/job?id=D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
        assert status == 404 and "not known to any node" in message(html)
        status, html = b.req(n0.url + "/job?id=" + urllib.parse.quote("<svg/onload=alert(1)>"))
        assert status == 400 and "&lt;svg/onload=alert(1)&gt;" in html and "<svg/onload" not in html
        # A queue name with markup: escaped, found.
        status, html = b.req(n0.url + "/queue?name=" + urllib.parse.quote("<b>q</b>"))
        assert status == 200 and "&lt;b&gt;q&lt;/b&gt;" in html and "<b>q</b>" not in html
        status, html = b.req(n0.url + "/queue?name=" + urllib.parse.quote("<i>none</i>"))
        assert status == 404 and "&lt;i&gt;none&lt;/i&gt;" in html

        # The live numbers say which node holds the queue (a row per node); its page there
        # lists the job (one JSCAN page through the SDK's scan_page).
        def holders() -> list[str]:
            status, text = b.req(n0.url + "/api/queues")
            assert status == 200
            rows = [q for q in json.loads(text)["queues"] if q["name"] == "<b>q</b>"]
            return list(rows[0]["nodes"]) if rows and rows[0]["depth"] == 1 else []

        eventually(lambda: len(holders()) == 1, "the queue's row on the node holding it")
        (holder,) = holders()
        status, html = b.req(
            n0.url + "/queue?name=" + urllib.parse.quote("<b>q</b>") + "&node=" + holder
        )
        assert status == 200 and job in html
        # A body with HTML and binary: shown as a hex dump, escaped.
        status, html = b.req(n0.url + "/job?id=" + urllib.parse.quote(job))
        assert status == 200 and "<script>alert" not in html
        assert 'class="body hex"' in html and "3c 73 63 72 69 70 74" in html

        # A forged action (no token, a wrong token): 403, nothing paused.
        form = {"action": "pause", "queue": "<b>q</b>", "state": "all", "confirm": "yes"}
        status, html = b.req(n0.url + "/action", form)
        assert status == 403 and "CSRF" in message(html)
        status, html = b.req(n0.url + "/action", {**form, "csrf": "0" * 64})
        assert status == 403
        assert c.pause("<b>q</b>") == "none"
        # Without confirm=yes: a confirmation page, nothing done.
        status, html = b.req(n0.url + "/action", {**form, "csrf": token, "confirm": ""})
        assert status == 200 and 'id="confirm-yes"' in html
        assert c.pause("<b>q</b>") == "none"
        # Bad arguments: 400 / 404, nothing done.
        status, html = b.req(n0.url + "/action", {**form, "csrf": token, "state": "sideways"})
        assert status == 400 and "pause state" in message(html)
        status, html = b.req(
            n0.url + "/action", {"action": "delete", "job": "nope", "csrf": token, "confirm": "yes"}
        )
        assert status == 400
        status, html = b.req(
            n0.url + "/action", {"action": "kick", "tube": "ghost", "csrf": token, "confirm": "yes"}
        )
        assert status == 404
        status, html = b.req(n0.url + "/action", {"action": "rm -rf", "csrf": token})
        assert status == 400 and "unknown action" in message(html)
        # The real thing, confirmed: paused everywhere, logged.
        status, html = b.req(n0.url + "/action", {**form, "csrf": token})
        assert status == 200 and "now all" in html
        assert c.pause("<b>q</b>") == "all"
        assert "dashboard_action" in n0.srv.log_text()
        # Another session's token does not work for this one.
        other = Browser()
        _, login = other.req(n0.url + "/login")
        other_token = other.csrf(login)
        status, _ = b.req(n0.url + "/action", {**form, "state": "none", "csrf": other_token})
        assert status == 403 and c.pause("<b>q</b>") == "all"


def test_read_only_without_a_password(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    (n0,) = start_cluster(server_factory, 1)
    b = Browser()
    status, html = b.req(n0.url + "/")
    assert status == 200 and 'id="readonly"' in html and "Leave" not in html
    token = b.csrf(b.req(n0.url + "/login")[1])  # a valid token of this session
    with Client(n0.grpc_addr) as c:
        c.add_job("ro", "x", replicate=1)
        form = {"action": "pause", "queue": "ro", "state": "in", "confirm": "yes", "csrf": token}
        status, html = b.req(n0.url + "/action", form)
        assert status == 403 and "read-only" in message(html)
        assert c.pause("ro") == "none"
    # Static files: only the known kinds, no path tricks.
    assert b.req(n0.url + "/static/dash.js")[0] == 200
    assert b.req(n0.url + "/static/..%2Fapp.py")[0] == 404


def test_actions_from_loopback_with_the_flag(server_factory: ServerFactory) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    (n0,) = start_cluster(server_factory, 1, "--dashboard-actions")
    b = Browser()
    _, html = b.req(n0.url + "/")
    assert 'id="readonly"' not in html
    token = b.csrf(b.req(n0.url + "/login")[1])
    with Client(n0.grpc_addr) as c:
        c.add_job("rw", "x", replicate=1)
        form = {"action": "pause", "queue": "rw", "state": "in", "confirm": "yes", "csrf": token}
        status, _ = b.req(n0.url + "/action", form)
        assert status == 200 and c.pause("rw") == "in"


def test_scan_page(pw_cluster: list[DashNode]) -> None:
    """The SDK's one-page JSCAN: per node (a cursor is one node's), pages joined to the end."""
    addrs = [n.grpc_addr for n in pw_cluster]
    with Client(addrs[0], password=PASSWORD) as c:
        ids = {c.add_job("scanned", f"job {i}", replicate=1) for i in range(5)}

    async def scan() -> tuple[set[str], set[str]]:
        found: set[str] = set()
        async with AsyncClient(addrs[0], password=PASSWORD) as ac:
            for addr in addrs:
                cursor, pages = 0, 0
                while True:
                    cursor, jobs = await ac.scan_page(
                        cursor, queue="scanned", states=("queued",), count=2, node=addr
                    )
                    found.update(j.id for j in jobs)
                    assert all(j.queue == "scanned" and j.state == "queued" for j in jobs)
                    pages += 1
                    if cursor == 0:
                        break
                    assert pages < 100
        async with AsyncClient(addrs[1], password=PASSWORD, discover=False) as one:
            _, on_one = await one.scan_page(queue="scanned", count=100)  # that node's only
        return found, {j.id for j in on_one}

    found, on_one = asyncio.run(scan())
    assert found == ids
    assert on_one <= ids
    # The blocking client's scan_page passes the same options through.
    blocking: set[str] = set()
    with Client(addrs[0], password=PASSWORD) as c:
        for addr in addrs:
            cursor = 0
            while True:
                cursor, jobs = c.scan_page(cursor, queue="scanned", count=100, node=addr)
                blocking.update(j.id for j in jobs)
                if cursor == 0:
                    break
    assert blocking == ids


def resp_line(port: int, *args: str) -> str:
    """One RESP command; its reply's first line (``+OK``, ``-ERR ...``, ``:1``)."""
    req = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(req)
        f = sock.makefile("rb")
        return f.readline().decode(errors="replace").rstrip("\r\n")


def test_schedules_page(server_factory: ServerFactory) -> None:
    """No schedule: the page says so. A schedule added on one node (SCHEDULE ADD over RESP) is
    listed on the other's page, escaped, with its next fire time and, once it ticked, its last
    job; the tick counters move on /metrics."""
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    n0, n1 = start_cluster(server_factory, 2)
    b = Browser()
    status, html = b.req(n1.url + "/schedules")
    assert status == 200 and 'id="no-schedules"' in html and 'id="nav-schedules"' in html
    name = "<b>tick</b>"
    reply = resp_line(n0.resp, "SCHEDULE", "ADD", name, "@every 1s", "sq", "x", "REPLICATE", "2")
    if reply.startswith("-ERR unknown command"):
        pytest.skip("needs SCHEDULE (the RESP command is not on this branch)")
    assert reply == "+OK", reply

    def listed() -> str | None:
        status, html = b.req(n1.url + "/schedules")
        assert status == 200
        row = re.search(r'<tr class="schedule"[^>]*>(.*?)</tr>', html, re.S)
        return row.group(1) if row and "D-" in row.group(1) else None

    eventually(lambda: listed() is not None, "the schedule listed with its last job")
    row = listed()
    assert row is not None
    assert "&lt;b&gt;tick&lt;/b&gt;" in row and "<b>tick</b>" not in row
    assert "@every 1s" in row and ">UTC<" in row and ">sq<" in row
    assert re.search(r'<td class="next"[^>]*><time datetime="\d{4}-\d\d-\d\dT[\d:]+Z">', row)
    state = re.search(r'<span class="state"[^>]*>([^<]*)<', row)
    assert state and state.group(1) in ("queued", "active", "wait-repl", "acked", "gone")

    def fired() -> float:
        total = 0.0
        for n in (n0, n1):
            with urllib.request.urlopen(f"http://127.0.0.1:{n.http}/metrics", timeout=10) as r:
                text = r.read().decode()
            m = re.search(r"^disq_schedule_ticks_fired_total (\S+)$", text, re.M)
            assert m and "disq_schedules 1.0" in text
            total += float(m.group(1))
        return total

    eventually(lambda: fired() >= 1, "ticks counted on /metrics")


# ------------------------------------------------------------------ queue policies, redrive
DEAD_HEADERS = {"disq-source-queue": "orders", "disq-dead-reason": "maxdeliveries"}


@pytest.fixture
def rw_cluster(server_factory: ServerFactory) -> list[DashNode]:
    """Two nodes without a password, actions allowed from loopback (the test's requests)."""
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    return start_cluster(server_factory, 2, "--dashboard-actions")


def _section(html: str, queue: str) -> str:
    pattern = f'<section class="deadq" data-queue="{re.escape(queue)}">(.*?)</section>'
    m = re.search(pattern, html, re.S)
    return m.group(1) if m else ""


def _node_counts(section: str) -> dict[str, int]:
    return {
        node: int(n)
        for node, n in re.findall(r'data-node="([0-9a-f]{8})">node \1: (\d+)<', section)
    }


def test_policies_page_and_policy_dead_letter_queues(rw_cluster: list[DashNode]) -> None:
    """The Policies page lists every policy set on another node (escaped, unset fields as
    "-"); a policy's DEADLETTER queue is on the Dead letters page while empty, then with a
    dead letter's source queue and reason (its headers) and a count per node."""
    n0, n1 = rw_cluster
    b = Browser()
    status, html = b.req(n1.url + "/policies")
    assert status == 200 and 'id="no-policies"' in html and 'id="nav-policies"' in html
    assert resp_line(n0.resp, "QPOLICY", "SET", "orders", "MAXDELIVERIES", "3",
                     "DEADLETTER", "<i>parked</i>", "BACKOFF", "2", "60") == "+OK"  # fmt: skip
    assert resp_line(n0.resp, "QPOLICY", "SET", "slow", "BACKOFF", "0", "5") == "+OK"

    def rows() -> dict[str, list[str]]:
        status, html = b.req(n1.url + "/policies")
        assert status == 200
        found = re.findall(r'<tr class="policy" data-queue="([^"]*)">(.*?)</tr>', html, re.S)
        return {q: re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for q, row in found}

    eventually(lambda: len(rows()) == 2, "both policies listed on the other node")
    got = rows()
    cells = [re.sub(r"<[^>]+>", "", c) for c in got["orders"]]
    assert cells == ["orders", "3", "&lt;i&gt;parked&lt;/i&gt;", "2", "60"]
    assert [re.sub(r"<[^>]+>", "", c) for c in got["slow"]] == ["slow", "-", "-", "0", "5"]

    # The policy's dead-letter queue, empty: listed with its origin and a zero per node.
    status, html = b.req(n1.url + "/dead")
    section = _section(html, "&lt;i&gt;parked&lt;/i&gt;")
    assert status == 200 and "dead letters of orders (policy)" in section
    assert "<i>parked</i>" not in html and "Empty." in section
    counts = _node_counts(section)
    assert len(counts) == 2 and set(counts.values()) == {0}
    # A dead letter as the cluster makes them (headers naming its source and why), on n0.
    with Client(n0.grpc_addr, discover=False) as c:
        dead_id = c.add_job("<i>parked</i>", "poison", replicate=1, headers=DEAD_HEADERS)
        holder = c.show(dead_id)
        assert holder is not None
    status, html = b.req(n1.url + "/dead")
    section = _section(html, "&lt;i&gt;parked&lt;/i&gt;")
    assert f'data-job="{dead_id}"' in section
    pattern = f'<tr class="deadjob" data-job="{re.escape(dead_id)}">(.*?)</tr>'
    row = re.search(pattern, section, re.S)
    assert row is not None
    assert '<td class="source">orders</td>' in row.group(1)
    assert '<td class="reason">maxdeliveries</td>' in row.group(1)
    assert sorted(_node_counts(section).values()) == [0, 1]
    assert "1 job(s)" in section
    # Its job page offers the requeue into the policy's queue.
    status, html = b.req(n1.url + "/job?id=" + urllib.parse.quote(dead_id))
    assert status == 200 and "Requeue into orders" in html


def test_redrive_bad_input_is_refused(rw_cluster: list[DashNode]) -> None:
    """A redrive with bad fields: 400, said why, nothing moved; a good one asks first."""
    n0 = rw_cluster[0]
    b = Browser()
    token = b.csrf(b.req(n0.url + "/login")[1])
    with Client(n0.grpc_addr, discover=False) as c:
        c.add_job("parked", "x", replicate=1, headers=DEAD_HEADERS)
        good = {"action": "redrive", "queue": "parked", "csrf": token, "confirm": "yes"}
        bad = [
            ({"queue": ""}, "which dead-letter queue"),
            ({"count": "many"}, "count must be a number"),
            ({"count": "0"}, "count must be between"),
            ({"count": str(REDRIVE_MAX + 1)}, "count must be between"),
            ({"to": "q" * 1025}, "target queue name longer"),
            ({"to": "parked"}, "into itself"),
        ]
        for change, said in bad:
            status, html = b.req(n0.url + "/action", {**good, **change})
            assert status == 400, (change, status)
            assert said in message(html), (change, message(html))
        # Without a token: 403. Without confirm=yes: the confirmation page says what it will do.
        status, _ = b.req(n0.url + "/action", {**good, "csrf": ""})
        assert status == 403
        status, html = b.req(
            n0.url + "/action", {**good, "to": "elsewhere", "count": "5", "confirm": ""}
        )
        assert status == 200 and 'id="confirm-yes"' in html
        assert "into &#39;elsewhere&#39;, at most 5 per node" in html
        assert c.qlen("parked") == 1 and c.qlen("elsewhere") == 0 and c.qlen("orders") == 0


def _queued(nodes: list[DashNode], queue: str) -> dict[str, list[Any]]:
    """Every node's queued jobs of ``queue`` (JSCAN, per node)."""
    out: dict[str, list[Any]] = {}
    with Client(nodes[0].grpc_addr) as c:
        for n in nodes:
            _, jobs = c.scan_page(queue=queue, states=("queued",), count=200, node=n.grpc_addr)
            out[n.grpc_addr] = jobs
    return out


def test_redrive_moves_dead_letters_on_every_node(rw_cluster: list[DashNode]) -> None:
    """Dead letters on both nodes: a redrive with COUNT 1 moves one from each (the flash says
    how many, summed), one with TO moves the rest there, counters reset. Needs QREDRIVE."""
    n0, n1 = rw_cluster
    if resp_line(n0.resp, "QREDRIVE", "nothing-here").startswith("-ERR unknown command"):
        pytest.skip("needs QREDRIVE (the RESP command is not on this branch)")
    assert resp_line(n0.resp, "QPOLICY", "SET", "orders", "DEADLETTER", "parked") == "+OK"
    bodies = set()
    for i, n in enumerate(rw_cluster):
        with Client(n.grpc_addr, discover=False) as c:
            for k in range(3):
                body = f"dead {i}.{k}"
                c.add_job("parked", body, replicate=1, headers=DEAD_HEADERS)
                bodies.add(body)
            # Delivered and NACKed once each: counters for the redrive to reset.
            got = c.get_jobs("parked", count=3, timeout_s=5)
            assert len(got) == 3 and c.nack(*(j.id for j in got)) == 3

    def nacked_and_queued() -> bool:
        per_node = _queued(rw_cluster, "parked").values()
        return [len(j) for j in per_node] == [3, 3] and all(
            j.nacks == 1 for jobs in per_node for j in jobs
        )

    eventually(nacked_and_queued, "the dead letters queued again, each nacked once")
    b = Browser()
    _, html = b.req(n1.url + "/dead")
    assert sorted(_node_counts(_section(html, "parked")).values()) == [3, 3]
    assert 'class="act redrive"' in _section(html, "parked")
    token = b.csrf(html)
    form = {"action": "redrive", "queue": "parked", "csrf": token, "confirm": "yes",
            "next": "/dashboard/dead", "to": "", "count": "1"}  # fmt: skip
    status, html = b.req(n1.url + "/action", form)
    assert status == 200 and 'id="flash"' in html
    assert "redrove 2 jobs" in html  # one from each node
    moved = _queued(rw_cluster, "orders")
    assert [len(j) for j in moved.values()] == [1, 1]
    assert [len(j) for j in _queued(rw_cluster, "parked").values()] == [2, 2]
    for jobs in moved.values():
        assert jobs[0].body.decode() in bodies and jobs[0].nacks == 0
        assert jobs[0].additional_deliveries == 0
    # The rest, into another queue.
    status, html = b.req(n1.url + "/action", {**form, "to": "retry-by-hand", "count": ""})
    assert status == 200 and "redrove 4 jobs" in html
    assert all(not j for j in _queued(rw_cluster, "parked").values())
    rest = _queued(rw_cluster, "retry-by-hand")
    got = {j.body.decode() for jobs in [*rest.values(), *moved.values()] for j in jobs}
    assert got == bodies
    assert "redrive" in n1.srv.log_text() and "dashboard_action" in n1.srv.log_text()


def test_a_job_past_its_max_deliveries_shows_and_redrives(rw_cluster: list[DashNode]) -> None:
    """The cluster's own move (MAXDELIVERIES 1, one NACK): the dead letter is listed with the
    headers the move wrote; its Redrive puts it back into its source queue."""
    n0, n1 = rw_cluster
    if resp_line(n0.resp, "QREDRIVE", "nothing-here").startswith("-ERR unknown command"):
        pytest.skip("needs the server's dead letters (not on this branch)")
    assert resp_line(n0.resp, "QPOLICY", "SET", "spent", "MAXDELIVERIES", "1",
                     "DEADLETTER", "spent-parked") == "+OK"  # fmt: skip
    b = Browser()
    eventually(lambda: 'data-queue="spent"' in b.req(n1.url + "/policies")[1], "policy synced")
    with Client(n0.grpc_addr) as c:
        job = c.add_job("spent", "fails once", replicate=2)
        [got] = c.get_jobs("spent", timeout_s=5)
        assert got.id == job and c.nack(job) == 1

    def listed() -> str:
        status, html = b.req(n1.url + "/dead")
        assert status == 200
        return _section(html, "spent-parked") if "deadjob" in _section(html, "spent-parked") else ""

    eventually(lambda: bool(listed()), "the dead letter on the Dead letters page")
    section = listed()
    assert '<td class="source">spent</td>' in section
    assert '<td class="reason">maxdeliveries</td>' in section
    assert "dead letters of spent (policy)" in section
    token = b.csrf(b.req(n1.url + "/login")[1])
    form = {"action": "redrive", "queue": "spent-parked", "csrf": token, "confirm": "yes",
            "next": "/dashboard/dead"}  # fmt: skip
    status, html = b.req(n1.url + "/action", form)
    assert status == 200 and "redrove 1 jobs" in html
    back = [j for jobs in _queued(rw_cluster, "spent").values() for j in jobs]
    assert [j.body for j in back] == [b"fails once"] and back[0].nacks == 0
    assert back[0].id != job and "disq-source-queue" not in back[0].headers  # a new job
