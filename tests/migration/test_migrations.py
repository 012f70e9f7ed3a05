"""Migration 0001 against a real server: heads, upgrade, drift, catalog, downgrade, concurrency."""

from __future__ import annotations

import asyncio
import re
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, inspect, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato import migrations
from legato.db import create_engine
from legato.db.server_check import HEAD_REVISION
from legato.schema import SchemaVersion, metadata, uuid7_bound

PARTITION = re.compile(r"_p\d+$|^task_queue_h\d+$")
RUN_SCOPED = ("runs", "tasks", "signals", "run_events")
TABLES = {table.name for table in metadata.tables.values()}


def _month_start(months_ahead: int) -> datetime:
    now = datetime.now(UTC)
    index = now.year * 12 + now.month - 1 + months_ahead
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


async def _rows(conn: AsyncConnection, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    result = await conn.exec_driver_sql(sql, params) if params else await conn.exec_driver_sql(sql)
    return [tuple(row) for row in result]


async def _relations(conn: AsyncConnection, schema: str) -> set[str]:
    rows = await _rows(
        conn,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'p')",
    )
    return {str(name) for (name,) in rows}


async def _functions(conn: AsyncConnection, schema: str) -> set[str]:
    rows = await _rows(
        conn,
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        f"WHERE n.nspname = '{schema}'",
    )
    return {str(name) for (name,) in rows}


def test_single_head() -> None:
    script = ScriptDirectory.from_config(migrations.alembic_config("legato"))
    assert script.get_heads() == [migrations.head_revision()]
    # The constant the connect-time check compares against (no Alembic import there).
    assert script.get_heads() == [HEAD_REVISION]
    # The branch label a host's Alembic depends on resolves to our head.
    assert script.get_revision(migrations.BRANCH_LABEL + "@head").revision == (
        migrations.head_revision()
    )
    bases = script.get_bases()
    assert len(bases) == 1
    assert migrations.BRANCH_LABEL in script.get_revision(bases[0]).branch_labels


@pytest.mark.parametrize("schema", ["legato", "wf_custom"])
async def test_upgrade_creates_every_table(empty_database_url: str, schema: str) -> None:
    engine = create_engine(empty_database_url, schema)
    try:
        await migrations.upgrade(engine, schema)
        state = await migrations.state(engine, schema)
        async with engine.connect() as conn:
            relations = await _relations(conn, schema)
            functions = await _functions(conn, schema)
            versions = (await conn.execute(select(SchemaVersion.version_num))).scalars().all()
            other = await _relations(conn, "legato") if schema != "legato" else set()
    finally:
        await engine.dispose()
    assert state.up_to_date
    assert versions == [migrations.head_revision()]
    assert {name for name in relations if not PARTITION.search(name)} == TABLES
    assert functions >= {"uuid7_bound_v1", "uuid7_v1", "ensure_partitions_v1", "drop_partitions_v1"}
    assert other == set(), "a custom schema must leave the default one alone"


def _include_name(schema: str) -> Any:
    def include(name: str | None, type_: str, parent_names: Any) -> bool:
        if type_ == "schema":
            return name == schema
        if type_ == "table":
            return name is not None and not PARTITION.search(name)
        return True

    return include


def _include_object(obj: Any, name: str | None, type_: str, reflected: bool, other: Any) -> bool:
    if type_ == "table" and name == migrations.VERSION_TABLE:
        return False
    # A foreign key onto partitioned ``runs`` is mirrored by PostgreSQL onto each partition.
    return not (type_ == "foreign_key_constraint" and PARTITION.search(obj.referred_table.name))


