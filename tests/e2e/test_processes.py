"""Crash recovery and concurrency with real processes (``tests/e2e/procs.py``)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus, Runtime, TaskState
from legato.runtime import Roles
from legato.schema import DecideQueue, RunEvents, Runs, TaskQueue, Tasks
from tests.e2e import flows
from tests.helpers import count_rows, eventually, started_processes

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(database_url: str) -> Iterator[Spawn]:
    """Start ``tests/e2e/procs.py`` processes; any still alive are killed afterwards."""
    with started_processes() as start:

        def spawn(
            role: str, *extra: str, env: dict[str, str] | None = None
        ) -> subprocess.Popen[bytes]:
            return start("tests.e2e.procs", role, "--database-url", database_url, *extra, env=env)

        yield spawn


@pytest_asyncio.fixture
async def helper_runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    """Timer and lease sweeper in the test process (no decider, no worker)."""
    rt = Runtime(engine, flows.app, roles=Roles(decider=False, worker=False), poll_interval=0.2)
    await rt.start()
    yield rt
    await rt.stop()


async def _scalar(engine: AsyncEngine, statement: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(statement)).scalar_one())  # type: ignore[call-overload]


async def test_kill_9_worker_mid_task_then_another_worker_finishes_it(
    engine: AsyncEngine, client: Client, spawn: Spawn, helper_runtime: Runtime, tmp_path: Path
) -> None:
    spawn("decider")
    victim = spawn("worker", "--lease", "1", env={flows.BLOCK_DIR_ENV: str(tmp_path)})
    handle = await client.start(flows.crashy_flow, "k9")
    marker = tmp_path / "k9"
    await eventually(marker.exists, "the task to start in the victim worker", timeout=30)
    assert int(marker.read_text()) == victim.pid
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    spawn("worker", "--lease", "1")  # no block dir: attempt 2 completes
    assert await handle.result(timeout=60) == "k9 done by attempt 2"
    details = await client.get_run(handle.run_id)
    attempts = sorted((t.attempt, t.state) for t in details.tasks)
    assert attempts == [(1, TaskState.TIMED_OUT), (2, TaskState.COMPLETED)]
    (lost,) = [t for t in details.tasks if t.attempt == 1]
    assert lost.error is not None and lost.error.type == "LeaseExpired"
    completions = [e for e in details.history if e.type == "task_completed"]
    assert len(completions) == 1  # the output was applied exactly once
    assert await count_rows(engine, TaskQueue) == 0


async def test_kill_9_decider_mid_decision_leaves_nothing_half_applied(
    engine: AsyncEngine, client: Client, spawn: Spawn, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    victim = spawn("decider", "--pause-decision", str(marker))
    handle = await client.start(flows.chain, 1)
    await eventually(marker.exists, "the decider to pause inside a decision", timeout=30)
    assert marker.read_text() == str(handle.run_id)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The decision's writes were never committed: no task, no history beyond the start,
    # and the run is still queued for a decision.
    assert await count_rows(engine, Tasks) == 0
    assert await count_rows(engine, RunEvents) == 1
    assert await count_rows(engine, DecideQueue) == 1
    spawn("all")
    assert await handle.result(timeout=60) == 5
    details = await client.get_run(handle.run_id)
    assert sorted((t.task_name, t.attempt) for t in details.tasks) == [
        ("add_one", 1),
        ("add_one", 1),
        ("double", 1),
    ]
    assert [e.seq for e in details.history] == list(range(1, len(details.history) + 1))


@pytest.mark.slow
async def test_two_deciders_and_two_workers_finish_500_runs(
    engine: AsyncEngine, client: Client, spawn: Spawn
) -> None:
    processes = [spawn("decider"), spawn("decider"), spawn("worker"), spawn("worker")]
    handles = await client.start_many(flows.chain, list(range(500)))

    async def all_finished() -> bool:
        assert all(p.poll() is None for p in processes), "a process died"
        return await count_rows(engine, Runs, Runs.status == RunStatus.RUNNING) == 0

    await eventually(all_finished, "all 500 runs to finish", timeout=180, interval=0.25)
    for proc in processes:
        proc.send_signal(signal.SIGTERM)
    for proc in processes:
        assert proc.wait(timeout=30) == 0
    async with engine.connect() as conn:
        outputs = dict((await conn.execute(select(Runs.id, Runs.output))).all())
        per_run = (
            await conn.execute(
                select(Tasks.run_id, func.count(), func.max(Tasks.attempt))
                .where(Tasks.state == TaskState.COMPLETED)
                .group_by(Tasks.run_id)
            )
        ).all()
        gaps = (
            await conn.execute(
                select(func.count()).select_from(
                    select(RunEvents.run_id)
                    .group_by(RunEvents.run_id)
                    .having(func.max(RunEvents.seq) != func.count())
                    .subquery()
                )
            )
        ).scalar_one()
        leftovers = [
            (await conn.execute(select(func.count()).select_from(t))).scalar_one()
            for t in (DecideQueue.table, TaskQueue.table)
        ]
    assert {outputs[h.run_id] for h in handles} == {(n + 1) * 2 + 1 for n in range(500)} - set()
    assert all(outputs[h.run_id] == (i + 1) * 2 + 1 for i, h in enumerate(handles))
    assert len(per_run) == 500
    assert all(count == 3 and max_attempt == 1 for _, count, max_attempt in per_run)
    assert await count_rows(engine, Tasks) == 1500
    assert gaps == 0
    assert leftovers == [0, 0]
