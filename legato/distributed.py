"""A distributed install: Legato's schema spread over a Citus cluster by the shard key.

``legato db upgrade`` runs the migrations as on one PostgreSQL, then, on a Citus
coordinator (detected, or asked for with ``--distributed``), ``distribute``:

- every run-scoped table (``RUN_TABLES``) becomes a distributed table by ``shard``,
  all co-located with ``runs``, so the rows of one key live on one node and every hot
  statement (``shard = $k`` on each table it touches) routes to that node;
- the Citus shard count is chosen so that each Legato key is a Citus shard of its own
  (``citus_shard_count``): moving a Citus shard moves exactly one key;
- the tables distributed ones reference (``REFERENCE_TABLES``) become reference tables
  (a copy on every node); the rest (``COORDINATOR_TABLES``) stay on the coordinator,
  added to Citus' metadata so a transaction that writes one of them and a worker
  commits both or neither (two-phase commit);
- the queue NOTIFY triggers are dropped (Citus would run them on the nodes, inside
  transactions it then cannot PREPARE): the routed statements send the same NOTIFYs from
  the coordinator's session inside their transaction
  (``legato.engine.repositories.routed.wake``), and the loops still poll as a fallback;
- partition maintenance and retention run with ``citus.multi_shard_modify_mode =
  sequential`` (Citus creates and drops a partition's shards one connection per node).

The statements here are installation DDL (like the migrations'), run by ``legato db
upgrade`` and once per process by ``legato.db.check_database`` (``is_distributed``),
never by a loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, event, text
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.errors import ConfigurationError
from legato.schema.layout import mark_routed

# Distributed by ``shard``, co-located with the first (the others reference it).
RUN_TABLES = (
    "runs",
    "tasks",
    "signals",
    "run_events",
    "run_progress",
    "decide_queue",
    "task_queue",
    "timers",
    "idempotency_keys",
    "debounces",
    "outbox",
)
# Referenced by distributed tables (runs -> workflow_definitions, outbox ->
# webhook_endpoints): a copy on every node, so those foreign keys hold on each node.
REFERENCE_TABLES = ("workflow_definitions", "webhook_endpoints")
# Installation-wide state read and written by one loop or command at a time: kept on
# the coordinator, in Citus' metadata (two-phase commit with the workers).
COORDINATOR_TABLES = (
    "schedules",
    "concurrency_slots",
    "rate_buckets",
    "task_cache",
    "installation",
    "shard_owners",
    "decider_sleep",
    "legato_version",
)
# The triggers that NOTIFY on queue inserts and history events (migration 0011).
NOTIFY_TRIGGERS = (
    ("run_events", "run_events_notify_v1"),
    ("task_queue", "task_queue_notify_v2"),
    ("decide_queue", "decide_queue_insert_notify_v2"),
    ("decide_queue", "decide_queue_update_notify_v2"),
)
# Partition maintenance (partitions.ensure / drop): run one node connection at a time.
SEQUENTIAL_FUNCTIONS = ("ensure_partitions_v1(integer, integer)", "drop_partitions_v1")

_HASH_SPAN = 1 << 32
_HASH_MIN = -(1 << 31)
MAX_CITUS_SHARDS = 4096


def citus_shard_index(hash_value: int, shard_count: int) -> int:
    """Which of ``shard_count`` Citus shards a hashed value falls in; pure.

    Citus splits the int32 hash space into ``shard_count`` equal ranges (the last takes
    the remainder): ``create_distributed_table``'s ``CreateShardsWithRoundRobinPolicy``.
    """
    width = _HASH_SPAN // shard_count
    return min((hash_value - _HASH_MIN) // width, shard_count - 1)


def citus_shard_count(key_hashes: Sequence[int]) -> int:
    """The fewest Citus shards, at least one per key, that put every Legato key (given
    by its ``hashint2``) in a shard of its own; pure."""
    for count in range(max(1, len(key_hashes)), MAX_CITUS_SHARDS + 1):
        if len({citus_shard_index(value, count) for value in key_hashes}) == len(key_hashes):
            return count
    raise ConfigurationError(  # unreachable for up to 256 keys (checked in tests)
        f"no Citus shard count up to {MAX_CITUS_SHARDS} puts each of {len(key_hashes)} "
        "shard keys in a shard of its own: install with fewer keys (--shards)"
    )


@dataclass(frozen=True)
class Distribution:
    """What ``distribute`` made of a schema (or found already made)."""

    citus_shards: int
    distributed: tuple[str, ...]
    reference: tuple[str, ...]
    coordinator: tuple[str, ...]


async def citus_coordinator(conn: AsyncConnection) -> bool:
    """Whether the database has the Citus extension and this is its coordinator."""
    found = await conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    if found.scalar() is None:
        return False
    role = await conn.execute(text("SELECT citus_is_coordinator()"))
    return bool(role.scalar())


def not_a_coordinator() -> ConfigurationError:
    return ConfigurationError(
        "--distributed: this database has no Citus extension or is not the Citus "
        "coordinator: CREATE EXTENSION citus in it on the coordinator and add the workers "
        "(citus_add_node) first, or upgrade without --distributed"
    )


async def is_distributed(conn: AsyncConnection, schema: str) -> bool:
    """Whether ``schema``'s ``runs`` is a Citus distributed table (a distributed install):
    read once per process at connect by ``check_database``. On a server without Citus one
    catalog read (``pg_extension``)."""
    found = await conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    if found.scalar() is None:
        return False
    distributed = await conn.execute(
        text(
            "SELECT EXISTS (SELECT FROM pg_dist_partition "
            "WHERE logicalrelid = to_regclass(:runs) AND partmethod = 'h')"
        ),
        {"runs": f"{_quoted(schema)}.runs"},
    )
    return bool(distributed.scalar())


async def distribute(conn: AsyncConnection, schema: str, shard_count: int) -> Distribution:
    """Distribute a migrated ``schema`` over the Citus cluster ``conn`` is the coordinator
    of (see the module's docstring); a schema already distributed is left as it is.

    ``conn`` must be in autocommit: each Citus call commits on its own (creating shards on
    every node), and a second call after an interruption finishes the job."""
    if not await citus_coordinator(conn):
        raise not_a_coordinator()
    hashes = await conn.execute(
        text("SELECT hashint2(k::smallint) FROM generate_series(0, :n - 1) AS k"),
        {"n": shard_count},
    )
    citus_shards = citus_shard_count([int(value) for value in hashes.scalars()])
    done = await _citus_kinds(conn, schema)
    if done.issuperset((*RUN_TABLES, *REFERENCE_TABLES, *COORDINATOR_TABLES)):
        return await _distribution(conn, schema)
    for table, trigger in NOTIFY_TRIGGERS:
        if table not in done:
            await conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger} ON {_name(schema, table)}"))
    foreign_keys = await _foreign_keys(conn, schema)
    for table, constraint, _definition in foreign_keys:
        await conn.execute(
            text(f"ALTER TABLE {_name(schema, table)} DROP CONSTRAINT {_quoted(constraint)}")
        )
    for table in REFERENCE_TABLES:
        if table not in done:
            await conn.execute(text("SELECT create_reference_table(:t)"), _regclass(schema, table))
    first, *rest = RUN_TABLES
    if first not in done:
        await conn.execute(
            text(
                "SELECT create_distributed_table(:t, 'shard', shard_count => :n, "
                "colocate_with => 'none')"
            ),
            {**_regclass(schema, first), "n": citus_shards},
        )
    for table in rest:
        if table not in done:
            await conn.execute(
                text("SELECT create_distributed_table(:t, 'shard', colocate_with => :with)"),
                {**_regclass(schema, table), "with": _name(schema, first)},
            )
    for table in COORDINATOR_TABLES:
        if table not in done:
            await conn.execute(
                text("SELECT citus_add_local_table_to_metadata(:t)"), _regclass(schema, table)
            )
    for table, constraint, definition in foreign_keys:
        await conn.execute(
            text(
                f"ALTER TABLE {_name(schema, table)} ADD CONSTRAINT {_quoted(constraint)} "
                f"{definition}"
            )
        )
    for function in SEQUENTIAL_FUNCTIONS:
        await conn.execute(
            text(
                f"ALTER FUNCTION {_quoted(schema)}.{function} "
                "SET citus.multi_shard_modify_mode = 'sequential'"
            )
        )
    return await _distribution(conn, schema)


async def _distribution(conn: AsyncConnection, schema: str) -> Distribution:
    actual = await conn.execute(
        text("SELECT shard_count FROM citus_tables WHERE table_name = to_regclass(:t)"),
        _regclass(schema, RUN_TABLES[0]),
    )
    return Distribution(
        citus_shards=int(actual.scalar_one()),
        distributed=RUN_TABLES,
        reference=REFERENCE_TABLES,
        coordinator=COORDINATOR_TABLES,
    )


async def _citus_kinds(conn: AsyncConnection, schema: str) -> set[str]:
    """The schema's tables Citus already knows (distributed, reference or local)."""
    rows = await conn.execute(
        text(
            "SELECT c.relname FROM pg_dist_partition p JOIN pg_class c "
            "ON c.oid = p.logicalrelid WHERE c.relnamespace = to_regnamespace(:schema)"
        ),
        {"schema": _quoted(schema)},
    )
    return {str(name) for name in rows.scalars()}


async def _foreign_keys(conn: AsyncConnection, schema: str) -> list[tuple[str, str, str]]:
    """The schema's foreign keys declared on a table (not those PostgreSQL derives for each
    partition): ``(table, constraint, definition)``. Citus refuses to change a table's
    kind while a foreign key joins it to a table of another kind."""
    rows = await conn.execute(
        text(
            "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) "
            "FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
            "WHERE c.contype = 'f' AND c.conparentid = 0 AND NOT t.relispartition "
            "AND c.connamespace = to_regnamespace(:schema) ORDER BY 1, 2"
        ),
        {"schema": _quoted(schema)},
    )
    return [(str(table).rsplit(".", 1)[-1], str(name), str(ddl)) for table, name, ddl in rows]


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _name(schema: str, table: str) -> str:
    return f"{_quoted(schema)}.{_quoted(table)}"


def _regclass(schema: str, table: str) -> dict[str, str]:
    return {"t": _name(schema, table)}


# A distributed install plans each statement for its parameters: Citus prunes the shards
# of a generic plan only on its single-table fast path, and refuses the generic plan of a
# statement over two co-located tables ("could not create distributed plan"). And Citus
# hides its shards from ``pg_class`` with a filter evaluated per catalog row, which made
# asyncpg's type introspection take seconds on each new connection to the coordinator.
DISTRIBUTED_SESSION_SETTINGS = {
    "plan_cache_mode": "force_custom_plan",
    "citus.override_table_visibility": "off",
}
_ADOPTED = "legato_distributed_settings"


def _settings_statement(local: bool) -> str:
    scope = "true" if local else "false"
    return "SELECT " + ", ".join(
        f"set_config('{name}', '{value}', {scope})"
        for name, value in sorted(DISTRIBUTED_SESSION_SETTINGS.items())
    )


def _distributed_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Each pooled connection takes ``DISTRIBUTED_SESSION_SETTINGS`` once, at its first
    checkout (before its first statement, so before any type introspection)."""
    if record.info.get(_ADOPTED):
        return
    cursor = dbapi_connection.cursor()
    cursor.execute(_settings_statement(local=False))
    cursor.close()
    # The driver opened a transaction for it; a later rollback would undo the settings.
    dbapi_connection.commit()
    record.info[_ADOPTED] = True


@functools.cache
def _per_transaction() -> Callable[[Connection], None]:
    statement = _settings_statement(local=True)

    def apply(conn: Connection) -> None:
        conn.exec_driver_sql(statement)

    return apply


async def adopt_sessions(conn: AsyncConnection, per_transaction: bool) -> None:
    """Give every session of ``conn``'s engine ``DISTRIBUTED_SESSION_SETTINGS``, from now
    on and on ``conn`` itself: once per pooled connection, or at each transaction's start
    behind a transaction pooler (``per_transaction``); and mark the engine's
    connections to take the routed statements (``legato.schema.layout``). Called by
    ``legato.db.adopt_installation`` when the installation is distributed."""
    mark_routed(conn.engine)
    engine = conn.engine.sync_engine
    if per_transaction:
        if not event.contains(engine, "begin", _per_transaction()):
            event.listen(engine, "begin", _per_transaction())
        await conn.exec_driver_sql(_settings_statement(local=True))
        return
    if not event.contains(engine, "checkout", _distributed_checkout):
        event.listen(engine, "checkout", _distributed_checkout)
    await conn.exec_driver_sql(_settings_statement(local=False))
