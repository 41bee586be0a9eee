"""The dashboard's pure helpers: body rendering, timeline merge, sessions and CSRF tokens; the
Schedules page gathered from an in-process node core and rendered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from disq.dashboard import auth
from disq.dashboard.render import (
    PolicyRow,
    body_preview,
    dead_letter_origin,
    dead_letter_targets,
    fmt_age,
    fmt_relative,
    header_text,
    is_job_id,
    iso_utc,
    merge_timeline,
    plain,
    policy_rows,
    render_body,
)


def test_text_body_is_text_and_html_stays_plain_text() -> None:
    r = render_body(b"<script>alert(1)</script>")
    assert r.kind == "text" and r.text == "<script>alert(1)</script>" and not r.truncated


def test_binary_body_is_a_hex_dump() -> None:
    r = render_body(b"\x00\x01<b>\xff")
    assert r.kind == "hex"
    assert r.text.startswith("00000000  00 01 3c 62 3e ff")
    assert r.text.endswith("|..<b>.|")


def test_long_body_is_truncated_even_inside_a_utf8_character() -> None:
    body = "é".encode() * 10  # 20 bytes; the limit cuts the 4th character in half
    r = render_body(body, limit=7)
    assert r.kind == "text" and r.text == "ééé" and r.shown == 6 and r.size == 20
    assert r.truncated


def test_preview_escapes_controls() -> None:
    assert body_preview(b"a\x00b\nc") == "a\\x00b\\x0ac"
    assert body_preview(b"x" * 100, limit=3) == "xxx…"


def test_timeline_merges_nodes_in_time_order() -> None:
    def e(seq: int, t: int, kind: str, job: str = "J") -> SimpleNamespace:
        return SimpleNamespace(
            seq=seq, time_ms=t, kind=kind, queue="q", job_id=job, attempt=0, size=1
        )

    merged = merge_timeline(
        {
            "bbbb": [e(1, 100, "replicated"), e(2, 300, "acked"), e(3, 150, "x", job="other")],
            "aaaa": [e(7, 101, "enqueued"), e(8, 200, "delivered"), e(9, 300, "acked")],
        },
        "J",
    )
    assert [(x.node, x.kind) for x in merged] == [
        ("bbbb", "replicated"),
        ("aaaa", "enqueued"),
        ("aaaa", "delivered"),
        ("aaaa", "acked"),  # same time: by node id, stable across loads
        ("bbbb", "acked"),
    ]


def test_job_ids_and_dead_letter_names() -> None:
    assert is_job_id("D-676946ce-vSEsgQzhwVTneAGcZlRmAk+/-05a1")
    assert not is_job_id("D-676946ce-<script>-05a1")
    assert dead_letter_origin("orders-dead") == "orders"
    assert dead_letter_origin("orders.dlq") == "orders"
    assert dead_letter_origin("dead_letter") == ""
    assert dead_letter_origin("orders") is None
    assert fmt_age(None) == "-" and fmt_age(65) == "1m05s" and fmt_age(90000) == "1d01h"


def test_policy_rows_and_the_dead_letter_queues_they_name() -> None:
    """QPOLICY LIST's entries as rows by queue (unset fields None or ""), and each DEADLETTER
    queue with the queues whose policies name it; a job's header as text."""
    rows = policy_rows(
        [
            ("b", [("maxdeliveries", 3), ("deadletter", "parked")]),
            ("a", [("maxdeliveries", 5), ("deadletter", "parked"), ("backoff-base", 0),
                   ("backoff-max", 60)]),
            ("c\udcff", [("backoff-base", 1), ("backoff-max", 2)]),
            ("d", [("deadletter", "d-dlq")]),
        ]
    )  # fmt: skip
    assert [r.queue for r in rows] == ["a", "b", "c\ufffd", "d"]
    assert rows[0] == PolicyRow("a", 5, "parked", 0, 60)
    assert rows[2] == PolicyRow("c\ufffd", None, "", 1, 2)
    assert dead_letter_targets(rows) == {"d-dlq": ["d"], "parked": ["a", "b"]}
    assert dead_letter_targets([]) == {}
    headers = {"disq-source-queue": b"orders", "bin": b"\xff"}
    assert header_text(headers, "disq-source-queue") == "orders"
    assert header_text(headers, "bin") == "\ufffd" and header_text(headers, "none") == ""


