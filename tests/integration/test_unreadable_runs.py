"""A run whose stored rows no reader can load (an input nested thousands of levels deep,
written by SQL of one's own before migration 0022 refused it) fails its own decisions
and is quarantined in the end; the decider goes on deciding every other run."""

from __future__ import annotations

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, TaskContext, task, workflow
from legato.engine.loops.decider import DeciderLoop
from legato.schema import DEFAULT_SHARD_COUNT, DecideQueue, Shards
from legato.ui import create_app

DEEP = "[" * 3000 + "]" * 3000


@task()
async def greet(ctx: TaskContext, name: str) -> str:
    return f"hello {name}"


@workflow("unreadable.greeting")
def greeting(flow: Flow[str]) -> Node[str]:
    return flow.run(greet, flow.input)


app = App(workflows=[greeting])


async def test_a_run_no_reader_can_load_fails_alone(engine: AsyncEngine) -> None:
    decider = DeciderLoop(engine, shards=Shards(DEFAULT_SHARD_COUNT), poll_interval=600)
    async with Client(engine, app=app) as client:
        await client.deploy()
        good = await client.start(greeting, "ada")
        bad = await client.start(greeting, "bob")
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE legato.runs SET input = CAST(:deep AS jsonb) WHERE id = :id"),
                {"deep": DEEP, "id": bad.run_id},
            )
        await decider.tick()  # raised RecursionError, and the loop stopped, before
        decided = await client.get_run(good.run_id)
        async with engine.connect() as conn:
            failed = (
                await conn.execute(
                    select(DecideQueue.failures, DecideQueue.last_error).where(
                        DecideQueue.run_id == bad.run_id
                    )
                )
            ).one()
    assert [t.node_id for t in decided.tasks] == ["greet"]
    assert failed.failures == 1
    assert failed.last_error is not None and "RecursionError" in failed.last_error


async def test_the_dashboard_says_what_it_cannot_show(engine: AsyncEngine) -> None:
    async with Client(engine, app=app) as client:
        await client.deploy()
        bad = await client.start(greeting, "bob")
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE legato.runs SET input = CAST(:deep AS jsonb) WHERE id = :id"),
                {"deep": DEEP, "id": bad.run_id},
            )
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as web:
            page = await web.get(f"/runs/{bad.run_id}")
    assert page.status_code == 500
    assert "nests too deeply to be read back" in page.text
