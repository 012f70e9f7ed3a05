"""A bulk rerun killed mid-way (``kill -9`` of the real ``legato runs rerun``
process) and started again finishes the rest and reruns no run twice.

The test holds one original's row lock, so the first command stops exactly there
(after 50 reruns, as its progress line says), and kills it while it waits."""

from __future__ import annotations

import asyncio
import re

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.schema import Runs
from tests.helpers import count_rows, run_legato, spawn_legato
from tests.integration import rerun_apps as apps

RUNS = 120
BEFORE_THE_LOCK = 50  # the runs the first command reruns (newest first) before it waits
COMMAND = ("runs", "rerun", "--workflow", "orders", "--status", "failed", "--from", "price")


async def test_a_killed_bulk_rerun_run_again_finishes_the_rest_once(
    engine: AsyncEngine, database_url: str
) -> None:
    originals = await apps.fail_runs(engine, RUNS)
    async with Client(engine) as client:
        await client.deploy(apps.fixed)
    newest_first = sorted(originals, reverse=True)
    blocker = newest_first[BEFORE_THE_LOCK]
    async with engine.connect() as holder:
        await holder.execute(
            text("SELECT 1 FROM legato.runs WHERE id = :id FOR UPDATE"), {"id": blocker}
        )
        process = await spawn_legato(*COMMAND, "--yes", "--database-url", database_url)
        assert process.stderr is not None
        progress = ""
        async with asyncio.timeout(60):
            while f" {BEFORE_THE_LOCK}/{RUNS} " not in progress:
                line = (await process.stderr.readline()).decode()
                assert line, f"the command ended early: {progress}"
                progress = line
        assert re.search(rf"rerun \[[#.]+\] {BEFORE_THE_LOCK}/{RUNS} \(done 50,", progress)
        process.kill()  # SIGKILL: no clean-up
        await process.wait()
        await holder.rollback()
    assert await count_rows(engine, Runs, Runs.rerun_of.is_not(None)) == BEFORE_THE_LOCK

    again = await run_legato(*COMMAND, "--yes", database_url=database_url)
    assert again.status == 0, again
    assert f"rerun: {RUNS} runs: {RUNS - BEFORE_THE_LOCK} done, {BEFORE_THE_LOCK} skipped" in (
        again.stdout
    )
    async with engine.connect() as conn:
        per_original = (
            await conn.execute(
                select(Runs.rerun_of, func.count())
                .where(Runs.rerun_of.is_not(None))
                .group_by(Runs.rerun_of)
            )
        ).all()
    assert {original for original, _ in per_original} == set(originals)
    assert {count for _, count in per_original} == {1}
