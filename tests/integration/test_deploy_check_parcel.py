"""``check_deploy`` flags a changed output type and a removed event model against runs
of ``parcel`` left in flight on a real PostgreSQL (each has weighed and waits for
``parcel.packed``); the other kinds of change are in ``test_deploy_check.py``."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Roles, Runtime, TaskState, check_deploy
from tests.integration import deploy_check_parcel_apps as apps

RUNS = 2


@pytest.fixture
async def in_flight(engine: AsyncEngine) -> list[uuid.UUID]:
    roles = Roles(decider=True, worker=True, timer=False)
    async with (
        Runtime(engine, apps.current, roles=roles, poll_interval=0.1, grace_period=5),
        Client(engine, app=apps.current) as client,
    ):
        handles = [
            await client.start(apps.parcel, apps.Order(order_id=f"p-{i}")) for i in range(RUNS)
        ]
        async with asyncio.timeout(30):
            for handle in handles:
                while True:
                    rows = {t.node_id: t.state for t in (await client.get_run(handle.run_id)).tasks}
                    if rows.get("weigh") is TaskState.COMPLETED and "parcel.packed" in rows:
                        break
                    await asyncio.sleep(0.05)
    return [handle.run_id for handle in handles]


def risks(report: object) -> list[tuple[str, str, str, int]]:
    versions = report.versions  # type: ignore[attr-defined]
    assert [(v.workflow, v.version, v.runs_in_flight) for v in versions] == [("parcel", 1, RUNS)]
    return [(r.node, r.kind, r.reason, r.runs) for r in versions[0].risks]


async def test_a_changed_output_type(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.output_changed)
    assert not report.ok and report.runs_at_risk == RUNS
    [(node, kind, reason, runs)] = risks(report)
    assert (node, kind, runs) == ("post", "task", RUNS)
    assert reason == (
        "task 'post' input 1 may refuse node 'label' (task 'label'): "
        "$.code: string may be passed, but integer is expected"
    )


async def test_a_removed_event_model(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.event_removed)
    assert not report.ok
    assert (
        "parcel.packed",
        "event",
        "event 'parcel.packed': workflow 'parcel' of the new app no longer waits for it, so a "
        "client with the new app refuses the signal",
        RUNS,
    ) in risks(report)


async def test_the_code_of_today_strands_nothing(
    engine: AsyncEngine, in_flight: list[uuid.UUID]
) -> None:
    report = await check_deploy(engine, apps.current)
    assert report.ok and report.runs_in_flight == RUNS and report.runs_at_risk == 0
