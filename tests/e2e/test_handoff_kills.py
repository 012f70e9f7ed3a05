"""kill -9 of a process running both roles while its decisions hand attempts to its own
worker: the leases die with it, expire, and another process finishes every run, each
attempt's body having run at most once and every completed attempt exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus, Runtime, TaskState
from legato.schema import DecideQueue, Runs, TaskQueue, Tasks
from tests.e2e import handoff_flows
from tests.helpers import count_rows, eventually, started_processes

MAX_RUNS = 300


def _handed(path: Path) -> int:
    return int(path.read_text()) if path.exists() else 0


def _tally(directory: Path) -> Counter[tuple[str, str, int]]:
    lines = [
        line.split() for path in directory.glob("*.tally") for line in path.read_text().splitlines()
    ]
    return Counter((run_id, node_id, int(attempt)) for run_id, node_id, attempt in lines)


async def test_kill_9_mid_hand_offs_then_another_process_finishes_every_run(
    engine: AsyncEngine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tally_dir = tmp_path / "tally"
    tally_dir.mkdir()
    monkeypatch.setenv(handoff_flows.TALLY_DIR_ENV, str(tally_dir))
    handed_file = tmp_path / "handed"
    async with Client(engine, app=handoff_flows.app) as client:
        await client.deploy()
        with started_processes() as start:
            victim = start("tests.e2e.handoff_procs", database_url, str(handed_file))
            first = await client.start(handoff_flows.three_steps, 0)
            assert await first.result(timeout=60) == 3  # the victim is up
            # Then runs arrive one at a time, each once the one before has finished, as
            # at low load, where decisions hand off (a backlog leaves the attempts to
            # the worker's claim, and runs started at a fixed pace are a backlog on a
            # loaded machine), until the victim has handed off 30 attempts; it is killed
            # with more in flight: runs go on arriving, without waiting, until attempts
            # are seen running, and the kill follows that read.
            handles = [first]
            while _handed(handed_file) < 30:
                assert len(handles) < MAX_RUNS, "the victim hands off nothing"
                handles.append(await client.start(handoff_flows.three_steps, len(handles)))
                await handles[-1].result(timeout=60)
            while await _running_attempts(engine) < 2:
                assert len(handles) < MAX_RUNS, "no attempt of the victim is seen running"
                handles.append(await client.start(handoff_flows.three_steps, len(handles)))
            assert victim.poll() is None
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        handed_by_victim = _handed(handed_file)
        # A poll a second (its sweeper times the victim's leases out, its loops look at
        # the keys they take over): each poll starts a claim round that reserves every
        # free slot, so polling faster leaves its decisions nothing to hand off on a
        # loaded machine.
        async with Runtime(engine, handoff_flows.app, poll_interval=1.0) as survivor:
            await eventually(
                lambda: _none_running(engine), "every run to finish", timeout=90, interval=0.2
            )
            assert survivor.handoff is not None and survivor.handoff.handed > 0
        async with engine.connect() as conn:
            outputs = dict((await conn.execute(select(Runs.id, Runs.output))).all())
            statuses = dict((await conn.execute(select(Runs.id, Runs.status))).all())
            rows = (
                await conn.execute(
                    select(Tasks.run_id, Tasks.node_id, Tasks.attempt, Tasks.state, Tasks.error)
                )
            ).all()
    assert handed_by_victim >= 30
    assert all(statuses[h.run_id] is RunStatus.SUCCEEDED for h in handles)
    assert [outputs[h.run_id] for h in handles] == [n + 3 for n in range(len(handles))]
    tally = _tally(tally_dir)
    attempts = {
        (str(run_id), node_id, attempt): (state, error)
        for run_id, node_id, attempt, state, error in rows
    }
    # Every body that ran is an attempt of record, and ran once.
    assert set(tally) <= set(attempts)
    assert set(tally.values()) == {1}
    # Each step completed exactly once, by an attempt whose body ran.
    completed = Counter(
        (run, node) for (run, node, _), (s, _) in attempts.items() if s is TaskState.COMPLETED
    )
    assert len(completed) == len(handles) * 3 and set(completed.values()) == {1}
    assert all(key in tally for key, (state, _) in attempts.items() if state is TaskState.COMPLETED)
    # The attempts the kill interrupted (handed off or claimed, in flight) were timed out
    # by the lease sweeper and retried.
    lost = [error for state, error in attempts.values() if state is not TaskState.COMPLETED]
    assert lost, "the kill landed between attempts: nothing was in flight"
    assert {state for state, _ in attempts.values()} == {TaskState.COMPLETED, TaskState.TIMED_OUT}
    assert {error.type for error in lost if error is not None} == {"LeaseExpired"}
    assert await count_rows(engine, TaskQueue) == 0
    assert await count_rows(engine, DecideQueue) == 0


async def _running_attempts(engine: AsyncEngine) -> int:
    return await count_rows(engine, Tasks, Tasks.state == TaskState.RUNNING)


async def _none_running(engine: AsyncEngine) -> bool:
    return await count_rows(engine, Runs, Runs.status == RunStatus.RUNNING) == 0
