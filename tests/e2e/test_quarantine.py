"""A run whose decision keeps failing backs off, is quarantined, and resumes once fixed,
while other runs keep flowing."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunNotFound, RunStatus, Runtime, uuid7
from legato.engine.loops.decider import decision_retry_delay
from legato.runtime import Roles
from legato.schema import DecideQueue, WorkflowDefinitions
from tests.e2e import flows
from tests.integration.test_cli_runtime import legato_here, one_line_error


async def _decide_row(engine: AsyncEngine, run_id: uuid.UUID) -> tuple[int, str | None, bool]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(
                    DecideQueue.failures, DecideQueue.last_error, DecideQueue.quarantined_at
                ).where(DecideQueue.run_id == run_id)
            )
        ).one()
    return row[0], row[1], row[2] is not None


async def _until_quarantined(engine: AsyncEngine, run_id: uuid.UUID, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (await _decide_row(engine, run_id))[2]:
        assert time.monotonic() < deadline, "the run was never quarantined"
        await asyncio.sleep(0.05)


def test_decision_back_off_doubles_up_to_its_cap() -> None:
    base, cap = timedelta(seconds=2), timedelta(minutes=5)
    delays = [decision_retry_delay(n, base, cap).total_seconds() for n in range(1, 12)]
    assert delays[:4] == [2, 4, 8, 16]
    assert max(delays) == 300 and delays[-1] == 300


async def test_failing_decision_backs_off_is_quarantined_and_resumes(
    engine: AsyncEngine,
    client: Client,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = await client.start(flows.chain, 1)
    async with engine.begin() as conn:  # a corrupted stored spec: decide() cannot load it
        spec = (
            await conn.execute(
                select(WorkflowDefinitions.spec).where(WorkflowDefinitions.name == "chain")
            )
        ).scalar_one()
        await conn.execute(
            update(WorkflowDefinitions.table)
            .where(WorkflowDefinitions.name == "chain")
            .values(spec={"corrupted": True})
        )
    runtime = Runtime(
        engine,
        flows.app,
        roles=Roles(deploy=False),
        poll_interval=0.1,
        max_decision_failures=3,
        decision_retry_delay=timedelta(milliseconds=200),
    )
    caplog.set_level(logging.INFO, logger="legato")
    await runtime.start()
    try:
        good = await client.start(flows.fanout, "a b")
        assert await good.result(timeout=30) == ["A", "B"]
        await _until_quarantined(engine, bad.run_id, timeout=30)
        failures, last_error, _ = await _decide_row(engine, bad.run_id)
        assert failures == 3
        assert last_error is not None and "ValidationError" in last_error

        # One line per failure, with a doubling delay; one ERROR when parked.
        retries = [
            float(m.group(1))
            for r in caplog.records
            if str(bad.run_id) in r.getMessage()
            and (m := re.search(r"retrying in ([0-9.]+)s", r.getMessage()))
        ]
        assert retries == [0.2, 0.4]
        assert all(r.exc_info is None for r in caplog.records if "retrying in" in r.getMessage())
        parked = [r for r in caplog.records if "quarantined after 3" in r.getMessage()]
        assert len(parked) == 1 and parked[0].levelno == logging.ERROR

        # Quarantined: the deciders skip it while other runs keep flowing.
        later = await client.start(flows.chain, 2)  # chain is still corrupted ...
        other = await client.start(flows.fanout, "c")
        assert await other.result(timeout=30) == ["C"]
        assert (await _decide_row(engine, bad.run_id))[0] == 3
        await _until_quarantined(engine, later.run_id, timeout=30)
        assert [q.run_id for q in await client.list_quarantined()] == [later.run_id, bad.run_id]
        listed = await legato_here(
            capsys, "runs", "list", "--quarantined", "--database-url", database_url
        )
        assert listed.rc == 0 and str(bad.run_id) in listed.out and "ValidationError" in listed.out

        # Fixed, then resumed: it finishes, and nothing is left quarantined.
        async with engine.begin() as conn:
            await conn.execute(
                update(WorkflowDefinitions.table)
                .where(WorkflowDefinitions.name == "chain")
                .values(spec=spec)
            )
        resumed = await legato_here(
            capsys, "runs", "resume", str(bad.run_id), "--database-url", database_url
        )
        assert resumed.rc == 0, resumed
        assert await bad.result(timeout=30) == 5
        assert await client.resume(later.run_id) is True
        assert await later.result(timeout=30) == 7
        assert await client.list_quarantined() == []
        assert await client.resume(bad.run_id) is False
        again = await legato_here(
            capsys, "runs", "resume", str(bad.run_id), "--database-url", database_url
        )
        one_line_error(again, "not quarantined")
        with pytest.raises(RunNotFound):
            await client.resume(uuid7())
        assert (await client.get_run(bad.run_id)).run.status is RunStatus.SUCCEEDED
    finally:
        await runtime.stop()
