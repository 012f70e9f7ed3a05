"""A worker of a fair queue killed with ``kill -9`` mid-drain: two worker processes
drain three tenants' jobs from the fair queue, one is killed while it holds leased
attempts; its attempts are taken again once their leases expire, and every job
completes exactly once."""

from __future__ import annotations

import signal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from legato.runtime import Roles
from legato.schema import RunEvents, TaskQueue, Tasks, TaskState
from tests.fair_app import Job, app, tenant_flow
from tests.helpers import count_rows, eventually, started_processes

RUNS = 240


async def test_kill_9_of_a_fair_queue_worker_loses_and_doubles_nothing(
    engine: AsyncEngine, database_url: str
) -> None:
    async with Client(engine, app=app) as client:
        await client.deploy(app)
        jobs = [Job(tenant=f"tenant-{n % 3}", n=n, seconds=0.05) for n in range(RUNS)]
        jobs += [Job(tenant="burst", n=RUNS + n, seconds=0.05) for n in range(RUNS)]
        handles = await client.start_many(tenant_flow, jobs)
        # Deciders, timers and the lease sweeper here; the workers are real processes.
        async with Runtime(engine, app, roles=Roles(worker=False), poll_interval=0.2):
            with started_processes() as start:
                workers = [
                    start(
                        "tests.e2e.procs",
                        "worker",
                        "--app",
                        "tests.fair_app",
                        "--database-url",
                        database_url,
                        "--concurrency",
                        "8",
                        "--lease",
                        "2",
                    )
                    for _ in range(2)
                ]

                async def victim_holds_leases() -> bool:
                    leased = await count_rows(
                        engine,
                        TaskQueue,
                        TaskQueue.lease_owner.like(f"%:{workers[0].pid}:%"),
                    )
                    done = await count_rows(engine, Tasks, Tasks.state == TaskState.COMPLETED)
                    return leased > 0 and done >= len(jobs) // 4

                await eventually(
                    victim_holds_leases, "the first worker to hold leases mid-drain", timeout=90
                )
                workers[0].send_signal(signal.SIGKILL)
                workers[0].wait()
                results = [await handle.result(timeout=120) for handle in handles]
    assert results == [job.n for job in jobs]
    async with engine.connect() as conn:
        completions = await conn.execute(
            select(RunEvents.run_id, func.count())
            .where(RunEvents.type == "task_completed")
            .group_by(RunEvents.run_id)
        )
        per_run = dict(completions.all())
    assert len(per_run) == len(jobs)
    assert set(per_run.values()) == {1}, "a completion was applied twice"