def _schema_metadata(schema: str) -> MetaData:
    if schema == "legato":
        return metadata
    copy = MetaData(schema=schema, naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(copy, schema=schema)
    return copy


def _diff(sync: Connection, schema: str) -> list[Any]:
    context = MigrationContext.configure(
        sync,
        opts={
            "include_schemas": True,
            "include_name": _include_name(schema),
            "include_object": _include_object,
            "compare_type": True,
            "compare_server_default": True,
        },
    )
    return list(compare_metadata(context, _schema_metadata(schema)))


async def test_no_drift_between_migrations_and_schema(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        assert await conn.run_sync(_diff, "legato") == []
        # The comparison is live: a missing partial index is reported.
        await conn.exec_driver_sql("DROP INDEX legato.ix_runs_active")
        changes = await conn.run_sync(_diff, "legato")
        await conn.rollback()
    assert [(change[0], change[1].name) for change in changes] == [("add_index", "ix_runs_active")]


async def test_no_drift_in_a_custom_schema(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "wf_drift")
    try:
        await migrations.upgrade(engine, "wf_drift")
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff, "wf_drift") == []
    finally:
        await engine.dispose()


async def test_catalog_partitions_and_bounds(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        rows = await _rows(
            conn,
            "SELECT p.relname, c.relname, pg_get_expr(c.relpartbound, c.oid) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = p.relnamespace WHERE n.nspname = 'legato'",
        )
        strategies = dict(
            await _rows(
                conn,
                "SELECT c.relname, pt.partstrat::text FROM pg_partitioned_table pt "
                "JOIN pg_class c ON c.oid = pt.partrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'legato'",
            )
        )
    children: dict[str, dict[str, str]] = {}
    for parent, child, bound in rows:
        if parent.startswith(("ix_", "pk_")):
            continue  # partition indexes inherit too
        children.setdefault(parent, {})[child] = bound
    assert strategies == {
        "runs": "r",
        "tasks": "r",
        "signals": "r",
        "run_events": "r",
        "timers": "r",
        "task_queue": "h",
    }
    months = [_month_start(i) for i in range(4)]
    for table in RUN_SCOPED:
        assert set(children[table]) == {f"{table}_p{m:%Y%m}" for m in months}, table
    this_month = f"runs_p{months[0]:%Y%m}"
    lower, upper = (
        uuid7_bound(int(months[0].timestamp() * 1000)),
        uuid7_bound(int(months[1].timestamp() * 1000)),
    )
    assert children["runs"][this_month] == f"FOR VALUES FROM ('{lower}') TO ('{upper}')"
    today = datetime.now(UTC).date()
    timers = children["timers"]
    assert len(timers) == 8
    assert f"timers_p{today:%Y%m%d}" in timers
    assert set(children["task_queue"]) == {f"task_queue_h{i}" for i in range(8)}
    assert children["task_queue"]["task_queue_h3"] == "FOR VALUES WITH (modulus 8, remainder 3)"
    assert "DEFAULT" not in " ".join(bound for part in children.values() for bound in part.values())


async def test_catalog_partial_indexes_and_storage(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        predicates = dict(
            await _rows(
                conn,
                "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'legato' AND i.indpred IS NOT NULL",
            )
        )
        options = dict(
            await _rows(
                conn,
                "SELECT c.relname, c.reloptions FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'legato' AND c.reloptions IS NOT NULL",
            )
        )
        comment = await _rows(
            conn, "SELECT obj_description('legato.ix_task_queue_dequeue'::regclass, 'pg_class')"
        )
    assert predicates["ix_task_queue_dequeue"] == "(lease_expires_at IS NULL)"
    assert predicates["ix_task_queue_leased"] == "(lease_expires_at IS NOT NULL)"
    assert "ix_timers_unclaimed" not in predicates
    assert predicates["ix_runs_active"] == "(status = 'RUNNING'::text)"
    assert predicates["ix_signals_pending"] == "(consumed_at IS NULL)"
    assert predicates["ix_outbox_relay_due"] == "(dead_lettered_at IS NULL)"
    assert predicates["ix_outbox_dead_letter"] == "(dead_lettered_at IS NOT NULL)"
    assert predicates["ix_workflow_definitions_name"] == "deployed"
    assert predicates["ix_decide_queue_decider"] == "(quarantined_at IS NULL)"
    for name in ["decide_queue", "outbox", *(f"task_queue_h{i}" for i in range(8))]:
        assert "fillfactor=70" in options[name], name
        assert "autovacuum_vacuum_scale_factor=0.01" in options[name], name
    assert comment[0][0].startswith("worker loop")


async def test_every_secondary_index_names_the_query_it_serves(engine: AsyncEngine) -> None:
    """An operator reading ``\\di+`` learns which loop or command uses each index: every
    index except the primary keys carries a comment."""
    async with engine.connect() as conn:
        comments = dict(
            await _rows(
                conn,
                "SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'legato' AND NOT i.indisprimary AND NOT c.relispartition",
            )
        )
    assert len(comments) >= 18
    assert {name for name, comment in comments.items() if not comment} == set()
    assert comments["ix_schedules_due"].startswith("scheduler loop")


async def test_downgrade_to_base_removes_everything(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        await migrations.upgrade(engine, "legato")
        await migrations.downgrade(engine, "legato", "base")
        state = await migrations.state(engine, "legato")
        async with engine.connect() as conn:
            relations = await _relations(conn, "legato")
            functions = await _functions(conn, "legato")
        # and back up again: downgrade left nothing in the way
        await migrations.upgrade(engine, "legato")
        assert (await migrations.state(engine, "legato")).up_to_date
    finally:
        await engine.dispose()
    assert state.current == ()
    assert relations == {migrations.VERSION_TABLE}  # Alembic's bookkeeping, now empty
    assert functions == set()


async def _versions_and_tables(url: str) -> tuple[list[str], set[str]]:
    engine = create_engine(url, "legato")
    try:
        async with engine.connect() as conn:
            versions = (await conn.execute(select(SchemaVersion.version_num))).scalars().all()
            tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names("legato"))
    finally:
        await engine.dispose()
    return list(versions), set(tables)


async def test_concurrent_upgrades_in_one_process(empty_database_url: str) -> None:
    engines = [create_engine(empty_database_url, "legato") for _ in range(4)]
    try:
        await asyncio.gather(*(migrations.upgrade(engine, "legato") for engine in engines))
    finally:
        for engine in engines:
            await engine.dispose()
    versions, tables = await _versions_and_tables(empty_database_url)
    assert versions == [migrations.head_revision()]
    assert tables >= TABLES


async def test_concurrent_upgrades_from_four_processes(empty_database_url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "legato",
            "db",
            "upgrade",
            "--database-url",
            empty_database_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    outcomes = [await process.communicate() for process in processes]
    for process, (_, stderr) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, stderr.decode()
    versions, tables = await _versions_and_tables(empty_database_url)
    assert versions == [migrations.head_revision()]
    assert tables >= TABLES
