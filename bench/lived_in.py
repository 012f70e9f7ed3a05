"""Databases with a past: a history of finished runs, for the history scenario, and the
statistics a running installation has (``legato bench --lived-in``).

A fresh database has no statistics: the planner guesses every table's size, and generic
plans are made from those guesses. An installation that has run for a while has been
analyzed by autovacuum, and a queue table is often analyzed while it is empty (its
changes pass autovacuum's threshold when a backlog drains). ``--lived-in`` measures that
state: each scenario's database starts with ``LIVED_IN_RUNS`` finished runs and every
table analyzed with its queues empty.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.flows import app, one
from legato import Client
from legato.schema import Installation
from legato.schema.shards import shard_of_run_sql

#: Finished runs in a lived-in database (``--lived-in``).
LIVED_IN_RUNS = 20_000


async def live_in(engine: AsyncEngine) -> float:
    """Make ``engine``'s migrated database lived-in: the bench's workflows deployed,
    ``LIVED_IN_RUNS`` finished runs, then every table of the schema analyzed, its
    queues empty. Returns the seconds it took."""
    t0 = time.perf_counter()
    async with Client(engine, app=app) as client:
        await client.deploy()
    await generate_history(engine, LIVED_IN_RUNS)
    schema = engine.get_execution_options()["schema_translate_map"]["legato"]
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as conn:
        tables = (
            await conn.execute(
                text(
                    "SELECT quote_ident(relname) FROM pg_class"
                    " WHERE relnamespace = CAST(:schema AS regnamespace)"
                    " AND relkind IN ('r', 'p')"
                ),
                {"schema": schema},
            )
        ).scalars()
        for table in tables:
            await conn.exec_driver_sql(f"ANALYZE {schema}.{table}")
    return time.perf_counter() - t0


async def generate_history(engine: AsyncEngine, n: int) -> float:
    """Insert ``n`` finished one-task runs, their tasks and 3 events each, set-based, into
    the current month's partition; then VACUUM ANALYZE. Returns the seconds it took."""
    t0 = time.perf_counter()
    schema = engine.get_execution_options()["schema_translate_map"]["legato"]
    async with engine.connect() as conn:
        version = int(
            (
                await conn.execute(
                    text(f"SELECT max(version) FROM {schema}.workflow_definitions WHERE name = :n"),
                    {"n": one.name},
                )
            ).scalar_one()
        )
        pg18 = int((await conn.exec_driver_sql("SHOW server_version_num")).scalar_one()) >= 180000
        newest = (
            await conn.execute(text(f"SELECT id FROM {schema}.runs ORDER BY id DESC LIMIT 1"))
        ).scalar()
        count = (await conn.execute(select(Installation.shard_count))).scalar_one()
    new_id = (
        "uuidv7()"
        if pg18
        else "(lpad(to_hex((extract(epoch from clock_timestamp())*1000)::bigint), 12, '0') "
        "|| '7' || substr(md5(random()::text), 1, 3) || to_hex(8 + floor(random()*4)::int) "
        "|| substr(md5(random()::text), 1, 15))::uuid"
    )
    s = schema
    runs_sql = f"""
        INSERT INTO {s}.runs (id, workflow_name, workflow_version, status, input, output,
                              created_at, updated_at, finished_at, shard)
        SELECT id, '{one.name}', {version}, 'SUCCEEDED', to_jsonb(g), to_jsonb(g),
               now(), now(), now(), {shard_of_run_sql("id", count)}
        FROM (SELECT {new_id} AS id, g FROM generate_series(1, {n}) AS g) AS generated"""
    history = f"r.workflow_name = '{one.name}' AND r.status = 'SUCCEEDED'"
    if newest is not None:  # only the generated runs, not the ones the engine ran before
        history += f" AND r.id > '{newest}'"
    tasks_sql = f"""
        INSERT INTO {s}.tasks (run_id, id, node_id, iteration, attempt, kind, state, task_name,
                               queue, input, output, observed, created_at, started_at,
                               finished_at, shard)
        SELECT r.id, {new_id}, 'noop', 0, 1, 'TASK', 'COMPLETED', 'noop', 'default', r.input,
               r.output, true, now(), now(), now(), r.shard
        FROM {s}.runs r WHERE {history}"""
    events_sql = f"""
        INSERT INTO {s}.run_events (run_id, seq, type, node_id, data, created_at, shard)
        SELECT r.id, e.seq, e.type, e.node_id, e.data, now(), r.shard
        FROM {s}.runs r CROSS JOIN (VALUES
            (1, 'run_started', NULL, NULL::jsonb),
            (2, 'task_completed', 'noop', '{{"output": 1}}'::jsonb),
            (3, 'run_succeeded', NULL, '1'::jsonb)) AS e(seq, type, node_id, data)
        WHERE {history}"""

    async def run(statement: str) -> None:
        async with engine.begin() as conn:
            await conn.exec_driver_sql("SET LOCAL synchronous_commit = off")  # generation only
            try:
                async with conn.begin_nested():
                    # Skips the per-row NOTIFY trigger and FK checks (superuser only).
                    await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            except Exception:
                await conn.exec_driver_sql(
                    f"ALTER TABLE {s}.run_events DISABLE TRIGGER run_events_notify_v1"
                )
            await conn.exec_driver_sql(statement)

    await run(runs_sql)
    await asyncio.gather(run(tasks_sql), run(events_sql))
    async with engine.connect() as conn:
        await conn.exec_driver_sql(
            f"ALTER TABLE {s}.run_events ENABLE TRIGGER run_events_notify_v1"
        )
        await conn.commit()
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as conn:
        for table in ("runs", "tasks", "run_events"):
            await conn.exec_driver_sql(f"VACUUM (ANALYZE) {s}.{table}")
    return time.perf_counter() - t0
