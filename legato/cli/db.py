"""``legato db upgrade | downgrade | current | check`` and ``legato partitions ensure | drop``.

Every command validates ``--schema`` before it connects, so a bad name changes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from legato import distributed, migrations
from legato.cli import command, group, nonempty, number_in, shown
from legato.db import create_engine
from legato.db.schema_names import resolve_schema
from legato.db.server_check import schema_mismatch
from legato.db.urls import resolve_url
from legato.engine.repositories import partitions
from legato.outages import as_unavailable
from legato.schema.shards import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT


@asynccontextmanager
async def _engine(args: argparse.Namespace) -> AsyncIterator[tuple[AsyncEngine, str]]:
    schema = resolve_schema(args.schema)  # validated before any connection is made
    url = resolve_url(args.database_url)
    engine = create_engine(url, schema, pool_size=1, max_overflow=0)
    try:
        yield engine, schema
    except Exception as error:  # refused, unknown host, wrong password, no such database
        unavailable = as_unavailable(error, url)
        if unavailable is None:
            raise
        raise unavailable from None
    finally:
        await engine.dispose()


async def _upgrade(args: argparse.Namespace) -> int:
    async def upgrade(engine: AsyncEngine, schema: str, revision: str) -> None:
        if args.layout == "distributed":  # refused before anything is migrated
            async with engine.connect() as conn:
                if not await distributed.citus_coordinator(conn):
                    raise distributed.not_a_coordinator()
        await migrations.upgrade(engine, schema, revision, shard_count=args.shards)
        await _lay_out(engine, schema, args.layout)

    return await _migrate(args, upgrade)


async def _lay_out(engine: AsyncEngine, schema: str, layout: str | None) -> None:
    """After the migrations: distribute the schema over Citus (``--distributed``, or by
    default on a Citus coordinator) or leave it on one PostgreSQL, and say which."""
    count = await migrations.recorded_shard_count(engine, schema)
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        on_citus = await distributed.citus_coordinator(autocommit)
        already = await distributed.is_distributed(autocommit, schema)
        if count is None or layout == "single-node" or (layout is None and not on_citus):
            if already:
                print(f"schema {schema!r} stays distributed over Citus (it cannot be undone)")
            elif on_citus:
                print(f"schema {schema!r} is on the Citus coordinator alone (--single-node)")
            else:
                print(f"schema {schema!r} is on one PostgreSQL (no Citus coordinator here)")
            return
        made = await distributed.distribute(autocommit, schema, count)
    how = "detected Citus" if layout is None else "--distributed"
    print(
        f"schema {schema!r} is distributed over Citus ({how}): {len(made.distributed)} tables "
        f"by shard in {made.citus_shards} co-located Citus shards (one per key), "
        f"{len(made.reference)} reference tables, {len(made.coordinator)} on the coordinator"
    )


async def _downgrade(args: argparse.Namespace) -> int:
    return await _migrate(args, migrations.downgrade)


async def _migrate(
    args: argparse.Namespace, step: Callable[[AsyncEngine, str, str], Awaitable[None]]
) -> int:
    """Run ``step`` (upgrade or downgrade) to ``args.revision`` and say where it left the
    schema."""
    async with _engine(args) as (engine, schema):
        await step(engine, schema, args.revision)
        state = await migrations.state(engine, schema)
        count = await migrations.recorded_shard_count(engine, schema)
    keys = "" if count is None else f", with {count} shard keys"
    print(f"schema {schema!r} is at {', '.join(state.current) or 'base'}{keys}")
    return 0


async def _current(args: argparse.Namespace) -> int:
    async with _engine(args) as (engine, schema):
        state = await migrations.state(engine, schema)
    current = ", ".join(state.current) or "base (not migrated)"
    marker = " (head)" if state.up_to_date else f" (head is {state.head})"
    print(f"{current}{marker}")
    return 0


async def _check(args: argparse.Namespace) -> int:
    async with _engine(args) as (engine, schema):
        state = await migrations.state(engine, schema)
    if state.up_to_date:
        print(f"schema {schema!r} is at head {state.head}")
        return 0
    print(schema_mismatch(schema, list(state.current), state.head))
    return 1


async def _ensure(args: argparse.Namespace) -> int:
    async with _engine(args) as (engine, _schema), engine.begin() as conn:
        created = await partitions.ensure(conn, months_ahead=args.ahead)
    for name in created:
        print(f"created {name}")
    if not created:
        print(f"no partitions needed: this month and {args.ahead} ahead already exist")
    return 0


# Each month is four partitions; a typo such as --ahead 1000 must not create thousands.
MAX_MONTHS_AHEAD = 60
_count = number_in(int, 0, MAX_MONTHS_AHEAD, f"a number of months (0 to {MAX_MONTHS_AHEAD})")


def _date(value: str) -> datetime:
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {shown(value)}") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _month_set(name: str) -> str:
    """``runs_p202401`` stands for its month: name the referencing partitions too."""
    prefix, _, suffix = name.partition("_p")
    if prefix != "runs":
        return name
    related = ", ".join(f"{table}_p{suffix}" for table in ("tasks", "signals", "run_events"))
    return f"{name} (with {related})"


async def _drop(args: argparse.Namespace) -> int:
    async with _engine(args) as (engine, _schema), engine.begin() as conn:
        outcome = await partitions.drop(conn, args.older_than, dry_run=args.dry_run)
    for name, action in outcome:
        print(f"{name} {action}" if action.startswith("kept") else f"{action} {_month_set(name)}")
    if not outcome:
        print(f"no partitions ended before {args.older_than.date().isoformat()}")
    return 0


def register(commands: Any) -> None:
    """Register ``legato db ...`` and ``legato partitions ...`` on the root parser."""
    db_commands = group(commands, "db", "migrate Legato's schema")
    upgrade = command(
        db_commands, "upgrade", "apply Legato's migrations (default: to head)", _upgrade
    )
    upgrade.add_argument(
        "--revision", type=nonempty, default="head", help="target revision (default: head)"
    )
    upgrade.add_argument(
        "--shards",
        type=number_in(int, 1, MAX_SHARD_COUNT, f"a number of shard keys (1 to {MAX_SHARD_COUNT})"),
        default=None,
        metavar="N",
        help=(
            "number of shard keys, fixed when the schema's keys are created (default: "
            f"$LEGATO_SHARD_COUNT, else {DEFAULT_SHARD_COUNT}); on a schema that has its "
            "keys, a different N is refused"
        ),
    )
    layout = upgrade.add_mutually_exclusive_group()
    layout.add_argument(
        "--distributed",
        dest="layout",
        action="store_const",
        const="distributed",
        help=(
            "distribute the run-scoped tables over the Citus cluster this database is the "
            "coordinator of (default: when the database has Citus)"
        ),
    )
    layout.add_argument(
        "--single-node",
        dest="layout",
        action="store_const",
        const="single-node",
        help="keep every table on this server, even on a Citus coordinator",
    )
    downgrade = command(
        db_commands,
        "downgrade",
        "revert Legato's migrations (default: to base, removing every Legato table)",
        _downgrade,
    )
    downgrade.add_argument(
        "--revision",
        type=nonempty,
        default="base",
        help="target revision (default: base; asks no questions)",
    )
    command(db_commands, "current", "show the applied migration and the package's head", _current)
    command(
        db_commands,
        "check",
        "exit 1 unless the schema is at this package's migration head",
        _check,
    )

    partition_commands = group(commands, "partitions", "create and drop partitions")
    ensure = command(
        partition_commands,
        "ensure",
        "create this month's partitions and those ahead (the decider also does this)",
        _ensure,
    )
    ensure.add_argument(
        "--ahead", type=_count, default=3, metavar="N", help="months ahead to create (default: 3)"
    )
    drop = command(
        partition_commands,
        "drop",
        "drop whole months that ended by a date; months with running runs are kept",
        _drop,
    )
    drop.add_argument(
        "--older-than",
        type=_date,
        required=True,
        metavar="DATE",
        help="drop partitions whose range ended by this date (YYYY-MM-DD, UTC)",
    )
    drop.add_argument("--dry-run", action="store_true", help="report, change nothing")
