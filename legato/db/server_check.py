"""What a start checks of the database: a server from PostgreSQL 15, a schema at this
package's migration head, and a connect whose failure says the database is unavailable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy import Connection, select
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.db import TRANSACTION_POOLER, pooler_of
from legato.distributed import adopt_sessions, is_distributed
from legato.errors import IncompatibleDatabase
from legato.outages import as_unavailable, causes
from legato.schema import Installation, SchemaVersion, Shards

MIN_SERVER_VERSION_NUM = 150000


def read_server_version_num(conn: Connection) -> int:
    """The server's ``server_version_num`` (150000 for 15.0); a read, no write."""
    return int(conn.exec_driver_sql("SHOW server_version_num").scalar_one())


def require_supported_server(version_num: int) -> None:
    """Refuse a server older than PostgreSQL 15 (``IncompatibleDatabase``); pure."""
    if version_num < MIN_SERVER_VERSION_NUM:
        raise IncompatibleDatabase(
            f"PostgreSQL {version_num // 10000} (server_version_num {version_num}) is too old: "
            "Legato needs PostgreSQL 15 or newer (18 recommended); nothing was changed"
        )


def check_server_version(conn: Connection) -> None:
    """The one server-version check: every migration path (``legato db upgrade``,
    ``migrations.upgrade``, ``legato dev``, a host's Alembic) and every start
    (``check_database``) calls it before anything else."""
    require_supported_server(read_server_version_num(conn))


@asynccontextmanager
async def connect(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """``engine.connect()``, with a failure to connect raised as ``DatabaseUnavailable``
    (Client.connect, migrations)."""
    conn = engine.connect()
    try:
        await conn.start()
    except Exception as error:
        unavailable = as_unavailable(error, engine.url)
        if unavailable is None:
            raise
        raise unavailable from None
    try:
        yield conn
    finally:
        await conn.close()


async def server_version_num(conn: AsyncConnection) -> int:
    """The server's ``server_version_num`` (150000 for 15.0)."""
    return await conn.run_sync(read_server_version_num)


# The migration head this package's code expects: a constant, so that checking a
# database at connect needs no Alembic import (tests/migration keeps it equal to the
# head of legato/alembic/versions).
HEAD_REVISION = "0022"


def schema_mismatch(schema: str, applied: list[str], head: str) -> str:
    """What to do about a schema at ``applied`` when this package needs ``head``; pure.

    Revision ids are zero-padded numbers, so a larger one was written by a newer Legato,
    which ``legato db upgrade`` from this package cannot undo or pass.
    """
    found = ", ".join(applied) if applied else "nothing"
    if applied and all(rev.isdigit() for rev in applied) and max(map(int, applied)) > int(head):
        return (
            f"schema {schema!r} is at migration {found}, newer than this Legato package "
            f"(which knows migrations up to {head}): upgrade the legato package to the "
            "release that migrated this database"
        )
    return (
        f"schema {schema!r} is at migration {found}, this Legato needs {head}: "
        "run `legato db upgrade` (or `alembic upgrade head` with Legato's branch)"
    )


def missing_relation(error: BaseException) -> bool:
    """Whether ``error`` is a statement on a table, column or function the schema does
    not have: a schema never migrated, or not to this package's head."""
    return any(isinstance(cause, _MISSING) for cause in causes(error))


_MISSING = (
    asyncpg.UndefinedTableError,
    asyncpg.UndefinedColumnError,
    asyncpg.UndefinedFunctionError,
    asyncpg.InvalidSchemaNameError,
)


async def check_database(conn: AsyncConnection, schema: str) -> Shards:
    """Refuse a server older than 15 or a schema not at this package's migration head;
    return the installation's shard keys (fixed when the schema was created)."""
    await conn.run_sync(check_server_version)
    head = HEAD_REVISION
    try:
        applied = list((await conn.execute(select(SchemaVersion.version_num))).scalars().all())
    except ProgrammingError:  # no version table: the schema was never migrated
        await conn.rollback()
        applied = []
    if applied != [head]:
        raise IncompatibleDatabase(schema_mismatch(schema, applied, head))
    count = (await conn.execute(select(Installation.shard_count))).scalar_one()
    return await adopt_installation(conn, schema, int(count))


async def adopt_installation(conn: AsyncConnection, schema: str, count: int) -> Shards:
    """The installation's keys, and its sessions' settings on a distributed install
    (``legato.distributed.adopt_sessions``)."""
    shards = Shards(count, distributed=await is_distributed(conn, schema))
    if shards.distributed:
        await adopt_sessions(conn, per_transaction=pooler_of(conn.engine) == TRANSACTION_POOLER)
    return shards
