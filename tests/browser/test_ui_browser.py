"""``legato ui`` as a real process, driven by a real headless Chromium (Debian's
``chromium`` + ``chromium-driver`` through Selenium), on a fresh database whose runs of
the examples a ``legato dev`` process executes.

Skipped, with the reason, where Chromium is not installed; ``.ci/run`` installs it.
Screenshots go to the folder the test prints ($LEGATO_UI_SCREENSHOTS, or a temporary one).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from examples.orders import Line, Order, orders
from examples.signup import Confirmed, Signup, signup
from legato import Client, RunStatus
from legato.ui.timeline import drawn
from tests.browser.apps import app as examples_app
from tests.helpers import spawn_legato

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

if CHROMIUM is None or CHROMEDRIVER is None or importlib.util.find_spec("selenium") is None:
    pytest.skip(
        "SKIPPED the browser test: it needs Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver) and selenium (legato[dev]); "
        ".ci/run installs them",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402  # after the skip: selenium may be missing
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

XSS = "<script>window.__xss = 1</script>"


async def _spawn(database_url: str, *args: str) -> asyncio.subprocess.Process:
    env = {"LEGATO_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return await spawn_legato(*args, env=env, stderr=asyncio.subprocess.STDOUT)


async def _line_with(process: asyncio.subprocess.Process, marker: str) -> str:
    assert process.stdout is not None
    seen = ""
    async with asyncio.timeout(60):
        while True:
            line = (await process.stdout.readline()).decode()
            if not line:
                raise AssertionError(f"the process exited before printing {marker!r}: {seen}")
            seen += line
            if marker in line:
                return line


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    """Wait for a condition (polled), failing with ``what`` if it never holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture
async def ui_url(database_url: str) -> AsyncIterator[str]:
    """``legato dev`` running the examples, and ``legato ui`` with actions on."""
    dev = await _spawn(
        database_url, "dev", "--app", "tests.browser.apps:app", "--poll-interval", "0.2"
    )
    ui = None
    try:
        await _line_with(dev, "deployed orders")
        ui = await _spawn(
            database_url, "ui", "--port", "0", "--allow-actions", "--app", "tests.browser.apps:app"
        )
        banner = await _line_with(ui, "legato ui: serving ")
        yield banner.split("serving ", 1)[1].split()[0].rstrip("/")
    finally:
        if ui is not None:
            await _stop(ui)
        await _stop(dev)


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="legato-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def screenshots(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> Path:
    folder = Path(os.environ.get("LEGATO_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui"))
    folder.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nlegato ui browser test: screenshots in {folder}")
    return folder


