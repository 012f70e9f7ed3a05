"""The dashboard's Rerun form (only with actions allowed, CSRF-checked like cancel and
resume) and the links between a run and its reruns, both ways, on a real database."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.schema import Runs
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
