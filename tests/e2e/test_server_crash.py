"""PostgreSQL itself crashes and comes back while a decider process and a worker process
run three-step chains: every run finishes with its output, every step completed exactly
once, and no attempt's body ran twice.

The crash is ``pg_ctl -m immediate`` on a server of the test's own: its processes quit
at once, with no checkpoint, and WAL the server had not written is lost. Across two
processes a decision that queues an attempt commits without waiting for its WAL flush
(docs/design.md, "A decision commits without waiting for its flush"): a crash may take
such a decision with it, before any worker could claim its attempt, and it is then made
again from the run's durable rows."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunHandle, RunStatus, TaskState
from legato.db import create_engine
from legato.embedded import LocalPostgres
from legato.migrations import upgrade
from legato.schema import DecideQueue, Runs, TaskQueue, Tasks
from legato.schema.tables import TableColumns
from tests.e2e import handoff_flows
from tests.helpers import count_rows, started_processes

pytestmark = pytest.mark.timeout(300)

CRASHES = 3
WAVE = 30  # runs started before each crash
MAX_RUNS = 600


def _tally(directory: Path) -> Counter[tuple[str, str, int]]:
    lines = [
        line.split() for path in directory.glob("*.tally") for line in path.read_text().splitlines()
    ]
    return Counter((run_id, node_id, int(attempt)) for run_id, node_id, attempt in lines)


async def _count(engine: AsyncEngine, table: TableColumns, *where: ColumnElement[bool]) -> int:
    """``count_rows``; -1 while the server does not answer (it is recovering)."""
    try:
        return await count_rows(engine, table, *where)
    except Exception:
        await engine.dispose()  # the pool's connections died with the server
        return -1


async def _at_work(engine: AsyncEngine, wave: list[uuid.UUID]) -> bool | None:
    """True once a run of ``wave`` finished while attempts are running: the moment to
    crash; None when the whole wave finished first (another wave is needed)."""
    finished = await _count(engine, Runs, Runs.id.in_(wave), Runs.status != RunStatus.RUNNING)
    if finished == len(wave):
        return None
    return finished > 0 and await _count(engine, Tasks, Tasks.state == TaskState.RUNNING) > 0


async def test_runs_finish_once_across_postgresql_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tally_dir = tmp_path / "tally"
    tally_dir.mkdir()
    monkeypatch.setenv(handoff_flows.TALLY_DIR_ENV, str(tally_dir))
    server = LocalPostgres(data_dir=tmp_path / "pg" / "data").start()
    url = server.url()
    engine = create_engine(url)
    try:
        await upgrade(engine, "legato")
        async with Client(engine, app=handoff_flows.app) as client:
            await client.deploy()
        args = ("--database-url", url, "--app", "tests.e2e.handoff_flows", "--lease", "5")
        handles: list[RunHandle[int]] = []
        deadline = time.monotonic() + 180
        with started_processes() as start:
            processes = [
                start("tests.e2e.procs", "decider+timer", *args),
                start("tests.e2e.procs", "worker", *args),
            ]
            crashes = 0
            while crashes < CRASHES:
                assert len(handles) < MAX_RUNS, "no crash found attempts running"
                await engine.dispose()  # connections from before the last crash are dead
                async with Client(engine, app=handoff_flows.app) as client:
                    wave = await client.start_many(
                        handoff_flows.three_steps, list(range(len(handles), len(handles) + WAVE))
                    )
                handles += wave
                while (at_work := await _at_work(engine, [h.run_id for h in wave])) is False:
                    assert time.monotonic() < deadline, "the processes did not start the wave"
                    await asyncio.sleep(0.01)
                if at_work:
                    server.crash()
                    await asyncio.sleep(0.3)
                    server.start()
                    crashes += 1
            while await _count(engine, Runs, Runs.status == RunStatus.RUNNING) != 0:
                assert time.monotonic() < deadline, "runs left unfinished"
                await asyncio.sleep(0.05)
            assert all(p.poll() is None for p in processes), "a process died"
        async with engine.connect() as conn:
            outputs = dict((await conn.execute(select(Runs.id, Runs.output))).all())
            statuses = dict((await conn.execute(select(Runs.id, Runs.status))).all())
            rows = (
                await conn.execute(select(Tasks.run_id, Tasks.node_id, Tasks.attempt, Tasks.state))
            ).all()
        assert {statuses[h.run_id] for h in handles} == {RunStatus.SUCCEEDED}
        assert [outputs[h.run_id] for h in handles] == [n + 3 for n in range(len(handles))]
        tally = _tally(tally_dir)
        attempts = {(str(run_id), node, attempt): state for run_id, node, attempt, state in rows}
        # Every body that ran is an attempt of record, and ran once.
        assert set(tally) <= set(attempts)
        assert set(tally.values()) == {1}
        # Each step completed exactly once, by an attempt whose body ran.
        done = TaskState.COMPLETED
        completed = Counter(key[:2] for key, state in attempts.items() if state is done)
        assert len(completed) == len(handles) * 3 and set(completed.values()) == {1}
        assert all(key in tally for key, state in attempts.items() if state is done)
        assert await count_rows(engine, TaskQueue) == 0
        assert await count_rows(engine, DecideQueue) == 0
    finally:
        await engine.dispose()
        server.stop()
