"""Partitions of the run-scoped tables (monthly) and of ``timers`` (daily).

Creation and retention run inside SQL functions (``ensure_partitions_v1``,
``drop_partitions_v1``, created by migration 0001 and replaced by 0002 so that their
arithmetic is UTC whatever the connection's ``timezone``), which serialise on one advisory
lock per schema; this module calls them and reads the catalog. Functions live in
the real schema, so their package name comes from the connection's
``schema_translate_map`` (``schema_translate_map`` does not rewrite function names).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Integer, Text, column, func, literal, select, table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.type_api import to_instance
from sqlalchemy.sql.visitors import InternalTraversal, _TraverseInternalsType

from legato.db.schema_names import DEFAULT_SCHEMA, validate_schema_name
from legato.engine.repositories.params import fan_out
from legato.errors import ConfigurationError, InvalidRunId
from legato.schema import SCHEMA_PLACEHOLDER, Runs, is_uuid7, uuid7_time_ms

Bounds = Sequence[tuple[uuid.UUID, uuid.UUID]]

# Lightweight declarations of the two catalogs the bound query reads.
_pg_inherits = table("pg_inherits", column("inhrelid"), column("inhparent"), schema="pg_catalog")
_pg_class = table(
    "pg_class", column("oid"), column("relname"), column("relpartbound"), schema="pg_catalog"
)

_BOUND = re.compile(
    r"FOR VALUES FROM \('(?P<lower>[0-9a-f-]{36})'\) TO \('(?P<upper>[0-9a-f-]{36})'\)"
)


def schema_name(conn: AsyncConnection) -> str:
    """The real schema the connection maps the placeholder ``legato`` to (validated)."""
    sync = conn.sync_connection
    options: Any = (
        sync.get_execution_options() if sync is not None else conn.engine.get_execution_options()
    )
    mapping = options.get("schema_translate_map") or {}
    return validate_schema_name(str(mapping.get(SCHEMA_PLACEHOLDER) or DEFAULT_SCHEMA))


class _SchemaFunction(FunctionElement[Any]):
    """A call of one of Legato's SQL functions, in the connection's real schema.

    ``schema_translate_map`` does not rewrite function names, and ``Function``'s
    ``packagenames`` are quoted only for illegal characters (a schema such as
    ``Tenant_2`` would be folded to ``tenant_2``), so the schema is rendered here
    through the dialect's preparer.
    """

    # The schema and the name are part of the statement's cache key, so a call is compiled
    # once per schema and name, not at every execution (a decider's sleep gate runs one
    # each time it is about to sleep).
    inherit_cache = True
    _traverse_internals: _TraverseInternalsType = [  # noqa: RUF012 (as SQLAlchemy declares it)
        *FunctionElement._traverse_internals,
        ("target_schema", InternalTraversal.dp_string),
        ("function_name", InternalTraversal.dp_string),
        ("type", InternalTraversal.dp_type),
    ]

    def __init__(self, schema: str, name: str, *args: Any, type_: Any = None) -> None:
        self.target_schema = schema
        self.function_name = name
        self.type = to_instance(type_)
        super().__init__(*args)


@compiles(_SchemaFunction)
def _compile_schema_function(element: _SchemaFunction, compiler: SQLCompiler, **kw: Any) -> str:
    preparer = compiler.preparer
    name = f"{preparer.quote_schema(element.target_schema)}.{preparer.quote(element.function_name)}"
    return name + compiler.process(element.clause_expr, **kw)


def schema_function(
    conn: AsyncConnection, name: str, *args: Any, type_: Any = None
) -> _SchemaFunction:
    """A call of Legato's SQL function ``name`` in ``conn``'s schema."""
    return _SchemaFunction(schema_name(conn), name, *args, type_=type_)


async def ensure(conn: AsyncConnection, months_ahead: int = 3, days_ahead: int = 7) -> list[str]:
    """Create this month's and ``months_ahead`` months of run-scoped partitions, and today's
    and ``days_ahead`` days of timer partitions; return the names *this call* created.

    Called by the decider process's periodic maintenance and ``legato partitions ensure``.
    Served by ``ensure_partitions_v1``: it holds a per-schema advisory transaction lock
    (released when the caller's transaction ends, so commit promptly) and treats a lost
    creation race as someone else's report, so concurrent callers never both report one
    partition and never fail.
    """
    if months_ahead < 0 or days_ahead < 0:
        raise ValueError("months_ahead and days_ahead must be zero or more")
    result = await conn.execute(
        select(
            schema_function(
                conn,
                "ensure_partitions_v1",
                literal(months_ahead, Integer()),
                literal(days_ahead, Integer()),
                type_=Text(),
            )
        )
    )
    return [str(name) for name in result.scalars()]


def month_start(moment: datetime) -> datetime:
    """The first instant of ``moment``'s month in UTC (partition months are UTC months)."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, 1, tzinfo=UTC)


def check_retention_cutoff(older_than: datetime, now: datetime) -> None:
    """Refuse a retention cut-off later than the start of ``now``'s UTC month; pure.

    A later cut-off would drop the current month (still being written) and the months
    created ahead. ``drop_partitions_v1`` refuses the same on the server's clock.
    """
    if older_than.tzinfo is None:
        raise ValueError("older_than must be timezone-aware")
    latest = month_start(now)
    if older_than > latest:
        raise ConfigurationError(
            f"retention cut-off {older_than.astimezone(UTC):%Y-%m-%d %H:%M} UTC is after the "
            f"start of the current month ({latest:%Y-%m-%d}): only months that ended by the "
            f"cut-off are dropped, so give a date no later than {latest:%Y-%m-%d}"
        )


async def drop(
    conn: AsyncConnection, older_than: datetime, dry_run: bool = False
) -> list[tuple[str, str]]:
    """Fan-out across shard keys: drop every monthly partition set (run_events, signals,
    tasks, then runs) and daily timer partition that ended by ``older_than``, whatever keys
    its rows carry; return ``(partition, action)`` pairs where the
    action is ``dropped``, ``would drop`` or ``kept: <reason>``.

    Called by ``legato partitions drop`` (retention). A cut-off after the start of the
    current UTC month raises ``ConfigurationError`` and changes nothing (checked here and
    again by the function). Served by ``drop_partitions_v1``, under the same advisory lock
    as ``ensure``: a month that still has a RUNNING run (checked through
    ``ix_runs_active``) is kept and reported, never dropped.
    """
    check_retention_cutoff(older_than, datetime.now(UTC))
    rows = schema_function(
        conn,
        "drop_partitions_v1",
        literal(older_than, DateTime(timezone=True)),
        literal(dry_run, Boolean()),
    ).table_valued(column("partition", Text()), column("action", Text()))
    try:
        result = await conn.execute(fan_out(select(rows.c.partition, rows.c.action)))
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) != _RETENTION_REFUSED:
            raise
        # This host's clock is ahead of the server's; the server's month decides.
        raise ConfigurationError(f"refused by the database: {_first_line(error.orig)}") from None
    return [(str(partition), str(action)) for partition, action in result]


