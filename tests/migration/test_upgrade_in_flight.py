"""Runs started before the shard-key upgrade (migration 0011) finish after it.

``fixtures/in_flight_0010.sql`` holds the data of a schema at migration 0010 with four
runs in flight, made once with the Legato release that ended at 0010, and the
workflows of ``tests/migration/in_flight_flows.py``:

1. an embedded PostgreSQL, a database migrated to 0010, the ``in_flight.effects``
   table (``EFFECTS_DDL``) and one webhook endpoint (so ``outbox`` has rows);
2. a second process ran that Legato's ``Runtime`` with ``in_flight_flows.app``
   (polling every 0.1 s) while a ``Client`` started, each with one of the flows
   module's idempotency keys: two ``awaits_event`` runs (``SIGNALLED``, ``EMITTED``),
   one ``sleeps`` run (``SLEEPING``) and one ``mid_task`` run (``MID_TASK``);
3. once both ``awaits_event`` runs waited for ``EVENT`` and the ``sleeps`` run slept
   (its one-hour ``SLEEP`` timer armed), the client signalled ``EVENT`` to the
   sleeping run (buffered: its wait comes after the sleep);
4. once ``hold``'s first attempt was leased and running (its body blocks), nothing
   was left in ``decide_queue`` and the four ``prepare`` effects were committed, the
   runtime's process was killed with SIGKILL (no graceful stop: its lease stays in
   ``task_queue`` and the blocked body's transaction is rolled back);
5. ``pg_dump --data-only --column-inserts`` of schemas ``legato`` and ``in_flight``
   without ``legato_version``, its sections reordered so that referenced tables come
   first (pg_dump orders a data-only dump of partitions by name), empty sections and
   psql meta-commands dropped.

The dump names the partitions it wrote into (``runs_p<YYYYMM>``, ``timers_p<YYYYMMDD>``,
...): the test creates those its database lacks as ``ensure_partitions_v1`` would, so
the fixture loads whenever the test runs.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import tests.migration.in_flight_flows as flows
from legato import Client, RunStatus, Runtime, TaskState, migrations
from legato.db import create_engine
from legato.db.server_check import check_database, connect
from legato.models import FINAL_EVENTS, RunDetails
from legato.schema import Shards

SCHEMA = "legato"
FIXTURE = Path(__file__).parent / "fixtures" / "in_flight_0010.sql"
DEADLINE = 60.0  # seconds for every run to finish

# The partitions the fixture writes into: monthly by run id, daily by fire time (timers).
_MONTHLY = re.compile(r"^INSERT INTO legato\.(runs|tasks|signals|run_events)_p(\d{6}) ", re.M)
_DAILY = re.compile(r"^INSERT INTO legato\.timers_p(\d{8}) ", re.M)
_STORAGE = {"tasks": " WITH (fillfactor = 80)"}

# Each run-scoped table and the column its key is computed from.
_KEYED_BY_RUN = {
    "runs": "id",
    "tasks": "run_id",
    "signals": "run_id",
    "run_events": "run_id",
    "decide_queue": "run_id",
    "task_queue": "run_id",
    "timers": "run_id",
    "outbox": "run_id",
}

# What each run's attempts end as: (node, attempt, state).
_APPROVED = [
    ("prepare", 1, TaskState.COMPLETED),
    (flows.EVENT, 1, TaskState.COMPLETED),
    ("conclude", 1, TaskState.COMPLETED),
]
_ATTEMPTS = {
    flows.SIGNALLED: _APPROVED,
    flows.EMITTED: _APPROVED,
    flows.SLEEPING: [_APPROVED[0], ("sleep", 1, TaskState.COMPLETED), *_APPROVED[1:]],
    flows.MID_TASK: [
        ("prepare", 1, TaskState.COMPLETED),
        ("hold", 1, TaskState.TIMED_OUT),
        ("hold", 2, TaskState.COMPLETED),
    ],
}
_OUTPUTS = {
    flows.SIGNALLED: "prepared a, approved by alice",
    flows.EMITTED: "prepared b, approved by bob",
    flows.SLEEPING: "prepared c, approved by carol",
    flows.MID_TASK: "prepared d, held until attempt 2",
}
# Every effect made, exactly once: (role, node, attempt).
_EFFECTS = sorted(
    [(role, "prepare", 1) for role in _OUTPUTS]
    + [(role, "conclude", 1) for role in (flows.SIGNALLED, flows.EMITTED, flows.SLEEPING)]
    + [(flows.MID_TASK, "hold", 2)]
)


async def _ensure_fixture_partitions(engine: AsyncEngine, fixture: str) -> None:
    """Create the partitions the fixture's rows go into that the database lacks, named
    and bounded as ``ensure_partitions_v1`` names and bounds them (UTC months of run ids,
    UTC days of timers)."""
    months = sorted(set(_MONTHLY.findall(fixture)))
    days = sorted(set(_DAILY.findall(fixture)))
    async with engine.begin() as conn:
        for table, month in months:
            part = f"{table}_p{month}"
            if await _exists(conn, part):
                continue
            bounds = await conn.execute(
                text(
                    "SELECT legato.uuid7_bound_v1(m AT TIME ZONE 'UTC'), "
                    "legato.uuid7_bound_v1((m + interval '1 month') AT TIME ZONE 'UTC') "
                    "FROM CAST(to_date(:month, 'YYYYMM') AS timestamp) AS m"
                ),
                {"month": month},
            )
            low, high = bounds.one()
            await conn.execute(
                text(
                    f"CREATE TABLE legato.{part} PARTITION OF legato.{table} "
                    f"FOR VALUES FROM ('{low}') TO ('{high}'){_STORAGE.get(table, '')}"
                )
            )
        for day in days:
            part = f"timers_p{day}"
            if await _exists(conn, part):
                continue
            bounds = await conn.execute(
                text(
                    "SELECT d AT TIME ZONE 'UTC', (d + interval '1 day') AT TIME ZONE 'UTC' "
                    "FROM CAST(to_date(:day, 'YYYYMMDD') AS timestamp) AS d"
                ),
                {"day": day},
            )
            low, high = bounds.one()
            await conn.execute(
                text(
                    f"CREATE TABLE legato.{part} PARTITION OF legato.timers "
                    f"FOR VALUES FROM ('{low.isoformat()}') TO ('{high.isoformat()}')"
                )
            )


async def _exists(conn: AsyncConnection, name: str) -> bool:
    found = await conn.execute(
        text("SELECT to_regclass(:name) IS NOT NULL"), {"name": f"legato.{name}"}
    )
    return bool(found.scalar_one())


async def _load_fixture(engine: AsyncEngine) -> None:
    """The effects table, the partitions the fixture needs, then the fixture itself (one
    implicit transaction, on a connection of its own: the dump changes its settings)."""
    fixture = FIXTURE.read_text()
    async with engine.begin() as conn:
        for statement in flows.EFFECTS_DDL:
            await conn.execute(text(statement))
    await _ensure_fixture_partitions(engine, fixture)
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        await raw.driver_connection.execute(fixture)  # type: ignore[union-attr]
        await conn.invalidate()  # set up by the dump: not back to the pool


async def _let_time_pass(engine: AsyncEngine) -> None:
    """Simulate the time the upgrade took, against the fixture's own clock.

    The fixture's timers are moved by the time since the capture (its last history
    event), so each is as far ahead of now as it was of the capture: the completed
    ``prepare`` attempts' start-to-close backstops stay minutes ahead, ``hold``'s
    a day ahead. Then the upgrade lasted longer than two things: the one-hour nap
    (its ``SLEEP`` timer is due now) and the dead worker's lease (it expired a second
    ago), so the lease sweeper, not the attempt's day-long deadline, ends the attempt.
    """
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE legato.timers SET fire_at = fire_at + shift, due_at = due_at + shift "
                "FROM (SELECT now() - max(created_at) AS shift FROM legato.run_events) AS s"
            )
        )
        slept = await conn.execute(
            text("UPDATE legato.timers SET fire_at = now(), due_at = now() WHERE kind = 'SLEEP'")
        )
        expired = await conn.execute(
            text(
                "UPDATE legato.task_queue SET lease_expires_at = now() - interval '1 second' "
                "WHERE lease_expires_at IS NOT NULL"
            )
        )
    assert (slept.rowcount, expired.rowcount) == (1, 1)


async def _upgraded_in_flight(engine: AsyncEngine) -> tuple[Shards, dict[str, uuid.UUID]]:
    """A schema at 0010 with the fixture's runs, time let pass, upgraded to head: the
    installation's keys and each run's id by its role (idempotency key)."""
    await migrations.upgrade(engine, SCHEMA, "0010")
    await _load_fixture(engine)
    await _let_time_pass(engine)
    await migrations.upgrade(engine, SCHEMA)
    async with connect(engine) as conn:
        shards = await check_database(conn, SCHEMA)
        found = await conn.execute(text("SELECT idempotency_key, id FROM legato.runs"))
        roles = {str(key): run_id for key, run_id in found.all()}
    assert sorted(roles) == sorted(_OUTPUTS)
    return shards, roles


async def _keys_of_rows(engine: AsyncEngine, shards: Shards) -> dict[str, int]:
    """Assert every run-scoped row has its run's key and every idempotency key its own
    key's; return each table's row count."""
    counts: dict[str, int] = {}
    async with engine.connect() as conn:
        for table, column in _KEYED_BY_RUN.items():
            rows = (await conn.execute(text(f"SELECT {column}, shard FROM legato.{table}"))).all()
            wrong = [(run_id, key) for run_id, key in rows if key != shards.of_run(run_id)]
            assert wrong == [], f"{table} rows not under their run's key: {wrong}"
            counts[table] = len(rows)
        keys = (await conn.execute(text("SELECT key, shard FROM legato.idempotency_keys"))).all()
        wrong_keys = [(key, shard) for key, shard in keys if shard != shards.of_key(key)]
        assert wrong_keys == [], f"idempotency keys not under their own key: {wrong_keys}"
        counts["idempotency_keys"] = len(keys)
    return counts


async def _finished(client: Client, run_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, RunDetails]:
    """Each run once it has finished, polled by status until ``DEADLINE``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    pending = set(run_ids)
    done: dict[uuid.UUID, RunDetails] = {}
    while pending:
        for run_id in sorted(pending):
            details = await client.get_run(run_id)
            if details.run.status.finished:
                done[run_id] = details
                pending.discard(run_id)
        if pending:
            assert loop.time() < deadline, f"still running after {DEADLINE}s: {sorted(pending)}"
            await asyncio.sleep(0.05)
    return done


