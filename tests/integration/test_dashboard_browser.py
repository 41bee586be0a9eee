"""The dashboard in a real browser: headless Chromium (Debian's chromium and chromium-driver,
installed by scripts/ensure_chromium.sh) driven by Selenium against a real 3-node cluster.

Logs in, sees the three nodes, opens the Schedules page from the nav, watches a queue's depth
and chart move without a reload, reads a job's timeline with events from more than one node,
requeues a job the worker dead-lettered, pauses a queue and sees adds refused. Every wait is a
WebDriverWait on a condition; each page is saved to build/screenshots/ under a fixed name (a
test run never writes a tracked file: `make screenshots` copies them over docs/screenshots/,
the README's pictures, when a change to the dashboard should show there).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import ServerFactory
from dashboard_cluster import DashNode, start_cluster
from eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from disq.client.errors import PausedError  # noqa: E402
from disq.client.sync import Client  # noqa: E402
from disq.worker import Worker  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SHOTS = ROOT / "build" / "screenshots"
PASSWORD = "dash-s3cret"
WAIT_S = 30

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
        reason="chromium / chromedriver missing (scripts/ensure_chromium.sh)",
    ),
]


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,900",
        f"--user-data-dir={tmp_path / 'chrome'}",
    ):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(tmp_path / "chrome", ignore_errors=True)


def shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"dashboard-{name}.png"))


def wait(driver: Any, cond: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(cond, message=what)


def confirm(driver: Any) -> None:
    """An action's confirmation page: check it and say yes."""
    wait(driver, lambda d: d.find_elements(By.ID, "confirm-yes"), "the confirmation page")
    driver.find_element(By.ID, "confirm-yes").click()
    wait(driver, lambda d: d.find_elements(By.ID, "flash"), "the action's result")


