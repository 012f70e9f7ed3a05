"""Engine invariants that need no extra processes: fencing, idempotency, bad input,
graceful shutdown."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    IncompatibleDatabase,
    InvalidInput,
    InvalidRunId,
    PayloadTooLarge,
    RunFinished,
    RunNotFound,
    RunStatus,
    Runtime,
    TaskState,
    UnknownWorkflow,
    create_engine,
    uuid7,
)
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import queue_leases, tasks
from legato.runtime import Roles
from legato.schema import DecideQueue, IdempotencyKeys, RunEvents, Runs, Signals, Tasks
from tests.e2e import flows
from tests.helpers import eventually


async def _count(engine: AsyncEngine, table: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())  # type: ignore[arg-type]


async def _rows(engine: AsyncEngine) -> dict[str, int]:
    return {
        "runs": await _count(engine, Runs.table),
        "tasks": await _count(engine, Tasks.table),
        "signals": await _count(engine, Signals.table),
        "events": await _count(engine, RunEvents.table),
        "decide": await _count(engine, DecideQueue.table),
        "keys": await _count(engine, IdempotencyKeys.table),
    }


async def test_a_stale_report_changes_nothing(
    runtime: Runtime, client: Client, engine: AsyncEngine
) -> None:
    handle = await client.start(flows.chain, 1)
    assert await handle.result(timeout=20) == 5
    details = await client.get_run(handle.run_id)
    done = details.tasks[0]
    shard = (await client.shards()).of_run(handle.run_id)
    stale = tasks.Transition(
        run_id=handle.run_id,
        task_id=done.task_id,
        attempt=done.attempt,
        state=TaskState.FAILED,
        from_states=(TaskState.RUNNING,),
    )
    async with engine.begin() as conn:
        assert await apply_reports(conn, [Report(stale, shard)], "test") == 0
    wrong_attempt = tasks.Transition(
        run_id=handle.run_id,
        task_id=done.task_id,
        attempt=done.attempt + 1,
        state=TaskState.FAILED,
    )
    async with engine.begin() as conn:
        assert await apply_reports(conn, [Report(wrong_attempt, shard)], "test") == 0
    after = await client.get_run(handle.run_id)
    assert after.tasks == details.tasks
    assert after.run.status is RunStatus.SUCCEEDED


async def test_concurrent_starts_with_one_key_make_one_run(
    client: Client, engine: AsyncEngine
) -> None:
    handles = await asyncio.gather(
        *(client.start(flows.chain, 1, idempotency_key="order-42") for _ in range(10))
    )
    assert len({h.run_id for h in handles}) == 1
    assert await _count(engine, Runs.table) == 1
    again = await client.start(flows.chain, 1, idempotency_key="order-42")
    assert again.run_id == handles[0].run_id


async def test_bad_input_is_refused_and_writes_nothing(client: Client, engine: AsyncEngine) -> None:
    finished = await client.start(flows.chain, 1)  # a run we then finish by hand below
    before = await _rows(engine)
    with pytest.raises(UnknownWorkflow, match="nosuch"):
        await client.start("nosuch", {})
    with pytest.raises(InvalidInput, match="chain"):
        await client.start(flows.chain, "not a number")  # type: ignore[arg-type]
    with pytest.raises(InvalidRunId, match="not a UUIDv7"):
        await client.start(flows.chain, 1, run_id=uuid.uuid4())
    from_2019 = uuid7(int(datetime(2019, 5, 1, tzinfo=UTC).timestamp() * 1000))
    with pytest.raises(InvalidRunId, match="outside every runs partition"):
        await client.start(flows.chain, 1, run_id=from_2019)
    with pytest.raises(PayloadTooLarge, match="limit"):
        await client.start(flows.signup, flows.Signup(email="x" * (1 << 20)))
    with pytest.raises(RunNotFound):
        await client.signal(uuid7(), "signup.confirmed", flows.Confirmed(code="x"))
    with pytest.raises(InvalidInput, match="approval"):
        await client.signal(finished.run_id, "approval", {"approved": True})  # chain has no wait
    assert await _rows(engine) == before
    async with engine.begin() as conn:
        await conn.execute(
            Runs.table.update().where(Runs.id == finished.run_id).values(status=RunStatus.SUCCEEDED)
        )
    before = await _rows(engine)
    with pytest.raises(RunFinished):
        await client.cancel(finished.run_id)
    with pytest.raises(RunFinished):
        await client.signal(finished.run_id, "signup.confirmed", {"code": "x"})
    assert await _rows(engine) == before


async def test_a_client_supplied_uuid7_is_used(client: Client) -> None:
    run_id = uuid7()
    handle = await client.start(flows.chain, 1, run_id=run_id)
    assert handle.run_id == run_id
    assert (await client.get_run(run_id)).run.workflow_name == "chain"


async def test_signal_ids_are_uuid7_made_by_the_server(client: Client, engine: AsyncEngine) -> None:
    handle = await client.start(flows.signup, flows.Signup(email="a@example.com"))
    for code in ("one", "two", "three"):
        await client.signal(handle.run_id, "signup.confirmed", flows.Confirmed(code=code))
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(Signals.id, Signals.payload)
                .where(Signals.run_id == handle.run_id)
                .order_by(Signals.id)
            )
        ).all()
        version = int((await conn.exec_driver_sql("SHOW server_version_num")).scalar_one())
        definition = (
            await conn.exec_driver_sql("SELECT pg_get_functiondef('legato.uuid7_v1'::regproc)")
        ).scalar_one()
    assert [payload for _, payload in rows] == [{"code": c} for c in ("one", "two", "three")]
    assert all(signal_id.version == 7 for signal_id, _ in rows)
    assert ("uuidv7()" in definition) == (version >= 180000)


async def test_reads_survive_the_server_closing_pooled_connections(
    client: Client, database_url: str
) -> None:
    handle = await client.start(flows.chain, 1)
    await client.list_runs()  # leaves an idle connection in the client's pool
    admin = create_engine(database_url, "legato")
    try:
        async with admin.connect() as conn:  # as a database restart would
            killed = await conn.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert killed.scalar_one() >= 1
    finally:
        await admin.dispose()
    assert (await client.get_run(handle.run_id)).run.workflow_name == "chain"
    assert [run.id for run in (await client.list_runs()).runs] == [handle.run_id]


async def test_graceful_shutdown_releases_unfinished_attempts(
    engine: AsyncEngine, client: Client
) -> None:
    flows.CALLS.clear()
    runtime = Runtime(engine, flows.app, poll_interval=0.1, grace_period=0.2)
    await runtime.start()
    handle = await client.start(flows.endless, "g1")
    await eventually(lambda: "forever g1 started" in flows.CALLS, "the endless task to start")
    assert runtime.worker is not None
    owner = runtime.worker.worker_id
    await runtime.stop()
    async with engine.connect() as conn:
        assert await queue_leases.leased_by(conn, owner) == 0
    details = await client.get_run(handle.run_id)
    assert [t.state for t in details.tasks] == [TaskState.QUEUED]
    # Another worker takes the released attempt at once (no lease expiry to wait for).
    flows.CALLS.clear()
    again = Runtime(
        engine,
        flows.app,
        roles=Roles(decider=False, timer=False),
        poll_interval=0.1,
        grace_period=0.2,
    )
    await again.start()
    try:
        await eventually(
            lambda: "forever g1 started" in flows.CALLS,
            "another worker to take the released attempt",
            timeout=5,
        )
        assert (await client.get_run(handle.run_id)).tasks[0].attempt == 1
    finally:
        await again.stop()


async def test_a_worker_leaves_tasks_its_code_does_not_have(
    engine: AsyncEngine, client: Client
) -> None:
    """Rolling deploys: an old worker must not fail a task that only newer code has."""
    old_code = App(workflows=[flows.sleepy])  # knows `record`, not `add_one`/`double`
    decider = Runtime(engine, flows.app, roles=Roles(worker=False), poll_interval=0.1)
    old_worker = Runtime(
        engine, old_code, roles=Roles(decider=False, timer=False), poll_interval=0.1
    )
    await decider.start()
    await old_worker.start()
    try:
        handle = await client.start(flows.chain, 1)
        await asyncio.sleep(1.0)
        details = await client.get_run(handle.run_id)
        assert [t.state for t in details.tasks] == [TaskState.QUEUED]
        new_worker = Runtime(
            engine, flows.app, roles=Roles(decider=False, timer=False), poll_interval=0.1
        )
        await new_worker.start()
        try:
            assert await handle.result(timeout=20) == 5
        finally:
            await new_worker.stop()
    finally:
        await old_worker.stop()
        await decider.stop()


async def test_the_runtime_refuses_an_unmigrated_database(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        with pytest.raises(IncompatibleDatabase, match="legato db upgrade"):
            await Runtime(engine, flows.app).start()
    finally:
        await engine.dispose()