async def _effects(
    engine: AsyncEngine, roles: Mapping[str, uuid.UUID]
) -> list[tuple[str, str, int]]:
    role_of = {run_id: role for role, run_id in roles.items()}
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT run_id, node_id, attempt FROM in_flight.effects"))
        return sorted((role_of[run_id], node, attempt) for run_id, node, attempt in rows.all())


@pytest.fixture
def engine_on_empty(empty_database_url: str) -> AsyncEngine:
    return create_engine(empty_database_url, SCHEMA)


async def test_the_upgrade_keys_every_row_of_the_runs_in_flight(
    engine_on_empty: AsyncEngine,
) -> None:
    engine = engine_on_empty
    try:
        shards, roles = await _upgraded_in_flight(engine)
        counts = await _keys_of_rows(engine, shards)
        # Every run-scoped table the fixture fills was keyed (decide_queue was empty).
        assert counts == {
            "runs": 4,
            "tasks": 8,
            "signals": 1,
            "run_events": 16,
            "decide_queue": 0,
            "task_queue": 1,
            "timers": 6,
            "outbox": 4,
            "idempotency_keys": 4,
        }
        # Four runs spread over more than one key: the backfill computed, not defaulted.
        assert len({shards.of_run(run_id) for run_id in roles.values()}) > 1
        assert await _effects(engine, roles) == sorted((role, "prepare", 1) for role in roles)
    finally:
        await engine.dispose()