def run_worker(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    t.start()
    return t


def test_dashboard_in_a_browser(server_factory: ServerFactory, driver: Any) -> None:
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    nodes: list[DashNode] = start_cluster(server_factory, 3, password=PASSWORD)
    n0 = nodes[0]
    client = Client(n0.grpc_addr, password=PASSWORD)
    try:
        # -- log in (a page asks for it), with a wrong password first
        driver.get(n0.url + "/")
        wait(driver, lambda d: d.find_elements(By.ID, "password"), "the login form")
        driver.find_element(By.ID, "password").send_keys("wrong")
        driver.find_element(By.ID, "login-button").click()
        wait(driver, lambda d: d.find_elements(By.ID, "login-error"), "wrong password said")
        assert "wrong password" in driver.find_element(By.ID, "login-error").text
        shot(driver, "login")
        driver.find_element(By.ID, "password").send_keys(PASSWORD)
        driver.find_element(By.ID, "login-button").click()

        # -- the cluster: three nodes, all ok
        def three_ok(d: Any) -> bool:
            rows = d.find_elements(By.CSS_SELECTOR, "#nodes tr.node")
            if len(rows) == 3 and all("state-ok" in r.get_attribute("class") for r in rows):
                return True
            d.refresh()
            return False

        wait(driver, three_ok, "three nodes, all ok")
        shot(driver, "cluster")

        # -- schedules: linked from the nav; none yet
        driver.find_element(By.ID, "nav-schedules").click()
        wait(driver, lambda d: d.find_elements(By.ID, "no-schedules"), "the Schedules page")

        # -- queues: depth and chart move live, the page is not reloaded
        client.add_job("orders", "first", replicate=3)
        driver.get(n0.url + "/queues")
        row_sel = '#queues tr.queue[data-queue="orders"]'
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row_sel), "the orders row")
        driver.execute_script("window.__no_reload = 42;")
        points_before = driver.find_element(
            By.CSS_SELECTOR, row_sel + " svg.spark polyline"
        ).get_attribute("points")
        ids = [client.add_job("orders", f"order {i}", replicate=3) for i in range(9)]

        def depth_is_10(d: Any) -> bool:
            return d.find_element(By.CSS_SELECTOR, row_sel + " td.depth").text == "10"

        wait(driver, depth_is_10, "the depth to reach 10 live")
        line_sel = row_sel + " svg.spark polyline"
        wait(
            driver,
            lambda d: (
                d.find_element(By.CSS_SELECTOR, line_sel).get_attribute("points") != points_before
            ),
            "the chart to move",
        )

        # Per node too: the holding node's row follows, and a node that gets the queue later
        # gets a row of its own, live.
        def node_depths(d: Any) -> dict[str, str]:
            rows = d.find_elements(By.CSS_SELECTOR, '#queues tr.pernode[data-queue="orders"]')
            return {r.get_attribute("data-node"): r.find_element(By.CSS_SELECTOR, "td.depth").text
                    for r in rows}  # fmt: skip

        wait(driver, lambda d: list(node_depths(d).values()) == ["10"], "the node's row at 10")
        # Two jobs on a node that has none of the queue yet (the client chose where the ten went).
        for other in nodes:
            c = Client(other.grpc_addr, password=PASSWORD, discover=False)
            try:
                if c.qlen("orders") == 0:
                    for i in range(2):
                        c.add_job("orders", f"elsewhere {i}", replicate=2)
                    break
            finally:
                c.close()
        wait(
            driver,
            lambda d: (
                sorted(node_depths(d).values()) == ["10", "2"]
                and d.find_element(By.CSS_SELECTOR, row_sel + " td.depth").text == "12"
            ),
            "a new live row with depth 2 for the other node, and 12 summed",
        )
        assert driver.execute_script("return window.__no_reload;") == 42, "the page was reloaded"
        shot(driver, "queues")

        # -- a job: its copies and a timeline with events from more than one node
        driver.get(n0.url + "/job?id=" + quote(ids[0]))

        def events_from_two_nodes(d: Any) -> bool:
            rows = d.find_elements(By.CSS_SELECTOR, "#timeline tr.event")
            if len({r.get_attribute("data-node") for r in rows}) >= 2:
                return True
            d.refresh()
            return False

        wait(driver, events_from_two_nodes, "timeline events from two nodes")
        kinds = [
            r.get_attribute("data-kind")
            for r in driver.find_elements(By.CSS_SELECTOR, "#timeline tr.event")
        ]
        assert {"enqueued", "replicated"} <= set(kinds)
        assert driver.find_element(By.ID, "job-body").text == "order 0"
        assert not driver.find_elements(By.ID, "job-result")  # none kept yet
        client.set_result(ids[0], "shipped", replicate=3)
        driver.refresh()
        wait(driver, lambda d: d.find_elements(By.ID, "job-result"), "the job's result")
        assert driver.find_element(By.ID, "job-result").text == "shipped"
        shot(driver, "job")

        # -- the worker dead-letters a failing job; requeue it from the page
        client.add_job("poison", "bad input", replicate=3)

        async def fail(job: object) -> None:
            raise ValueError("always fails")

        worker = Worker(
            n0.grpc_addr, "poison", fail, dead_letter="poison-dead", max_nacks=1,
            fetch_timeout_s=0.2, client_options={"discover": False, "password": PASSWORD},
        )  # fmt: skip
        t = run_worker(worker)
        try:
            eventually(lambda: worker.stats.dead_lettered == 1, "the job dead-lettered")
        finally:
            worker.stop()
            t.join(timeout=30)
        driver.get(n0.url + "/dead")
        dead_sel = 'section.deadq[data-queue="poison-dead"] tr.deadjob'

        def dead_row(d: Any) -> bool:
            if d.find_elements(By.CSS_SELECTOR, dead_sel):
                return True
            d.refresh()
            return False

        wait(driver, dead_row, "the dead letter listed")
        shot(driver, "dead")
        driver.find_element(By.CSS_SELECTOR, dead_sel + " form.act button").click()
        shot(driver, "confirm")
        confirm(driver)
        flash = driver.find_element(By.ID, "flash").text
        assert "added as D-" in flash
        new_id = flash.rsplit(" ", 1)[-1]
        info = client.show(new_id)
        assert info is not None and info["queue"] == "poison" and info["body"] == b"bad input"
        client.ack(new_id)
        wait(
            driver,
            lambda d: d.refresh() or not d.find_elements(By.CSS_SELECTOR, dead_sel),
            "the dead letter gone",
        )

        # -- pause the queue from the page: adds are refused; resume: accepted again
        driver.get(n0.url + "/queues")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row_sel + " form.act"), "pause")
        driver.find_element(By.CSS_SELECTOR, row_sel + " form.act button").click()
        confirm(driver)

        def refused() -> bool:
            try:
                client.add_job("orders", "while paused", replicate=3)
            except PausedError:
                return True
            return False

        eventually(refused, "adds refused while paused")
        wait(
            driver,
            lambda d: d.find_element(By.CSS_SELECTOR, row_sel + " td.paused").text == "in",
            "the paused state shown live",
        )
        button = row_sel + " form.act button"

        def resume_offered(d: Any) -> bool:
            if d.find_element(By.CSS_SELECTOR, button).text == "Resume":
                return True
            d.refresh()
            return False

        wait(driver, resume_offered, "a Resume button")
        shot(driver, "queues-paused")
        driver.find_element(By.CSS_SELECTOR, button).click()
        confirm(driver)

        def accepted() -> bool:
            try:
                return bool(client.add_job("orders", "resumed", replicate=3))
            except PausedError:
                return False

        eventually(accepted, "adds accepted again")
        for n in nodes:
            assert "dashboard_action" in n.srv.log_text() or n is not n0
        assert '"action": "pause"' in n0.srv.log_text()
    finally:
        client.close()