_RETENTION_REFUSED = "22023"  # drop_partitions_v1's refusal (migration 0002)


def _first_line(error: BaseException | None) -> str:
    return str(error).strip().splitlines()[0].split(": ", 1)[-1]


async def run_partition_bounds(conn: AsyncConnection) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The ``[lower, upper)`` run-id range of each existing ``runs`` partition, in order.

    Called by the client before it starts a run with a caller-supplied id (``check_run_id``)
    and by ``legato partitions`` reporting. Reads ``pg_inherits`` / ``pg_class`` (a handful
    of catalog rows) and parses ``pg_get_expr(relpartbound)``.
    """
    parent = func.to_regclass(
        func.format(
            literal("%I.%I", Text()),
            literal(schema_name(conn), Text()),
            literal(Runs.table.name, Text()),
        )
    )
    bound_expr = func.pg_get_expr(_pg_class.c.relpartbound, _pg_class.c.oid, type_=Text())
    result = await conn.execute(
        select(bound_expr)
        .select_from(_pg_inherits.join(_pg_class, _pg_class.c.oid == _pg_inherits.c.inhrelid))
        .where(_pg_inherits.c.inhparent == parent)
    )
    bounds: list[tuple[uuid.UUID, uuid.UUID]] = []
    for expr in result.scalars():
        match = _BOUND.search(str(expr))
        if match is None:  # not a range partition Legato created; it bounds nothing for us
            continue
        bounds.append((uuid.UUID(match["lower"]), uuid.UUID(match["upper"])))
    return sorted(bounds)


def _when(value: uuid.UUID) -> str:
    ms = uuid7_time_ms(value)
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError):  # 48 bits of milliseconds reach the year 10889
        return f"Unix millisecond {ms}, after the year 9999"


def check_run_id(run_id: uuid.UUID, bounds: Bounds) -> None:
    """Refuse a caller-supplied run id that is not a UUIDv7 or that no ``runs`` partition
    holds (raises ``InvalidRunId`` naming the id and the covered range); pure.

    Called by the client's start path with ``run_partition_bounds`` before any write.
    """
    if not is_uuid7(run_id):
        raise InvalidRunId(
            f"run id {run_id} is not a UUIDv7 (it is a version {run_id.version} UUID): "
            "run ids must be time-ordered UUIDv7 values, e.g. legato.schema.uuid7()"
        )
    if any(lower <= run_id < upper for lower, upper in bounds):
        return
    if not bounds:
        raise InvalidRunId(
            f"run id {run_id} (created {_when(run_id)}) cannot be stored: the runs table has "
            "no partitions; run `legato partitions ensure`"
        )
    covered = f"{_when(min(lower for lower, _ in bounds))} to {_when(max(u for _, u in bounds))}"
    raise InvalidRunId(
        f"run id {run_id} (created {_when(run_id)}) falls outside every runs partition "
        f"(partitions cover {covered}): use a current UUIDv7, or create its month with "
        "`legato partitions ensure`"
    )