def test_session_cookie_round_trip_and_forgery() -> None:
    signer = auth.Signer(b"k" * 32)
    s = signer.new_session(authenticated=True, now_s=1000)
    cookie = signer.dump(s)
    assert signer.load(cookie, now_s=1001) == s
    sid, _, exp, mac = cookie.split(".")
    assert signer.load(f"{sid}.1.{int(exp) + 999}.{mac}", now_s=1001) is None  # extended
    assert signer.load(f"{sid}.1.{exp}.{'0' * len(mac)}", now_s=1001) is None  # forged
    assert signer.load(cookie, now_s=s.expires_s + 1) is None  # expired
    assert auth.Signer(b"z" * 32).load(cookie, now_s=1001) is None  # another process's
    assert signer.load("garbage") is None and signer.load(None) is None


def test_a_session_stops_verifying_when_the_password_changes() -> None:
    signer = auth.Signer(b"k" * 32)
    s = signer.new_session(authenticated=True, now_s=1000)
    old = auth.password_digest("old-pass")
    cookie = signer.dump(s, old)
    assert signer.load(cookie, now_s=1001, bind=old) == s
    assert signer.load(cookie, now_s=1001, bind=auth.password_digest("new-pass")) is None
    assert signer.load(cookie, now_s=1001) is None  # the password was removed
    assert auth.password_digest(None) == auth.password_digest("") == ""


def test_csrf_token_is_bound_to_the_session() -> None:
    signer = auth.Signer(b"k" * 32)
    a, b = signer.new_session(), signer.new_session()
    assert signer.check_csrf(a, signer.csrf_token(a))
    assert not signer.check_csrf(a, signer.csrf_token(b))
    assert not signer.check_csrf(a, "") and not signer.check_csrf(None, signer.csrf_token(a))


def test_who_may_act() -> None:
    anon = auth.Session("s", False, 0)
    user = auth.Session("s", True, 0)
    assert auth.action_refusal(user, "pw", False, "10.0.0.1") is None
    assert auth.action_refusal(anon, "pw", True, "127.0.0.1") is not None
    assert "read-only" in (auth.action_refusal(anon, None, False, "127.0.0.1") or "")
    assert auth.action_refusal(anon, None, True, "127.0.0.1") is None
    assert auth.action_refusal(anon, None, True, "::1") is None
    assert auth.action_refusal(anon, None, True, "10.0.0.1") is not None
    assert auth.password_ok("pw", "pw") and not auth.password_ok("px", "pw")
    assert not auth.password_ok("", None)


class _FakeGather:
    """This node's queues as the sampler reads them in the process; no other node."""

    def __init__(self) -> None:
        self.me = SimpleNamespace(short="aaaaaaaa", is_self=True)
        self.stats = {"name": "q", "len": 3, "blocked": 1, "pause": "none", "jobs_in": 10}
        self.stats |= {"jobs_out": 4, "oldest_s": 0.0}
        self.remote_calls = 0

    def local_node(self) -> SimpleNamespace:
        return self.me

    def reachable(self) -> list[SimpleNamespace]:
        return [self.me]

    def local_queues(self, cap: int) -> tuple[list[dict[str, object]], int]:
        return [dict(self.stats)], 1

    async def node_queues(self, node: object, cap: int) -> tuple[list[object], int]:
        self.remote_calls += 1
        raise AssertionError("this node is read in the process, not through its gRPC port")

    def tubes(self) -> list[dict[str, object]]:
        return []


def test_sampler_reads_this_node_in_process_and_shares_its_json() -> None:
    import asyncio
    import json
    import time

    from disq.dashboard.sampler import Sampler

    async def run() -> None:
        g = _FakeGather()
        g.stats["oldest_s"] = time.time() - 30
        s = Sampler(g, interval_s=2.0)  # type: ignore[arg-type]
        await s.sample()
        g.stats |= {"jobs_in": 30, "jobs_out": 8, "len": 5}
        s._prev[("aaaaaaaa", "q")] = (s._prev[("aaaaaaaa", "q")][0] - 2.0, 10, 4)  # 2 s ago
        await s.sample()
        assert g.remote_calls == 0
        (q,) = s.latest["queues"]
        assert q["depth"] == 5 and q["blocked"] == 1 and q["paused"] == "none"
        assert 9.0 < q["in"] < 11.0 and 1.5 < q["out"] < 2.5
        assert 29.0 < q["age_s"] < 40.0
        row = q["nodes"]["aaaaaaaa"]
        assert row["len"] == 5 and 9.0 < row["rate_in"] < 11.0
        # The event streams and pollers get the same bytes until the next sample.
        frame = s.frame()
        assert frame is s.frame() and frame.startswith(b"data: ") and frame.endswith(b"\n\n")
        api = json.loads(s.api_json())
        assert s.api_json() is s.api_json()
        assert api["history"]["queues"]["q"]["depth"] == [3.0, 5.0]
        assert api["history"]["pernode"]["q"]["aaaaaaaa"] == [3.0, 5.0]
        await s.sample()
        assert s.frame() is not frame

    asyncio.run(run())


