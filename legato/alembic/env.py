"""Legato's Alembic environment (``script_location = legato:alembic``).

Driven by ``legato.migrations`` with a connection in ``config.attributes``; run
standalone it connects to ``sqlalchemy.url`` or ``LEGATO_DATABASE_URL`` itself
(asynchronously). The target schema comes from ``config.attributes["legato_schema"]``,
``-x schema=...``, ``LEGATO_SCHEMA`` or defaults to ``legato``.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection, func, select
from sqlalchemy.schema import CreateSchema

from legato.db import create_engine
from legato.db.schema_names import DEFAULT_SCHEMA, validate_schema_name
from legato.db.server_check import check_server_version
from legato.db.urls import resolve_url
from legato.migrations import VERSION_TABLE
from legato.schema import metadata
from legato.schema.shards import shard_count_setting

config = context.config
schema = validate_schema_name(
    config.attributes.get("legato_schema")
    or context.get_x_argument(as_dictionary=True).get("schema")
    or os.environ.get("LEGATO_SCHEMA")
    or DEFAULT_SCHEMA
)
config.attributes["legato_schema"] = schema


def _lock_key() -> object:
    return func.hashtext(f"legato-migrations:{schema}")


def run_with(connection: Connection) -> None:
    # Both before the first write (the schema below): a bad setting writes nothing.
    shard_count_setting(config.attributes.get("legato_shard_count"))
    check_server_version(connection)
    # A session-level advisory lock serialises concurrent upgrades of one schema;
    # committed at once so each migration still runs in its own transaction. The wait
    # for it is unbounded (lock_timeout 0 for this transaction only): a second upgrade
    # waits for the first however long it takes; each migration's DDL keeps the
    # session's lock_timeout, so it cannot queue every query behind a lock it waits for.
    connection.execute(select(func.set_config("lock_timeout", "0", True)))
    connection.execute(select(func.pg_advisory_lock(_lock_key())))
    connection.execute(CreateSchema(schema, if_not_exists=True))
    connection.commit()
    try:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=VERSION_TABLE,
            version_table_schema=schema,
            transaction_per_migration=True,
        )
        context.run_migrations()
    finally:
        connection.rollback()
        connection.execute(select(func.pg_advisory_unlock(_lock_key())))
        connection.commit()


async def _run_standalone() -> None:
    url = resolve_url(config.get_main_option("sqlalchemy.url"))
    engine = create_engine(url, schema, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(run_with)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Legato's migrations run online only (they take an advisory lock)")

given = config.attributes.get("connection")
if isinstance(given, Connection):
    run_with(given)
else:
    asyncio.run(_run_standalone())
