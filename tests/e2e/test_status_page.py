"""The status page in a real headless browser (Debian chromium driven by Playwright).

The page is JavaScript over the JSON API, so only a browser can tell whether a person sees
the brokers and a topic's route. Playwright's own browser download cannot run here: the test
launches the system chromium, which ``make test`` installs with playwright: missing either is a
failure that names the fix, never a skip. The screenshot lands in artifacts/status-page.png for
people to look at.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import async_playwright  # the [test] extra

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.model import DataVersion
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.wording import count

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO_ROOT / "artifacts" / "status-page.png"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000
JAVA_LONG_MAX = 2**63 - 1


@pytest.fixture
async def browser_page(tmp_path: Path) -> AsyncIterator[Any]:
    """A page in a fresh headless chromium profile; console errors fail the test."""
    if not CHROMIUM.is_file() or shutil.which(str(CHROMIUM)) is None:
        pytest.fail(
            f"{CHROMIUM} is not available; install it with: apt-get install -y chromium",
            pytrace=False,
        )
    errors: list[str] = []
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 900},
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
            page.on(
                "console",
                lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None,
            )
            yield page
        finally:
            await context.close()
    assert not errors, errors  # a CSP violation or a script error shows up here


def broker(
    ctrl: NamesrvController,
    name: str,
    port: int,
    topics: dict[str, tuple[int, int, int]],
    **kwargs: Any,
) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ctrl.port}"],
        cluster="DefaultCluster",
        broker_name=name,
        broker_id=0,
        broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=f"127.0.0.1:{port + 1}",
        topics={t: TopicConfig(t, r, w, p) for t, (r, w, p) in topics.items()},
        register_period_s=3600.0,
        **kwargs,
    )


async def test_status_page_shows_brokers_whose_times_a_date_cannot_hold(
    namesrv: NamesrvController, browser_page: Any
) -> None:
    """A registration with dataVersion.timestamp = Long.MAX made toISOString() throw: every
    viewer saw "unreachable" and no cluster. The time is shown as out of range instead."""
    page = browser_page
    http = HttpServer(namesrv.view)
    await http.start("127.0.0.1", 0)
    clients = [
        broker(namesrv, "broker-max", 10911, {"A": (4, 4, 6)},
               data_version=DataVersion(timestamp=JAVA_LONG_MAX, counter=7)),
        broker(namesrv, "broker-min", 10921, {"B": (4, 4, 6)},
               data_version=DataVersion(timestamp=-JAVA_LONG_MAX - 1, counter=1)),
        broker(namesrv, "broker-ok", 10931, {"C": (4, 4, 6)}),
    ]  # fmt: skip
    try:
        for client in clients:
            assert all(o.ok for o in await client.start())
        await page.goto(f"http://127.0.0.1:{http.port}/")
        rows = page.locator(".cluster tr.broker")
        await rows.nth(2).wait_for()
        assert await page.locator("#ready").inner_text() == "ready"
        text = await page.locator("#clusters").inner_text()
        assert "#7 · out of range (9223372036854776000)" in text, text
        assert "#1 · out of range (-9223372036854776000)" in text, text
        assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text  # broker-ok
        await page.locator("#topics tbody tr", has_text="A").wait_for()
    finally:
        for client in clients:
            await client.stop()
        await http.stop()


async def test_status_page_shows_brokers_and_a_searched_route(
    namesrv: NamesrvController, browser_page: Any, start_namesrv: Any, tmp_path: Path
) -> None:
    page = browser_page
    http = HttpServer(namesrv.view)
    await http.start("127.0.0.1", 0)
    brokers = [
        broker(namesrv, "broker-a", 10911, {"OrderEvents": (8, 8, 6), "Payments": (4, 4, 6)}),
        broker(namesrv, "broker-b", 10921, {"OrderEvents": (4, 2, 4), "Audit": (1, 1, 6)}),
    ]
    late = broker(namesrv, "broker-c", 10931, {"Inventory": (2, 2, 6)})
    try:
        for client in brokers:
            assert all(o.ok for o in await client.start())
        await page.goto(f"http://127.0.0.1:{http.port}/")

        rows = page.locator(".cluster tr.broker")
        await rows.nth(1).wait_for()
        assert await rows.count() == 2
        cluster_text = await page.locator("#clusters").inner_text()
        for expected in ("DefaultCluster", "broker-a", "127.0.0.1:10911", "broker-b",
                         "127.0.0.1:10921", "master", "live"):  # fmt: skip
            assert expected in cluster_text, cluster_text
        assert await page.locator("#ready").inner_text() == "ready"
        # No accounts file: anyone who reaches the port may write, and the header says so.
        writes = page.locator("#writes")
        assert await writes.inner_text() == "admin writes: open"
        assert "bad" in (await writes.get_attribute("class") or "")
        assert "set aclFile" in (await writes.get_attribute("title") or "")

        # Typing a topic's name filters the list and shows its route.
        await page.locator("#search").press_sequentially("OrderEvents", delay=20)
        route_rows = page.locator("#route tr.route-row")
        await route_rows.nth(1).wait_for()
        assert await route_rows.count() == 2
        cells = [
            [c.strip() for c in await route_rows.nth(i).locator("td").all_inner_texts()]
            for i in range(2)
        ]
        assert cells == [
            ["broker-a", "0", "127.0.0.1:10911", "8", "8", "RW"],
            ["broker-b", "0", "127.0.0.1:10921", "4", "2", "R-"],
        ]
        title = await page.locator("#route .title").inner_text()
        assert "OrderEvents" in title and "2 broker groups" in title
        # Times are ISO-8601 UTC, as in the logs, never a locale's month/day/year.
        iso = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
        assert iso.search(cluster_text), cluster_text
        assert iso.fullmatch((await page.locator("#updated").inner_text()).removeprefix("updated "))
        assert not re.search(r"\d/\d+/\d{4}", cluster_text), cluster_text
        route_text = await page.locator("#route").inner_text()
        assert "null" not in route_text and "undefined" not in route_text, route_text
        topic_rows = page.locator("#topics tbody tr")
        assert await topic_rows.count() == 1
        assert "OrderEvents" in await topic_rows.first.inner_text()

        # The page refreshes by itself (no reload): a broker that registers now appears.
        navigations: list[str] = []
        page.on("framenavigated", lambda frame: navigations.append(frame.url))
        assert all(o.ok for o in await late.start())
        await page.locator(".cluster tr.broker", has_text="127.0.0.1:10931").wait_for()
        assert navigations == []
        # The search still applies after the refresh.
        assert await topic_rows.count() == 1
        # One of a thing is singular (pynamesrv.wording.count, as the log writes it).
        await page.locator("#search").fill("Audit")
        await page.locator("#route .title", has_text="Audit").wait_for()
        title = await page.locator("#route .title").inner_text()
        assert title.endswith(count(1, "broker group")) and "groups" not in title, title
        assert await page.locator("#topic-count").inner_text() == "1 of 4 topics match"

        SCREENSHOT.parent.mkdir(exist_ok=True)
        await page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert SCREENSHOT.stat().st_size > 10_000

        # With an accounts file the same place says writes must be signed.
        accounts = tmp_path / "plain_acl.yml"
        accounts.write_text(
            "accounts:\n  - {accessKey: rocketmq2, secretKey: 12345678, admin: true}\n"
        )
        accounts.chmod(0o600)
        secured = await start_namesrv(aclFile=str(accounts))
        secured_http = HttpServer(secured.view)
        await secured_http.start("127.0.0.1", 0)
        try:
            await page.goto(f"http://127.0.0.1:{secured_http.port}/")
            await page.locator("#writes", has_text="admin writes: signed").wait_for()
            assert "ok" in (await writes.get_attribute("class") or "")
            assert "1 admin of 1 account in" in (await writes.get_attribute("title") or "")
        finally:
            await secured_http.stop()
    finally:
        for client in [*brokers, late]:
            await client.stop()
        await http.stop()


LONG_TOPIC = "order-events-of-the-european-region-for-the-checkout-service-v2"


async def test_status_page_marks_read_only_brokers_and_keeps_its_layout(
    browser_page: Any, tmp_path: Path
) -> None:
    """Bound to 0.0.0.0 the header names the address the browser used; a broker whose topics
    take no writes says so in its row and adds no write queues; long topic names stay on one
    line; the journal-lag tile sits in the row of tiles."""
    page = browser_page
    config = NamesrvConfig(
        listen_port=0,
        kv_config_path=str(tmp_path / "kv.json"),
        config_store_path=str(tmp_path / "ns.properties"),
        journal_dir=str(tmp_path / "journal"),
        http_port=0,
    )
    ctrl = NamesrvController(config, host="0.0.0.0")
    await ctrl.start()
    http = HttpServer(ctrl.view)
    await http.start("127.0.0.1", 0)
    writable = broker(ctrl, "broker-rw", 10911, {LONG_TOPIC: (8, 8, 6), "Payments": (4, 4, 6)})
    read_only = broker(ctrl, "broker-ro", 10921, {LONG_TOPIC: (4, 4, 4), "Audit": (2, 2, 4)})
    try:
        for client in (writable, read_only):
            assert all(o.ok for o in await client.start())
        await page.goto(f"http://localhost:{http.port}/")
        rows = page.locator(".cluster tr.broker")
        await rows.nth(1).wait_for()

        # The header: the address this browser reaches, never the wildcard.
        assert await page.locator("#addr").inner_text() == f"localhost:{ctrl.port}"

        # The read-only broker says so in its row; the writable one does not.
        ro_row = page.locator(".cluster tr.broker", has_text="127.0.0.1:10921")
        rw_row = page.locator(".cluster tr.broker", has_text="127.0.0.1:10911")
        assert await ro_row.locator(".pill.ro").inner_text() == "read-only"
        assert await rw_row.locator(".pill.ro").count() == 0
        assert "1 read-only" in await page.locator(".cluster .title").inner_text()

        # Totals: the read-only broker's queues count for reads only.
        topic_row = page.locator("#topics tbody tr", has_text=LONG_TOPIC)
        cells = [c.strip() for c in await topic_row.locator("td").all_inner_texts()]
        assert (cells[0], cells[2], cells[3]) == (LONG_TOPIC, "12", "8")
        audit = page.locator("#topics tbody tr", has_text="Audit").locator("td")
        assert [c.strip() for c in await audit.all_inner_texts()][2:] == ["2", "0"]

        # A long topic name (hyphens allow breaks) stays on one line, also on a narrow screen.
        for width in (1360, 700):
            await page.set_viewport_size({"width": width, "height": 900})
            lines = await topic_row.locator("td.topic").evaluate(
                "td => { const r = document.createRange(); r.selectNodeContents(td);"
                " return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size; }"
            )
            assert lines == 1, f"topic name wraps onto {lines} lines at {width}px"

        # Eight tiles, the journal lag among them, in full rows: 8 wide, 4 + 4 narrower.
        tiles = page.locator("#tiles .tile")
        assert await tiles.count() == 8
        assert "Journal lag" in await tiles.last.inner_text()
        for width, per_row in ((1360, 8), (900, 4)):
            await page.set_viewport_size({"width": width, "height": 900})
            # Read in one step in the page: the live refresh may replace a tile between two
            # reads from here (a tile gone from the page has no box).
            tops = await tiles.evaluate_all(
                "tiles => tiles.map(t => Math.round(t.getBoundingClientRect().top))"
            )
            assert [tops.count(top) for top in sorted(set(tops))] == [per_row] * (8 // per_row)

        # wipeWritePerm makes the other broker read-only too; the page follows by itself.
        client = await RemotingClient.connect("127.0.0.1", ctrl.port)
        try:
            answer = await client.request(
                RemotingCommand(
                    code=RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                    version=401,
                    ext_fields={"brokerName": "broker-rw"},
                )
            )
        finally:
            await client.close()
        assert answer.code == ResponseCode.SUCCESS
        await rw_row.locator(".pill.ro").wait_for()
        await (
            page.locator("#topics tbody tr", has_text=LONG_TOPIC)
            .locator("td:nth-child(4)", has_text="0")
            .wait_for()
        )
        await page.screenshot(path=str(SCREENSHOT.with_name("status-page-read-only.png")))
    finally:
        for client in (writable, read_only):
            await client.stop()
        await http.stop()
        await ctrl.stop()


async def test_status_page_shows_a_warm_restart_until_the_brokers_register_again(
    browser_page: Any, tmp_path: Path
) -> None:
    """After a restart the header says how many recovered brokers are still provisional and
    each one's row says so; a registration makes the broker (and then the server) normal."""
    page = browser_page

    def server(port: int = 0) -> NamesrvController:
        config = NamesrvConfig(
            listen_port=port,
            kv_config_path=str(tmp_path / "kv.json"),
            config_store_path=str(tmp_path / "ns.properties"),
            journal_dir=str(tmp_path / "journal"),
            instance_name="status-warm",
            http_port=0,
        )
        return NamesrvController(config, host="127.0.0.1")

    first = server()
    await first.start()
    recovered = broker(first, "broker-warm", 10911, {"Payments": (4, 4, 6)})
    assert all(o.ok for o in await recovered.start())
    await first.stop()
    ctrl = server(first.port)  # the address the broker registers with
    await ctrl.start()
    http = HttpServer(ctrl.view)
    await http.start("127.0.0.1", 0)
    try:
        await page.goto(f"http://127.0.0.1:{http.port}/")
        ready = page.locator("#ready")
        await page.locator("#ready", has_text="recovering: 1 provisional").wait_for()
        assert "warn" in (await ready.get_attribute("class") or "")
        assert "not registered again" in (await ready.get_attribute("title") or "")
        row = page.locator(".cluster tr.broker", has_text="127.0.0.1:10911")
        assert await row.locator(".pill.provisional").inner_text() == "provisional"

        assert all(o.ok for o in await recovered.register_all())
        await page.locator("#ready", has_text="ready").wait_for()
        await row.locator(".pill.provisional").wait_for(state="detached")
    finally:
        await recovered.stop()
        await http.stop()
        await ctrl.stop()