def login(driver: Any, node: DashNode) -> None:
    driver.get(node.url + "/")
    wait(driver, lambda d: d.find_elements(By.ID, "password"), "the login form")
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "login-button").click()
    wait(driver, lambda d: d.find_elements(By.ID, "nodes"), "the cluster page")


def resp_authed(node: DashNode, *args: str) -> str:
    """AUTH, then one RESP command on ``node``: the command's reply line."""
    import socket

    def cmd(*a: str) -> bytes:
        return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x.encode()) for x in a)

    with socket.create_connection(("127.0.0.1", node.resp), timeout=10) as sock:
        sock.sendall(cmd("AUTH", PASSWORD) + cmd(*args))
        f = sock.makefile("rb")
        assert f.readline().startswith(b"+OK")
        return f.readline().decode(errors="replace").rstrip("\r\n")


def test_redrive_from_the_dead_letters_page(server_factory: ServerFactory, driver: Any) -> None:
    """A queue policy shows on the Policies page; its dead-letter queue's jobs (headers: the
    source queue, the reason) on the Dead letters page, counted per node; its Redrive button,
    confirmed, moves them back to their source queue on every node. Needs QREDRIVE."""
    if server_factory.kind != "disq":
        pytest.skip("the dashboard is disq's")
    nodes = start_cluster(server_factory, 2, password=PASSWORD)
    n0 = nodes[0]
    if resp_authed(n0, "QREDRIVE", "nothing-here").startswith("-ERR unknown command"):
        pytest.skip("needs QREDRIVE (the RESP command is not on this branch)")
    assert resp_authed(n0, "QPOLICY", "SET", "invoices", "MAXDELIVERIES", "2",
                       "DEADLETTER", "invoices-parked") == "+OK"  # fmt: skip
    headers = {"disq-source-queue": "invoices", "disq-dead-reason": "maxdeliveries"}
    for i, n in enumerate(nodes):  # a dead letter queued on each node
        with Client(n.grpc_addr, password=PASSWORD, discover=False) as c:
            c.add_job("invoices-parked", f"invoice {i}", replicate=1, headers=headers)
    login(driver, n0)

    driver.find_element(By.ID, "nav-policies").click()
    row = 'tr.policy[data-queue="invoices"]'
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the policy listed")
    assert driver.find_element(By.CSS_SELECTOR, row + " td.maxdeliveries").text == "2"
    assert driver.find_element(By.CSS_SELECTOR, row + " td.deadletter").text == "invoices-parked"
    shot(driver, "policies")

    driver.find_element(By.ID, "nav-dead").click()
    section = 'section.deadq[data-queue="invoices-parked"]'
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, section + " tr.deadjob")) == 2,
         "both dead letters listed")  # fmt: skip
    sources = driver.find_elements(By.CSS_SELECTOR, section + " td.source")
    reasons = driver.find_elements(By.CSS_SELECTOR, section + " td.reason")
    assert [s.text for s in sources] == ["invoices"] * 2
    assert [r.text for r in reasons] == ["maxdeliveries"] * 2
    counts = driver.find_elements(By.CSS_SELECTOR, section + " span.nodecount")
    assert sorted(c.text.rsplit(" ", 1)[-1] for c in counts) == ["1", "1"]
    shot(driver, "dead-policy")
    driver.find_element(By.CSS_SELECTOR, section + " form.redrive button").click()
    wait(driver, lambda d: d.find_elements(By.ID, "confirm-what"), "the confirmation page")
    assert "back to their source queues" in driver.find_element(By.ID, "confirm-what").text
    confirm(driver)
    assert "redrove 2 jobs" in driver.find_element(By.ID, "flash").text
    wait(
        driver,
        lambda d: d.refresh() or not d.find_elements(By.CSS_SELECTOR, section + " tr.deadjob"),
        "the dead letters gone from the page",
    )
    with Client(n0.grpc_addr, password=PASSWORD) as c:
        assert sum(c.qlen("invoices-parked", node=n.grpc_addr) for n in nodes) == 0
        bodies = [
            j.body
            for n in nodes
            for j in c.scan_page(queue="invoices", states=("queued",), node=n.grpc_addr)[1]
        ]
        assert sorted(bodies) == [b"invoice 0", b"invoice 1"]
