"""Partition maintenance against a real server: concurrent ensure, retention, run-id checks."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.repositories import partitions
from legato.errors import ConfigurationError, InvalidRunId
from legato.schema import (
    NodeKind,
    RunEvents,
    Runs,
    RunStatus,
    Shards,
    Signals,
    Tasks,
    TaskState,
    WorkflowDefinitions,
    uuid7,
    uuid7_bound,
)
from legato.schema.tables import RunProgress

RUN_SCOPED = ("runs", "tasks", "signals", "run_events", "run_progress")
PAST = datetime(2024, 1, 1, tzinfo=UTC)
PAST_END = datetime(2024, 2, 1, tzinfo=UTC)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


async def _partitions(conn: AsyncConnection) -> set[str]:
    result = await conn.exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace "
        "WHERE n.nspname = 'legato' AND p.relkind = 'p' AND p.relname NOT LIKE 'ix\\_%' "
        "AND p.relname NOT LIKE 'pk\\_%'"
    )
    return {str(name) for name in result.scalars()}


async def test_concurrent_ensure_reports_each_partition_once(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        before = await _partitions(conn)
    connections = [await engine.connect() for _ in range(8)]
    try:

        async def ensure(conn: AsyncConnection) -> list[str]:
            async with conn.begin():
                return await partitions.ensure(conn, months_ahead=6, days_ahead=10)

        reports = await asyncio.gather(*(ensure(conn) for conn in connections))
    finally:
        for conn in connections:
            await conn.close()
    async with engine.connect() as conn:
        after = await _partitions(conn)
    reported = [name for report in reports for name in report]
    assert len(reported) == len(set(reported)), "a partition was reported twice"
    assert set(reported) == after - before
    assert len(after - before) == 3 * len(RUN_SCOPED) + 3  # months +4..+6 of each, days +8..+10
    assert sum(1 for report in reports if report) >= 1

    async with engine.begin() as conn:
        assert await partitions.ensure(conn, months_ahead=6, days_ahead=10) == []


async def _past_month_with_a_run(engine: AsyncEngine) -> uuid.UUID:
    suffix = f"{PAST:%Y%m}"
    run_id = uuid7(at_ms=_ms(datetime(2024, 1, 15, tzinfo=UTC)))
    shard = Shards(16).of_run(run_id)  # the template database has the default 16 keys
    async with engine.begin() as conn:
        for table in RUN_SCOPED:
            await conn.exec_driver_sql(
                f"CREATE TABLE legato.{table}_p{suffix} PARTITION OF legato.{table} "
                f"FOR VALUES FROM (legato.uuid7_bound_v1('{PAST.isoformat()}')) "
                f"TO (legato.uuid7_bound_v1('{PAST_END.isoformat()}'))"
            )
        await conn.execute(
            insert(WorkflowDefinitions.table).values(
                name="retention", version=1, spec={"nodes": []}, spec_hash="h1"
            )
        )
        await conn.execute(
            insert(Runs.table).values(
                id=run_id,
                workflow_name="retention",
                workflow_version=1,
                status=RunStatus.RUNNING,
                shard=shard,
            )
        )
        await conn.execute(
            insert(Tasks.table).values(
                shard=shard,
                run_id=run_id,
                id=uuid7(),
                node_id="n1",
                kind=NodeKind.TASK,
                state=TaskState.COMPLETED,
            )
        )
        await conn.execute(
            insert(Signals.table).values(shard=shard, run_id=run_id, id=uuid7(), name="go")
        )
        await conn.execute(
            insert(RunEvents.table).values(shard=shard, run_id=run_id, seq=1, type="started")
        )
        await conn.execute(
            insert(RunProgress.table).values(
                shard=shard,
                run_id=run_id,
                seq=1,
                task_id=uuid7(),
                node_id="n1",
                iteration=0,
                attempt=1,
                kind="progress",
                value={"done": 1},
            )
        )
    return run_id


async def test_drop_keeps_a_month_with_running_runs(engine: AsyncEngine) -> None:
    run_id = await _past_month_with_a_run(engine)
    past = {f"{table}_p{PAST:%Y%m}" for table in RUN_SCOPED}
    cutoff = datetime(2024, 3, 1, tzinfo=UTC)

    async with engine.begin() as conn:
        outcome = await partitions.drop(conn, cutoff)
    assert outcome == [("runs_p202401", "kept: it still has running runs")]
    async with engine.connect() as conn:
        assert past <= await _partitions(conn)

    async with engine.begin() as conn:
        await conn.execute(
            update(Runs.table).where(Runs.id == run_id).values(status=RunStatus.SUCCEEDED)
        )
    async with engine.begin() as conn:
        before = await _partitions(conn)
        assert await partitions.drop(conn, cutoff, dry_run=True) == [("runs_p202401", "would drop")]
    async with engine.connect() as conn:
        assert await _partitions(conn) == before, "a dry run changes nothing"

    async with engine.begin() as conn:
        assert await partitions.drop(conn, cutoff) == [("runs_p202401", "dropped")]
    async with engine.connect() as conn:
        after = await _partitions(conn)
    assert after == before - past
    # Nothing current is touched, and nothing is left to drop.
    async with engine.begin() as conn:
        assert await partitions.drop(conn, cutoff) == []


async def test_drop_rejects_a_naive_cutoff(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        with pytest.raises(ValueError, match="timezone-aware"):
            await partitions.drop(conn, datetime(2024, 3, 1))


async def test_run_partition_bounds_and_check_run_id(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        bounds = await partitions.run_partition_bounds(conn)
    assert len(bounds) == 4
    now = datetime.now(UTC)
    this_month = datetime(now.year, now.month, 1, tzinfo=UTC)
    assert bounds[0][0] == uuid7_bound(_ms(this_month))
    assert all(upper == lower for (_, upper), (lower, _) in itertools.pairwise(bounds))

    partitions.check_run_id(uuid7(), bounds)

    v4 = uuid.uuid4()
    with pytest.raises(InvalidRunId, match=f"run id {v4} is not a UUIDv7.*version 4"):
        partitions.check_run_id(v4, bounds)

    old = uuid7(at_ms=_ms(datetime(2019, 6, 1, tzinfo=UTC)))
    with pytest.raises(InvalidRunId) as caught:
        partitions.check_run_id(old, bounds)
    message = str(caught.value)
    assert str(old) in message
    assert "created 2019-06-01" in message
    assert f"partitions cover {this_month:%Y-%m-%d}" in message
    assert "outside every runs partition" in message


def test_check_run_id_without_partitions() -> None:
    with pytest.raises(InvalidRunId, match="no partitions"):
        partitions.check_run_id(uuid7(), [])


async def test_schema_translation_reaches_the_functions(database_url: str) -> None:
    from legato import migrations
    from legato.db import create_engine

    # Mixed case: a schema name PostgreSQL would fold to lower case unless it is quoted.
    engine = create_engine(database_url, "Tenant_B")
    try:
        await migrations.upgrade(engine, "Tenant_B")
        async with engine.begin() as conn:
            assert partitions.schema_name(conn) == "Tenant_B"
            created = await partitions.ensure(conn, months_ahead=4)
            bounds = await partitions.run_partition_bounds(conn)
            with pytest.raises(ConfigurationError, match="after the start of the current month"):
                await partitions.drop(conn, datetime(2099, 1, 1, tzinfo=UTC), dry_run=True)
        async with engine.begin() as conn:
            latest = partitions.month_start(datetime.now(UTC))
            dropped = await partitions.drop(conn, latest, dry_run=True)
    finally:
        await engine.dispose()
    months = {name.removeprefix("runs_p") for name in created if name.startswith("runs_p")}
    assert len(months) == 1
    assert sorted(created) == sorted(
        f"{table}_p{month}" for table in RUN_SCOPED for month in months
    )
    assert len(bounds) == 5
    assert dropped == []  # nothing in Tenant_B ended before this month
