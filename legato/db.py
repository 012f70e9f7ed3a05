"""Connecting: URL normalisation, the schema-translated engine and the capability check."""

from __future__ import annotations

import os
import re
from typing import Any

from sqlalchemy import URL, make_url, select
from sqlalchemy.exc import ArgumentError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from legato.errors import ConfigurationError, IncompatibleDatabase
from legato.schema import SCHEMA_PLACEHOLDER, SchemaVersion

DEFAULT_SCHEMA = "legato"
MIN_SERVER_VERSION_NUM = 150000
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def validate_schema_name(schema: str) -> str:
    """A schema name Legato accepts: a plain SQL identifier (letters, digits, underscore)."""
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: use letters, digits and underscores "
            "(at most 63, not starting with a digit)"
        )
    return schema


def resolve_schema(schema: str | None) -> str:
    """``--schema``, else ``LEGATO_SCHEMA``, else ``legato``; validated."""
    return validate_schema_name(schema or os.environ.get("LEGATO_SCHEMA") or DEFAULT_SCHEMA)


def resolve_url(url: str | None) -> URL:
    """``--database-url``, else ``LEGATO_DATABASE_URL``, as an asyncpg SQLAlchemy URL.

    Accepts the plain ``postgresql://`` / ``postgres://`` URLs users already have,
    including a Unix-socket directory given as ``?host=/dir``.
    """
    raw = url or os.environ.get("LEGATO_DATABASE_URL")
    if not raw:
        raise ConfigurationError(
            "no database given: pass --database-url or set LEGATO_DATABASE_URL "
            "(e.g. postgresql://user:password@localhost:5432/app)"
        )
    try:
        parsed = make_url(raw)
    except ArgumentError:
        raise ConfigurationError(f"not a database URL: {raw!r}") from None
    if parsed.drivername not in ("postgresql", "postgres", "postgresql+asyncpg"):
        raise ConfigurationError(
            f"unsupported database URL scheme {parsed.drivername!r}: Legato needs PostgreSQL "
            "(postgresql://...)"
        )
    sslmode = parsed.query.get("sslmode")
    if sslmode is not None:  # libpq's name; asyncpg takes the same values as ``ssl``
        parsed = parsed.difference_update_query(["sslmode"])
        if "ssl" not in parsed.query:
            parsed = parsed.update_query_dict({"ssl": sslmode})
    return parsed.set(drivername="postgresql+asyncpg")


def create_engine(
    url: str | URL | None = None, schema: str | None = None, **engine_options: Any
) -> AsyncEngine:
    """An async engine whose Core statements target ``schema`` (``schema_translate_map``)."""
    target = url if isinstance(url, URL) else resolve_url(url)
    options: dict[str, Any] = {"pool_size": 10, "max_overflow": 10, "pool_pre_ping": False}
    options.update(engine_options)
    engine = create_async_engine(target, **options)
    return engine.execution_options(
        schema_translate_map={SCHEMA_PLACEHOLDER: resolve_schema(schema)}
    )


async def server_version_num(conn: AsyncConnection) -> int:
    """The server's ``server_version_num`` (150000 for 15.0)."""
    result = await conn.exec_driver_sql("SHOW server_version_num")
    return int(result.scalar_one())


# The migration head this package's code expects: a constant, so that checking a
# database at connect needs no Alembic import (tests/migration keeps it equal to the
# head of legato/alembic/versions).
HEAD_REVISION = "0008"


async def check_database(conn: AsyncConnection, schema: str) -> None:
    """Refuse a server older than 15 or a schema not at this package's migration head."""
    version = await server_version_num(conn)
    if version < MIN_SERVER_VERSION_NUM:
        raise IncompatibleDatabase(
            f"PostgreSQL {version // 10000} is too old: Legato needs PostgreSQL 15 or newer "
            "(18 recommended)"
        )
    head = HEAD_REVISION
    try:
        applied = list((await conn.execute(select(SchemaVersion.version_num))).scalars().all())
    except ProgrammingError:  # no version table: the schema was never migrated
        await conn.rollback()
        applied = []
    if applied != [head]:
        found = ", ".join(applied) if applied else "nothing"
        raise IncompatibleDatabase(
            f"schema {schema!r} is at migration {found}, this Legato needs {head}: "
            "run `legato db upgrade` (or `alembic upgrade head` with Legato's branch)"
        )
