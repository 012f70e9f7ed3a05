"""kill -9 of a worker mid-attempt: the progress it wrote before the kill is kept, and
the retried attempt's progress follows it, told apart by its attempt number."""

from __future__ import annotations

import signal

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from tests.helpers import eventually, started_processes
from tests.integration.test_progress import _stored
from tests.progress_app import Steps, app, hang_first_flow


async def test_progress_written_before_a_worker_kill_is_kept(
    engine: AsyncEngine, database_url: str
) -> None:
    async with Client(engine, app=app) as client:
        with started_processes() as start:
            victim = start(
                "tests.e2e.procs",
                "all",
                "--database-url",
                database_url,
                "--app",
                "tests.progress_app",
                "--lease",
                "2",
            )
            handle = await client.start(hang_first_flow, Steps(count=3))

            async def first_attempt_reported() -> bool:
                return len(await _stored(engine, handle.run_id)) == 3

            await eventually(first_attempt_reported, "the first attempt's entries", timeout=60)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        # The victim's attempt lease expires; this process's loops retry the task.
        async with Runtime(engine, app, poll_interval=0.1):
            assert await handle.result(timeout=60) == 2
        entries = [entry async for entry in client.stream(handle.run_id)]
    assert [(entry.seq, entry.attempt, entry.value) for entry in entries] == [
        (seq, attempt, {"attempt": attempt, "step": step})
        for seq, (attempt, step) in enumerate(
            [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)], start=1
        )
    ]
    assert len({entry.task_id for entry in entries}) == 2  # one row per attempt
