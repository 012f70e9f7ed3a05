"""The dashboard's ASGI app over plain HTTP on a real database: filters, escaping,
the live history's resume by Last-Event-ID, the pages of runs whose spec no longer
validates, what a page shows at a glance (timeline, badges, parent and child links,
compact history), and every refusal (CSRF, token, read-only, bad input) answered with
a 4xx page that names the problem."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from examples.orders import Line, Order, orders
from examples.signup import Confirmed, Signup, signup
from legato import App, Client, Runtime
from legato.cli.stats import gather
from legato.engine.repositories import decide_queue
from legato.models import HistoryEvent
from legato.schema import DEFAULT_SHARD_COUNT, RunStatus, Shards, WorkflowDefinitions
from legato.ui import create_app
from legato.ui.timeline import drawn
from tests.e2e.flows import chain, parent

APP = App(workflows=[signup, orders, parent, chain])
XSS = "<script>window.__xss = 1</script>"
SHARDS = Shards(DEFAULT_SHARD_COUNT)


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=APP) as legato:
        yield legato


def http(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080")


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match, "the page has no action form"
    return match.group(1)


async def test_runs_list_filters_by_workflow_status_time_and_search(client: Client) -> None:
    ada = await client.start(signup, Signup(email="ada@example.com"), idempotency_key="k-ada")
    bob = await client.start(signup, Signup(email="bob@example.com"))
    order = await client.start(orders, Order(order_id="o-1", lines=[Line(sku="tea", quantity=1)]))
    await client.cancel(bob.run_id)
    async with http(create_app(client)) as web:
        every = (await web.get("/")).text
        assert all(str(h.run_id) in every for h in (ada, bob, order))

        only_orders = (await web.get("/", params={"workflow": "orders"})).text
        assert str(order.run_id) in only_orders
        assert str(ada.run_id) not in only_orders

        by_key = (await web.get("/", params={"q": "k-ada"})).text
        assert str(ada.run_id) in by_key and str(bob.run_id) not in by_key
        by_id = (await web.get("/", params={"q": str(order.run_id)})).text
        assert str(order.run_id) in by_id and str(ada.run_id) not in by_id

        future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        assert str(ada.run_id) not in (await web.get("/", params={"from": future})).text
        assert str(ada.run_id) in (await web.get("/", params={"to": future})).text

        # Keyset pages: one run a page, following the "older" link down to the first run.
        seen = []
        url = "/?limit=1"
        while url:
            page = (await web.get(url)).text
            seen += re.findall(r'data-run="([0-9a-f-]{36})"', page)
            older = re.search(r'class="older" href="([^"]+)"', page)
            url = older.group(1).replace("&amp;", "&") if older else ""
        assert seen == [str(h.run_id) for h in (order, bob, ada)]

    running = await client.list_runs(status=RunStatus.RUNNING)
    assert {r.id for r in running.runs} == {ada.run_id, bob.run_id, order.run_id}


async def test_payloads_render_as_text(client: Client) -> None:
    handle = await client.start(signup, Signup(email=f"{XSS}@example.com"))
    async with http(create_app(client)) as web:
        page = await web.get(f"/runs/{handle.run_id}")
        listing = await web.get("/")
    assert page.status_code == 200
    assert "<script>window" not in page.text
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;@example.com" in page.text
    assert 'data-node="user"' in page.text or "<svg" in page.text
    assert "<script>window" not in listing.text


async def test_actions_refused_without_csrf_and_when_read_only(client: Client) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with http(create_app(client, read_only=False)) as web:
        page = await web.get(f"/runs/{handle.run_id}")
        token = csrf_of(page)
        forged = await web.post(f"/runs/{handle.run_id}/cancel", data={"csrf": "forged"})
        assert forged.status_code == 403
        assert "CSRF" in forged.text
        cross_site = await web.post(
            f"/runs/{handle.run_id}/cancel",
            data={"csrf": token},
            headers={"origin": "http://evil.example"},
        )
        assert cross_site.status_code == 403
        assert "another site" in cross_site.text
        assert not (await client.get_run(handle.run_id)).run.cancel_requested

        bad_json = await web.post(
            f"/runs/{handle.run_id}/signal",
            data={"csrf": token, "name": "signup.confirmed", "payload": "{nope"},
        )
        assert bad_json.status_code == 400 and "not valid JSON" in bad_json.text
        for payload, says in [
            ("[" * 5000 + "]" * 5000, "more than 100 levels deep"),
            ('{"n": ' + "9" * 5000 + "}", "5,000-digit number is too long"),
            ("NaN", "not JSON"),
        ]:
            refused = await web.post(
                f"/runs/{handle.run_id}/signal",
                data={"csrf": token, "name": "signup.confirmed", "payload": payload},
            )
            assert refused.status_code == 400 and says in refused.text, refused.text[:300]
        empty = await web.post(
            f"/runs/{handle.run_id}/cancel", data={"csrf": ""}, cookies={"legato_csrf": ""}
        )
        assert empty.status_code == 403 and "CSRF" in empty.text
        bad_model = await web.post(
            f"/runs/{handle.run_id}/signal",
            data={"csrf": token, "name": "signup.confirmed", "payload": '{"cod": 1}'},
        )
        assert bad_model.status_code == 400
        unknown_event = await web.post(
            f"/runs/{handle.run_id}/signal",
            data={"csrf": token, "name": "signup.other", "payload": "{}"},
        )
        assert unknown_event.status_code == 400 and "signup.confirmed" in unknown_event.text

        cancelled = await web.post(f"/runs/{handle.run_id}/cancel", data={"csrf": token})
        assert cancelled.status_code == 303
        assert (await client.get_run(handle.run_id)).run.cancel_requested

    other = await client.start(signup, Signup(email="bob@example.com"))
    async with http(create_app(client)) as web:  # read-only by default
        page = await web.get(f"/runs/{other.run_id}")
        assert 'id="cancel"' not in page.text
        token = page.cookies.get("legato_csrf") or ""
        refused = await web.post(f"/runs/{other.run_id}/cancel", data={"csrf": token})
        assert refused.status_code == 403
        assert "read-only" in refused.text
    assert not (await client.get_run(other.run_id)).run.cancel_requested


async def test_token_is_required_when_set(client: Client) -> None:
    async with http(create_app(client, token="s3cret")) as web:
        assert (await web.get("/")).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer s3cret"})).status_code == 200
        signed_in = await web.get("/workflows?token=s3cret")
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == "/workflows"
        assert (await web.get("/workflows")).status_code == 200  # the cookie now


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/runs/not-a-run", 400, "not a UUID"),
        (f"/runs/{uuid.uuid4()}", 404, "no run"),
        ("/?limit=1000000", 400, "limit"),
        ("/?limit=-1", 400, "limit"),
        ("/?status=BOGUS", 400, "not a run status"),
        ("/?from=yesterday", 400, "not a time"),
        ("/?from=2025-02-01&to=2025-01-01", 400, "range is empty"),
        ("/?before=xyz", 400, "not a run id"),
        ("/?workflow=" + "w" * 300, 400, "workflow"),
        ("/?nonsense=1", 400, "unknown parameter"),
        ("/workflows/signup/abc", 400, "whole number"),
        ("/workflows/signup/%C2%B2", 400, "whole number"),  # "²": a digit to isdigit(), not int()
        ("/?limit=%C2%B2", 400, "limit"),
        ("/?version=0", 400, "version"),
        ("/workflows/nope/1", 404, "no stored version"),
        ("/workflows/a%00b/1", 400, "unprintable character U+0000"),
        ("/workflows/team/signup/1", 404, "of workflow &#39;team/signup&#39;"),
        ("/no/such/page", 404, "no page"),
        (f"/runs/{uuid.uuid4()}/events", 404, "no run"),
    ],
)
async def test_bad_input_is_a_4xx_page(client: Client, path: str, status: int, says: str) -> None:
    async with http(create_app(client)) as web:
        response = await web.get(path)
    assert response.status_code == status
    assert says in response.text
    assert response.headers["content-type"].startswith("text/html")


async def test_bad_input_on_a_run(client: Client) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with http(create_app(client)) as web:
        for of, says in [("nothing", "ask for input"), ("task:zzz:input", "not a task id")]:
            response = await web.get(f"/runs/{handle.run_id}/payload", params={"of": of})
            assert response.status_code == 400 and says in response.text
        for of, says in [("event:\u00b2", "ask for input"), ("event:" + "9" * 30, "no history")]:
            response = await web.get(f"/runs/{handle.run_id}/payload", params={"of": of})
            assert response.status_code in (400, 404) and says in response.text, response.text
        events = await web.get(f"/runs/{handle.run_id}/events", headers={"last-event-id": "x"})
        assert events.status_code == 400
        superscript = await web.get(f"/runs/{handle.run_id}/events", params={"after": "\u00b2"})
        assert superscript.status_code == 400 and "must be a history seq" in superscript.text
        get_cancel = await web.get(f"/runs/{handle.run_id}/cancel")
        assert get_cancel.status_code == 405


async def test_pages_of_a_finished_run_and_its_history_stream(client: Client) -> None:
    async with Runtime(client.engine, APP, poll_interval=0.1):
        handle = await client.start(signup, Signup(email="ada@example.com"))
        await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
        await handle.result(timeout=30)
        placed = await client.start(
            orders, Order(order_id="o-2", lines=[Line(sku="tea", quantity=2)] * 3)
        )
        await placed.result(timeout=30)
    history = (await client.get_run(handle.run_id)).history
    dashboard = create_app(client)
    async with dashboard.router.lifespan_context(dashboard), http(dashboard) as web:
        stream = await web.get(f"/runs/{handle.run_id}/events", headers={"last-event-id": "2"})
        page = (await web.get(f"/runs/{placed.run_id}")).text
        workflows = (await web.get("/workflows")).text
        spec = await web.get("/workflows/orders/1")
        queues = await web.get("/queues")
        quarantine = await web.get("/quarantine")
    ids = [int(i) for i in re.findall(r"^id: (\d+)$", stream.text, re.MULTILINE)]
    assert ids == [e.seq for e in history if e.seq > 2]
    assert stream.text.rstrip().endswith("event: end\ndata: finished")
    # Before the end, the header, graph, timeline and attempts as they now are.
    runs = re.findall(r"^event: run\ndata: (.*)$", stream.text, re.MULTILINE)
    header = json.loads(runs[-1])
    assert "state-SUCCEEDED" in header["run-status"]
    assert {"run-meta", "graph", "timeline", "attempts-body"} <= header.keys()
    assert stream.headers["content-type"].startswith("text/event-stream")
    # The graph: every node completed but the express branch the switch skipped, and
    # one cell per map iteration.
    assert 'data-node="map-reserve" data-state="COMPLETED"' in page
    assert 'data-state="SKIPPED"' in page
    assert page.count('class="iter state-COMPLETED"') == 3
    assert "PaymentGatewayBusy" in page  # the failed attempts of the flaky charge
    assert 'data-workflow="orders" data-version="1"' in workflows
    assert spec.status_code == 200 and "max_concurrency" in spec.text
    assert queues.status_code == 200
    assert quarantine.status_code == 200


async def test_mounted_under_a_prefix(client: Client) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    handle = await client.start(signup, Signup(email="ada@example.com"))
    host = Starlette(routes=[Mount("/legato", create_app(client))])
    async with http(host) as web:
        listing = await web.get("/legato/")
        page = await web.get(f"/legato/runs/{handle.run_id}")
        css = await web.get("/legato/static/legato.css")
    assert listing.status_code == 200
    assert f'href="/legato/runs/{handle.run_id}"' in listing.text
    assert page.status_code == 200 and 'src="/legato/static/legato.js"' in page.text
    assert css.status_code == 200


def test_cli_refuses_to_serve_beyond_loopback_without_a_token(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from legato.cli import main

    assert main(["ui", "--database-url", database_url, "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("legato: error: --host '0.0.0.0' is reachable") and "--token" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_refuses_a_port_in_use(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from legato.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert main(["ui", "--database-url", database_url, "--port", port]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"legato: error: cannot listen on 127.0.0.1:{port}")
    assert len(err.strip().splitlines()) == 1


async def test_quarantined_runs_are_listed_and_resumed_from_the_page(
    client: Client, engine: AsyncEngine
) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with engine.begin() as conn:  # park it the way the decider does after N failures
        await decide_queue.record_failure(
            conn, SHARDS.of_run(handle.run_id), handle.run_id, 10, f"KeyError: {XSS}", None
        )
    async with http(create_app(client)) as web:  # read-only: listed, no resume button
        listed = await web.get("/quarantine")
        assert listed.status_code == 200
        assert str(handle.run_id) in listed.text
        assert XSS not in listed.text and "&lt;script&gt;" in listed.text
        assert "/resume" not in listed.text
    async with http(create_app(client, read_only=False)) as web:
        page = await web.get("/quarantine")
        resumed = await web.post(f"/runs/{handle.run_id}/resume", data={"csrf": csrf_of(page)})
        assert resumed.status_code == 303
        assert await client.list_quarantined() == []
        again = await web.post(f"/runs/{handle.run_id}/resume", data={"csrf": csrf_of(page)})
        assert again.status_code == 400 and "not quarantined" in again.text


async def test_a_run_whose_spec_no_longer_validates_still_has_its_pages(
    client: Client, engine: AsyncEngine
) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with engine.begin() as conn:  # the stored spec rots; the decider parks the run
        await conn.execute(
            update(WorkflowDefinitions.table)
            .where(WorkflowDefinitions.name == "signup")
            .values(spec={"name": "signup", "nodes": "no longer a list"})
        )
        await decide_queue.record_failure(
            conn, SHARDS.of_run(handle.run_id), handle.run_id, 10, "ValidationError: nodes", None
        )
    async with http(create_app(client)) as web:
        run_page = await web.get(f"/runs/{handle.run_id}")
        version_page = await web.get("/workflows/signup/1")
        listing = await web.get("/")
    for page in (run_page, version_page):
        assert page.status_code == 200
        assert "no longer validates" in page.text
        assert "validation error" in page.text  # pydantic's own explanation
        assert "no longer a list" in page.text  # the raw stored spec
    assert 'data-type="run_started"' in run_page.text  # its history
    assert "QUARANTINED" in run_page.text and "ValidationError: nodes" in run_page.text
    row = re.search(rf'<tr class="run" data-run="{handle.run_id}".*?</tr>', listing.text, re.S)
    assert row and "QUARANTINED" in row.group(0)


async def test_queues_page_counts_decisions_as_legato_stats_does(
    client: Client, engine: AsyncEngine
) -> None:
    await client.start(signup, Signup(email="ada@example.com"))  # due for a decision
    parked = await client.start(signup, Signup(email="bob@example.com"))
    async with engine.begin() as conn:
        await decide_queue.record_failure(
            conn, SHARDS.of_run(parked.run_id), parked.run_id, 10, "KeyError: x", None
        )
    async with http(create_app(client)) as web:
        page = (await web.get("/queues")).text
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        figures = await gather(autocommit, timedelta(hours=24), datetime.now(UTC))
    decide = figures["decide_queue"]
    assert isinstance(decide, dict)
    shown = re.search(r'id="decide-depth">(\d+) runs? waiting for a decision', page)
    assert shown and int(shown.group(1)) == decide["depth"] == 1
    assert figures["quarantined_runs"] == 1 and "1 quarantined run" in page


async def test_run_pages_read_at_a_glance(client: Client) -> None:
    async with Runtime(client.engine, APP, poll_interval=0.1):
        family = await client.start(parent, 3)
        await family.result(timeout=30)
        placed = await client.start(
            orders, Order(order_id="o-3", lines=[Line(sku="tea", quantity=1)] * 30)
        )
        await placed.result(timeout=30)
    parent_details = await client.get_run(family.run_id)
    (child_id,) = [t.task_id for t in parent_details.tasks if t.node_id == "child-chain"]
    order = await client.get_run(placed.run_id)
    async with http(create_app(client)) as web:
        listing = (await web.get("/")).text
        parent_page = (await web.get(f"/runs/{family.run_id}")).text
        child_page = (await web.get(f"/runs/{child_id}")).text
        order_page = (await web.get(f"/runs/{placed.run_id}")).text

    # Lists: a duration column, and a child run badged with a link to its parent.
    child_row = re.search(rf'<tr class="run" data-run="{child_id}".*?</tr>', listing, re.S)
    assert child_row and 'class="badge child"' in child_row.group(0)
    assert f'href="/runs/{family.run_id}"' in child_row.group(0)
    assert re.search(r'class="nowrap duration">\d+ ms|class="nowrap duration">[\d.]+ s', listing)
    # Parent <-> child links outside any JSON.
    assert re.search(rf'child runs: <a class="run-id" href="/runs/{child_id}"', parent_page)
    assert re.search(rf'child of <a class="run-id" href="/runs/{family.run_id}"', child_page)

    # The timeline: one bar per attempt that took time, the retries in the charge's lane.
    bars = re.findall(r'<g class="bar (work|wait) [^"]*" data-node="([^"]+)"', order_page)
    assert len(bars) == sum(1 for t in order.tasks if drawn(t))
    assert [node for _, node in bars].count("charge") == 3
    assert ("wait", "sleep") in bars
    # One row per attempt, tracebacks once each as text (two failed charges), none left
    # in a JSON string; 30 map attempts and their events one line each.
    assert order_page.count('<tr class="attempt"') == len(order.tasks)
    assert order_page.count("Traceback (most recent call last)") == 2
    assert "&#34;traceback&#34;" not in order_page and "\\n  File" not in order_page
    assert order_page.count('<li class="event') == len(order.history)
    assert order_page.count('href="#attempt-charge-0-1">traceback</a>') == 1


def test_a_cached_completion_is_badged(client: Client) -> None:
    dashboard = create_app(client).state.dashboard
    moment = datetime.now(UTC)
    run_id = uuid.uuid4()
    cached = HistoryEvent(7, "task_completed", "n", 0, 1, {"output": 1, "cached": True}, moment)
    ran = HistoryEvent(8, "task_completed", "n", 0, 1, {"output": 1}, moment)
    assert 'class="badge cached"' in dashboard.history_row(run_id, cached, "")
    assert "cached" not in dashboard.history_row(run_id, ran, "")