# ---------------------------------------------------------------------- schedules
T0_S = 1_777_636_800  # 2026-05-01 12:00:00 UTC


def test_times_and_plain_text() -> None:
    assert iso_utc(T0_S) == "2026-05-01T12:00:00Z"
    assert fmt_relative(42) == "in 42s" and fmt_relative(-185) == "3m05s ago"
    assert fmt_relative(0.4) == "now"
    assert plain("caf\udcc3") == "caf\ufffd" and plain(b"\xff<b>") == "\ufffd<b>"


def _schedule_host(mesh: Any) -> SimpleNamespace:
    """A runtime as the Gatherer reads schedules: the node core, its clocks, no cluster half."""
    return SimpleNamespace(
        core=mesh.nodes[0],
        cluster=None,
        instance_id=mesh.ids[0],
        now_ms=lambda: mesh.now,
        wall_ms=lambda: mesh.now,
    )


def _env() -> Any:
    from disq.dashboard.app import _env

    return _env()


def _page(schedules: list[Any], total: int, has_scheduler: bool = True, node: str = "") -> str:
    ctx = {"prefix": "/dashboard", "csrf": "t", "node_id": node, "page": "schedules"}
    ctx |= {"schedules": schedules, "total": total, "has_scheduler": has_scheduler}
    html: str = _env().get_template("schedules.html").render(now_iso="2026-05-01T12:00:02Z", **ctx)
    return html


def test_schedules_gathered_in_process_and_rendered_escaped() -> None:
    import asyncio

    from disq.core.messages import ScheduleDef
    from disq.dashboard.gather import Gatherer
    from disq.testing.mesh import Mesh

    mesh = Mesh(1, now_ms=T0_S * 1000 + 500)
    sched = mesh.nodes[0].scheduler
    assert sched is not None
    sched.add(mesh.now, ScheduleDef("<b>s</b>", "@every 1s", "UTC", "<i>q</i>", b"x", repl=1))
    sched.add(mesh.now, ScheduleDef("nightly", "0 3 * * *", "Europe/Berlin", "n", b"y"))
    sched.pause(mesh.now, "nightly")
    mesh.advance(2_000)  # ticks T0+1 and T0+2 fired here

    g = Gatherer(_schedule_host(mesh), lambda: None)  # type: ignore[arg-type]
    got = asyncio.run(g.schedules())
    assert got is not None
    rows, total = got
    assert total == 2 and [r.name for r in rows] == ["<b>s</b>", "nightly"]
    s, nightly = rows
    assert (s.spec, s.zone, s.queue, s.paused) == ("@every 1s", "UTC", "<i>q</i>", False)
    assert s.next_iso == "2026-05-01T12:00:03Z" and s.next_rel == "now"  # 0.5 s away
    assert s.last_tick_iso == "2026-05-01T12:00:02Z" and s.last_tick_rel == "now"
    assert s.last_job_id.startswith("D-" + mesh.ids[0][:8]) and s.last_job_state == "queued"
    assert s.owner == mesh.ids[0] and s.last_error == "" and len(s.later_iso) >= 1
    assert nightly.paused and nightly.next_s is None and nightly.last_job_id == ""

    html = _page(rows, total, node=mesh.ids[0])
    assert 'id="schedules"' in html and 'id="nav-schedules"' in html
    assert "<b>s</b>" not in html and "&lt;b&gt;s&lt;/b&gt;" in html
    assert "<i>q</i>" not in html and "&lt;i&gt;q&lt;/i&gt;" in html
    assert s.last_job_id in html and "(this node)" in html and "2026-05-01T12:00:03Z" in html
    assert "schedules-capped" not in html
    assert "schedules-capped" in _page(rows, 600)


def test_no_schedules_page() -> None:
    assert "No schedules." in _page([], 0)
    html = _page([], 0, has_scheduler=False)
    assert 'id="no-schedules"' in html and "without its cluster core" in html
    assert 'id="schedules"' not in html
