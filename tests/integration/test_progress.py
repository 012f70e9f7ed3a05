"""Streaming progress: ``ctx.progress`` / ``ctx.stream`` entries are durable and ordered
per run, ``Client.stream`` resumes after a cursor and ends with the run, bad values and
values past the bounds are refused with nothing written, and every progress statement
stays within the run's shard key."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, InvalidArgument, ProgressEntry, RunNotFound, Runtime, SyncClient
from legato.progress import MAX_ATTEMPT_BYTES, MAX_ENTRY_BYTES
from legato.schema import uuid7
from legato.schema.tables import RunProgress
from legato.ui import create_app
from tests import progress_app
from tests.helpers import run_legato
from tests.integration.test_shard_statements import Sent, _check, recorded
from tests.integration.test_ui_http import http
from tests.progress_app import Steps, app, gated_flow, overreach_flow, report_flow


@pytest.fixture(autouse=True)
def _fresh_gate() -> Iterator[None]:
    progress_app.GATE = asyncio.Event()
    progress_app.REFUSED.clear()
    yield
    progress_app.REFUSED.clear()


async def _stored(engine: AsyncEngine, run_id: uuid.UUID) -> list[tuple[int, int, str, object]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(RunProgress.seq, RunProgress.attempt, RunProgress.kind, RunProgress.value)
            .where(RunProgress.run_id == run_id)
            .order_by(RunProgress.seq)
        )
        return [(seq, attempt, kind, value) for seq, attempt, kind, value in rows]


async def _all(client: Client, run_id: uuid.UUID, after: int = 0) -> list[ProgressEntry]:
    return [entry async for entry in client.stream(run_id, after=after)]


async def test_entries_are_ordered_and_a_stream_resumes_after_its_cursor(
    engine: AsyncEngine,
) -> None:
    # In the distributed layout, whose statements each touch one key (checked below).
    runtime = Runtime(engine, app, poll_interval=0.1, distributed=True)
    with recorded(engine) as sent:
        async with Client(engine, app=app) as client, runtime:
            handle = await client.start(report_flow, Steps(count=4))
            assert await handle.result(timeout=30) == 4
            entries = await _all(client, handle.run_id)
            resumed = await _all(client, handle.run_id, after=entries[2].seq)
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in entries] == [
        *({"step": step, "of": 4} for step in range(4)),
        "done ",
        "now",
    ]
    assert [e.kind for e in entries] == ["progress"] * 4 + ["text"] * 2
    assert {(e.node_id, e.iteration, e.attempt) for e in entries} == {(entries[0].node_id, 0, 1)}
    assert resumed == entries[3:]
    checked, failures = await _check(engine, [Sent(s.sql, s.params) for s in sent])
    assert not failures, "\n".join(failures)
    assert checked > 0


async def test_a_stream_yields_entries_while_the_task_runs_and_ends_with_the_run(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        handle = await client.start(gated_flow, Steps(count=1))
        entries = client.stream(handle.run_id)
        first = await asyncio.wait_for(anext(entries), timeout=30)
        assert first.value == {"started": True}
        assert not (await client.get_run(handle.run_id)).run.status.finished
        progress_app.GATE.set()
        rest = [entry async for entry in entries]  # ends when the run does
        assert [entry.value for entry in rest] == [{"finished": True}]
        assert (await client.get_run(handle.run_id)).run.status.finished


async def test_bad_values_and_values_past_the_bounds_are_refused_and_not_written(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        handle = await client.start(overreach_flow, Steps(count=0))
        kept = await handle.result(timeout=60)
    stored = await _stored(engine, handle.run_id)
    # Only what the bounds admitted: the first and last entries and the chunks that fit.
    assert len(stored) == kept
    assert stored[0][3] == "kept before" and stored[-1][3] == "kept after"
    chunks = stored[1:-1]
    assert all(kind == "text" for _, _, kind, _ in chunks)
    assert len(chunks) == MAX_ATTEMPT_BYTES // (MAX_ENTRY_BYTES - 8)
    not_json, not_text, too_big, past_attempt = progress_app.REFUSED
    assert "$ has the key 1, which is not a string" in not_json
    assert "ctx.stream(42) takes a str chunk, not a int" in not_text
    assert f"over the {MAX_ENTRY_BYTES}-byte bound of one entry" in too_big
    assert f"over the {MAX_ATTEMPT_BYTES}-byte bound of one attempt" in past_attempt


async def test_a_stream_of_a_bad_cursor_or_unknown_run_is_refused(engine: AsyncEngine) -> None:
    async with Client(engine, app=app) as client:
        with pytest.raises(RunNotFound, match="no run"):
            await _all(client, uuid7())
        with pytest.raises(InvalidArgument, match="after=-1 must be an int >= 0"):
            await _all(client, uuid7(), after=-1)


async def test_the_sync_client_streams_a_run_to_its_end(
    engine: AsyncEngine, database_url: str
) -> None:
    def scenario() -> list[object]:
        with SyncClient(database_url, app=app) as client:
            handle = client.start(report_flow, Steps(count=2))
            return [entry.value for entry in client.stream(handle.run_id, after=1)]

    async with Runtime(engine, app, poll_interval=0.1):
        values = await asyncio.to_thread(scenario)
    assert values == [{"step": 1, "of": 2}, "done ", "now"]


async def test_legato_runs_stream_prints_each_entry_after_the_cursor(
    engine: AsyncEngine, database_url: str
) -> None:
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        handle = await client.start(report_flow, Steps(count=2))
        await handle.result(timeout=30)
        node = (await _all(client, handle.run_id))[0].node_id
    outcome = await run_legato(
        "runs", "stream", str(handle.run_id), "--after", "1", database_url=database_url
    )
    assert outcome.status == 0, outcome.stderr
    assert outcome.stdout.splitlines() == [
        f'#2 {node} attempt 1: {{"of":2,"step":1}}',  # jsonb orders keys
        f'#3 {node} attempt 1: "done "',
        f'#4 {node} attempt 1: "now"',
        f"run {handle.run_id} SUCCEEDED",
    ]
    refused = await run_legato(
        "runs", "stream", str(handle.run_id), "--after", "x", database_url=database_url
    )
    assert refused.status == 2
    assert refused.stderr.startswith("legato: error: argument --after: not a progress seq")


async def test_the_run_page_shows_the_progress_and_its_stream_refreshes_it(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client, Runtime(engine, app, poll_interval=0.1):
        handle = await client.start(gated_flow, Steps(count=1))
        await asyncio.wait_for(anext(client.stream(handle.run_id)), timeout=30)
        dashboard = create_app(client)
        async with dashboard.router.lifespan_context(dashboard), http(dashboard) as web:
            running = (await web.get(f"/runs/{handle.run_id}")).text
            progress_app.GATE.set()
            await handle.result(timeout=30)
            stream = await web.get(f"/runs/{handle.run_id}/events")
    shown = re.search(r'<div id="progress">(.*?)</div>', running, re.DOTALL)
    assert shown is not None
    assert 'data-seq="1" data-attempt="1"' in shown.group(1)
    assert "&#34;started&#34;: true" in shown.group(1)
    assert "finished" not in shown.group(1)
    parts = re.findall(r"^event: run\ndata: (.*)$", stream.text, re.MULTILINE)
    refreshed = json.loads(parts[-1])["progress"]
    assert 'data-seq="2"' in refreshed and "&#34;finished&#34;: true" in refreshed
