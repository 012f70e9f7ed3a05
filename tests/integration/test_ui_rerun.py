"""The dashboard's Rerun form (only with actions allowed, CSRF-checked like cancel and
resume) and the links between a run and its reruns, both ways, on a real database."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.schema import Runs
from legato.schema.types import uuid7
from legato.ui import create_app
from tests.helpers import count_rows
from tests.integration import rerun_apps as apps
from tests.integration.test_ui_http import csrf_of, http


async def test_the_rerun_button_and_the_links_both_ways(engine: AsyncEngine) -> None:
    (original,) = await apps.fail_runs(engine, 1)
    async with Client(engine, app=apps.buggy) as client:
        async with http(create_app(client)) as web:  # read-only by default
            page = await web.get(f"/runs/{original}")
            assert page.status_code == 200 and 'id="rerun"' not in page.text
            token = page.cookies.get("legato_csrf") or ""
            refused = await web.post(f"/runs/{original}/rerun", data={"csrf": token})
            assert refused.status_code == 403 and "read-only" in refused.text

        async with http(create_app(client, read_only=False)) as web:
            page = await web.get(f"/runs/{original}")
            assert 'id="rerun"' in page.text
            assert "<option>fetch</option><option>price</option><option>store</option>" in page.text
            token = csrf_of(page)
            forged = await web.post(f"/runs/{original}/rerun", data={"csrf": "forged"})
            assert forged.status_code == 403 and "CSRF" in forged.text
            unknown = await web.post(
                f"/runs/{original}/rerun",
                data={"csrf": token, "from_node": "charge", "version": "original"},
            )
            assert unknown.status_code == 400 and "no node &#39;charge&#39;" in unknown.text
            for path, form, status, says in [
                (f"/runs/{original}/rerun", {"from_node": "\x01"}, 400, "unprintable"),
                (f"/runs/{original}/rerun", {"from_node": "x" * 5000}, 400, "200-character"),
                (f"/runs/{original}/rerun", {"version": "latest"}, 400, "must be &#39;deployed"),
                ("/runs/nope/rerun", {}, 400, "&#39;nope&#39; is not a UUID"),
                (f"/runs/{uuid7()}/rerun", {"version": "original"}, 404, "no run"),
            ]:
                refused = await web.post(path, data={"csrf": token, **form})
                assert refused.status_code == status and says in refused.text, (form, refused.text)
            for method in ("GET", "PUT", "DELETE"):
                wrong = await web.request(method, f"/runs/{original}/rerun")
                assert wrong.status_code == 405, method
            assert await count_rows(engine, Runs, Runs.rerun_of.is_not(None)) == 0

            started = await web.post(
                f"/runs/{original}/rerun",
                data={"csrf": token, "from_node": "", "version": "original"},
            )
            assert started.status_code == 303
            location = started.headers["location"]
            match = re.fullmatch(r"/runs/([0-9a-f-]{36})", location)
            assert match is not None
            rerun = match.group(1)
            assert (await client.get_run(rerun)).rerun_of == original

            page = await web.get(location)
            assert re.search(rf'id="rerun-of">rerun of <a [^>]*href="/runs/{original}"', page.text)
            assert 'id="rerun"' not in page.text  # it is running: nothing to rerun yet
            page = await web.get(f"/runs/{original}")
            assert re.search(rf'id="reruns">rerun as <a [^>]*href="/runs/{rerun}"', page.text)


async def test_the_runs_list_filters_as_runs_list_does(engine: AsyncEngine) -> None:
    # The dashboard's criteria are legato runs list's: version, error type, the node that
    # failed, the time range; each page shows exactly the runs Client.list_runs chooses.
    failed = set(await apps.fail_runs(engine, 2))
    async with Client(engine) as client:
        await client.deploy(apps.fixed)
        pending = (await client.start("orders", 9)).run_id  # no runtime: RUNNING, version 2
        async with http(create_app(client)) as web:

            async def shown(**params: str) -> set[str]:
                page = await web.get("/", params=params)
                assert page.status_code == 200, page.text
                return set(re.findall(r'data-run="([0-9a-f-]{36})"', page.text))

            every = {str(run_id) for run_id in (*failed, pending)}
            assert await shown() == every
            assert await shown(version="1") == {str(run_id) for run_id in failed}
            assert await shown(version="2") == {str(pending)}
            assert await shown(error_type="ValueError", node="price") == every - {str(pending)}
            assert await shown(error_type="KeyError") == set()
            assert await shown(node="fetch") == set()  # fetch completed in every run
            assert await shown(status="timed_out") == set()
            listed = await client.list_runs(version=1, error_type="ValueError", node="price")
            assert {str(run.id) for run in listed.runs} == await shown(
                version="1", error_type="ValueError", node="price"
            )
            page = await web.get("/", params={"node": "price", "version": "1"})
            assert 'name="node" value="price"' in page.text  # the form keeps what was asked
            asked: list[tuple[list[tuple[str, str]], str]] = [
                ([("version", "0")], "version=&#39;0&#39; must be a whole number from 1 to"),
                ([("version", "²")], "must be a whole number"),
                ([("version", "9" * 40)], "must be a whole number"),
                ([("limit", "²")], "limit=&#39;²&#39; must be a whole number"),
                ([("node", "x" * 300)], "node"),
                ([("error_type", "a\x00b")], "error_type"),
                ([("status", "failed"), ("status", "running")], "&#39;status&#39; is given more"),
            ]
            for params, says in asked:
                refused = await web.get("/", params=tuple(params))
                assert refused.status_code == 400 and says in refused.text, (params, refused.text)
