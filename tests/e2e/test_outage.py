"""Runs flow through repeated connection losses: every backend of the database is
terminated again and again while decider and worker processes work, and every run still
finishes exactly once, with one log line per failure and no tracebacks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunStatus
from legato.schema import DecideQueue, Runs, TaskQueue, Tasks, TaskState
from tests.e2e import flows

ROOT = Path(__file__).resolve().parents[2]


async def _scalar(engine: AsyncEngine, statement: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(statement)).scalar_one())  # type: ignore[call-overload]


async def _terminate_others(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        killed = await conn.exec_driver_sql(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(killed.scalar_one())


def _start(role: str, database_url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.procs", role, "--database-url", database_url],
            cwd=ROOT,
            env=dict(os.environ),
            stderr=stderr,
        )


async def test_runs_finish_while_backends_are_terminated(
    engine: AsyncEngine, client: Client, database_url: str, tmp_path: Path
) -> None:
    logs = [tmp_path / f"{role}.log" for role in ("all", "worker")]
    procs = [_start(log.stem, database_url, log) for log in logs]
    try:
        handles = await client.start_many(flows.chain, list(range(400)))
        running = (
            select(func.count()).select_from(Runs.table).where(Runs.status == RunStatus.RUNNING)
        )
        finished = (
            select(func.count()).select_from(Runs.table).where(Runs.status != RunStatus.RUNNING)
        )
        killed = terminated = 0
        deadline = time.monotonic() + 180
        while await _scalar(engine, running):
            assert time.monotonic() < deadline, "runs left unfinished"
            assert all(p.poll() is None for p in procs), "a process died"
            flowing = await _scalar(engine, finished) >= 10
            if flowing and killed < 6:  # six rounds of every connection dying, then rest
                killed += 1
                terminated += await _terminate_others(engine)
            await asyncio.sleep(0.2)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    async with engine.connect() as conn:
        outputs = dict((await conn.execute(select(Runs.id, Runs.output))).all())
        completed = (
            await conn.execute(
                select(Tasks.run_id, Tasks.node_id, func.count())
                .where(Tasks.state == TaskState.COMPLETED)
                .group_by(Tasks.run_id, Tasks.node_id, Tasks.iteration)
            )
        ).all()
    assert [outputs[h.run_id] for h in handles] == [(n + 1) * 2 + 1 for n in range(400)]
    assert len(completed) == 1200 and all(count == 1 for *_, count in completed)
    for table in (DecideQueue.table, TaskQueue.table):
        assert await _scalar(engine, select(func.count()).select_from(table)) == 0
    for log in logs:
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert "crashed" not in text, text[-3000:]
    assert terminated > 0