async def test_runs_in_flight_before_the_upgrade_finish_after_it(
    engine_on_empty: AsyncEngine,
) -> None:
    engine = engine_on_empty
    try:
        shards, roles = await _upgraded_in_flight(engine)
        await _keys_of_rows(engine, shards)
        async with (
            Runtime(engine, flows.app, poll_interval=0.1, grace_period=5),
            Client(engine, app=flows.app) as client,
        ):
            await client.signal(roles[flows.SIGNALLED], flows.EVENT, flows.Approval(by="alice"))
            # The signalled run is skipped while its signal is unconsumed, and no longer
            # waits once it is; the sleeping run took its buffered signal when its wait began.
            emitted = await client.emit(flows.EVENT, flows.Approval(by="bob"))
            assert emitted == [roles[flows.EMITTED]]
            runs = await _finished(client, roles.values())
        for role, run_id in roles.items():
            details = runs[run_id]
            assert details.run.status is RunStatus.SUCCEEDED, (role, details.run.error)
            assert details.run.output == _OUTPUTS[role]
            attempts = sorted((t.node_id, t.attempt, t.state) for t in details.tasks)
            assert attempts == sorted(_ATTEMPTS[role])
            # One history across the upgrade: gap-free, nothing recorded twice, one finish.
            history = details.history
            assert [event.seq for event in history] == list(range(1, len(history) + 1))
            entries = [(e.type, e.node_id, e.iteration, e.attempt) for e in history]
            assert len(set(entries)) == len(entries), entries
            assert [e.type for e in history if e.type in FINAL_EVENTS] == ["run_succeeded"]
            assert history[-1].type == "run_succeeded"
        held = [t for t in runs[roles[flows.MID_TASK]].tasks if t.node_id == "hold"]
        assert held[0].error is not None and held[0].error.type == "LeaseExpired"
        # Nothing done twice: each body's committed effect once, none from the dead attempt.
        assert await _effects(engine, roles) == _EFFECTS
        async with engine.connect() as conn:
            signals = await conn.execute(
                text("SELECT run_id FROM legato.signals WHERE consumed_at IS NOT NULL")
            )
            assert sorted(signals.scalars()) == sorted(
                roles[r] for r in (flows.SIGNALLED, flows.EMITTED, flows.SLEEPING)
            )
        # The rows the new code wrote are keyed as the upgrade keyed the old ones.
        await _keys_of_rows(engine, shards)
    finally:
        await engine.dispose()
