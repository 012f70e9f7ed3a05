"""Schedules on the cluster: the schedule loop (on the coordinator's ``schedules``
table) starts each tick's run in its key on a worker node, once per tick, and the runs
finish."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus, Runtime
from legato.schema import Runs
from tests.helpers import eventually
from tests.integration.schedule_app import app
from tests.integration.test_schedules import _ticks, _wait_for


async def test_the_schedule_loop_starts_each_tick_once_and_the_runs_finish(
    citus_engine: AsyncEngine,
) -> None:
    engine = citus_engine
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        async with Runtime(engine, app, poll_interval=0.2):
            await _wait_for(engine, lambda fired: len(fired.get("all", [])) >= 3, timeout=90)

            async def three_finished() -> bool:
                async with engine.connect() as conn:
                    statuses = (await conn.execute(select(Runs.status))).scalars().all()
                return sum(s is RunStatus.SUCCEEDED for s in statuses) >= 3

            await eventually(three_finished, "three scheduled runs to finish", timeout=90)
            fired = await _ticks(engine)
    for name, ticks in fired.items():
        assert len(set(ticks)) == len(ticks), f"{name} fired a tick twice"
    async with engine.connect() as conn:
        statuses = (await conn.execute(select(Runs.status))).scalars().all()
    assert len(statuses) == sum(len(ticks) for ticks in fired.values()), "one run per tick"