def wait(driver: Any, condition: Callable[[Any], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def read(driver: Any, css: str, attribute: str | None = None) -> str | None:
    """An element's text (or attribute) in one step: the live page swaps elements out,
    so a WebElement found first may be stale by the time it is read."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "var e = document.querySelector(arguments[0]);"
        "return e && (arguments[1] ? e.getAttribute(arguments[1]) : e.textContent.trim());",
        css,
        attribute,
    )


async def test_dashboard_in_chromium(
    database_url: str,
    ui_url: str,
    browser: Any,
    screenshots: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with await Client.connect(database_url, app=examples_app) as client:
        done = await client.start(signup, Signup(email="ada@example.com"))
        await client.signal(done.run_id, "signup.confirmed", Confirmed(code="c0de"))
        waiting = await client.start(signup, Signup(email="bob@example.com"))
        doomed = await client.start(signup, Signup(email="eve@example.com"))
        hostile = await client.start(signup, Signup(email=f"{XSS}@example.com"))
        order = await client.start(
            orders, Order(order_id="o-1", lines=[Line(sku="tea", quantity=2)] * 3)
        )
        await done.result(timeout=30)
        await order.result(timeout=30)

        # The runs list, each id and time on one line, then filtered through the form.
        browser.get(f"{ui_url}/")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
        assert {r.get_attribute("data-workflow") for r in rows} == {"signup", "orders"}
        lines = browser.execute_script(  # an inline element wrapped has a box per line
            "return Array.from(document.querySelectorAll('tr.run code, tr.run time'))"
            ".map(e => e.getClientRects().length);"
        )
        assert lines and set(lines) == {1}
        browser.save_screenshot(str(screenshots / "ui-runs.png"))
        Select(browser.find_element(By.NAME, "workflow")).select_by_value("orders")
        browser.find_element(By.ID, "apply").click()
        wait(browser, lambda d: "workflow=orders" in d.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
        assert [r.get_attribute("data-run") for r in rows] == [str(order.run_id)]
        Select(browser.find_element(By.NAME, "workflow")).select_by_value("signup")
        Select(browser.find_element(By.NAME, "status")).select_by_value("RUNNING")
        browser.find_element(By.ID, "apply").click()
        wait(browser, lambda d: "status=RUNNING" in d.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
        shown = {r.get_attribute("data-run") for r in rows}
        assert shown == {str(waiting.run_id), str(doomed.run_id), str(hostile.run_id)}

        # A finished order: its graph coloured by state (map cells, the skipped branch)
        # and its history.
        browser.get(f"{ui_url}/runs/{order.run_id}")
        graph = browser.find_element(By.CSS_SELECTOR, "svg.graph")
        assert graph.is_displayed()
        node = browser.find_element(By.CSS_SELECTOR, 'g.node[data-node="map-reserve"]')
        assert node.get_attribute("data-state") == "COMPLETED"
        assert len(node.find_elements(By.CSS_SELECTOR, "rect.iter")) == 3
        skipped = browser.find_element(By.CSS_SELECTOR, 'g.node[data-node="ship_express"]')
        assert skipped.get_attribute("data-state") == "SKIPPED"
        events = browser.find_elements(By.CSS_SELECTOR, "#history li.event")
        assert events[0].get_attribute("data-type") == "run_started"
        assert events[-1].get_attribute("data-type") == "run_succeeded"
        # Its timeline: one bar per attempt that took time, the charge's three attempts
        # (two failed, retried) in one lane, the sleep drawn as a wait.
        attempts = (await client.get_run(order.run_id)).tasks
        bars = browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.bar")
        assert sorted(
            (
                b.get_attribute("data-node"),
                b.get_attribute("data-iteration"),
                b.get_attribute("data-attempt"),
            )
            for b in bars
        ) == sorted((t.node_id, str(t.iteration), str(t.attempt)) for t in attempts if drawn(t))
        charge = [b for b in bars if b.get_attribute("data-node") == "charge"]
        assert [b.get_attribute("data-state") for b in charge] == ["FAILED", "FAILED", "COMPLETED"]
        lefts = [b.find_element(By.CSS_SELECTOR, "rect.span").rect["x"] for b in charge]
        assert lefts == sorted(lefts) and len(set(lefts)) == 3  # successive bars
        sleep = browser.find_element(By.CSS_SELECTOR, 'svg.timeline g.bar[data-node="sleep"]')
        assert "wait" in (sleep.get_attribute("class") or "")
        browser.save_screenshot(str(screenshots / "ui-run.png"))
        timeline = browser.find_element(By.ID, "timeline")
        browser.execute_script("arguments[0].scrollIntoView();", timeline)
        timeline.screenshot(str(screenshots / "ui-timeline.png"))
        # A history entry is one line; its payload unfolds on a click.
        first = events[1]
        assert first.size["height"] < 30
        first.find_element(By.TAG_NAME, "summary").click()
        wait(browser, lambda d: first.find_element(By.CSS_SELECTOR, "pre.payload").is_displayed())

        # A 30-line order: its page stays short (one line per event, one row per attempt).
        big = await client.start(
            orders, Order(order_id="o-30", lines=[Line(sku="cup", quantity=1)] * 30)
        )
        await big.result(timeout=60)
        browser.get(f"{ui_url}/runs/{big.run_id}")
        height = browser.execute_script("return document.documentElement.scrollHeight;")
        with capsys.disabled():
            print(f"legato ui browser test: a 30-item fan-out's run page is {height} px tall")
        assert height < 5000

        # The live page: a signal sent elsewhere shows up without a reload, in the
        # history, the header's status and the graph.
        browser.get(f"{ui_url}/runs/{waiting.run_id}")
        wait(browser, lambda d: d.find_element(By.ID, "live-state").text == "live")
        status, activate = "#run-status .badge", 'g.node[data-node="activate"]'
        assert read(browser, status) == "RUNNING"
        assert read(browser, activate, "data-state") == "PENDING"
        browser.execute_script("window.__same_page = true;")
        await client.signal(waiting.run_id, "signup.confirmed", Confirmed(code="live"))
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'li[data-type="run_succeeded"]'))
        wait(browser, lambda d: read(d, status) == "SUCCEEDED")
        assert read(browser, activate, "data-state") == "COMPLETED"
        assert read(browser, 'svg.timeline g.bar[data-node="activate"]', "data-state")
        assert browser.execute_script("return window.__same_page === true;")
        assert "finished" in browser.find_element(By.ID, "live-state").text
        browser.save_screenshot(str(screenshots / "ui-live.png"))

        # Cancel from the page.
        browser.get(f"{ui_url}/runs/{doomed.run_id}")
        browser.find_element(By.ID, "cancel").click()

        async def cancelled() -> bool:
            return (await client.get_run(doomed.run_id)).run.status is RunStatus.CANCELLED

        await until(cancelled, "the run cancelled from the page to finish CANCELLED")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'li[data-type="run_cancelled"]'))
        browser.save_screenshot(str(screenshots / "ui-cancelled.png"))

        # A payload holding a script is shown as text and never runs.
        browser.get(f"{ui_url}/runs/{hostile.run_id}")
        text = browser.find_element(By.CSS_SELECTOR, ".io pre.payload").text
        assert f"{XSS}@example.com" in text
        assert browser.execute_script("return window.__xss === undefined;")
        browser.save_screenshot(str(screenshots / "ui-escaped.png"))
