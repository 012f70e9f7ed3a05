"""Legato's Alembic environment, driven from code (``legato db ...``) or from a host's Alembic.

Migrations live in ``legato/alembic`` (``script_location = legato:alembic``) and
record their version in Legato's own table, ``<schema>.legato_version``, never in
the host's ``alembic_version``. Concurrent upgrades are serialised by an advisory
lock taken in ``env.py``.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Column, Connection, MetaData, String, Table, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db.schema_names import DEFAULT_SCHEMA, validate_schema_name
from legato.db.server_check import connect, schema_mismatch
from legato.errors import ConfigurationError, IncompatibleDatabase
from legato.schema import Installation
from legato.schema.shards import check_shard_count

SCRIPT_LOCATION = "legato:alembic"
VERSION_TABLE = "legato_version"
BRANCH_LABEL = "legato"


def alembic_config(
    schema: str, connection: Connection | None = None, shard_count: int | None = None
) -> Config:
    """An Alembic ``Config`` for Legato's migrations targeting ``schema`` (and the shard
    key count migration 0011 records when it creates the schema's keys)."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.attributes["legato_schema"] = validate_schema_name(schema)
    cfg.attributes["connection"] = connection
    if shard_count is not None:
        cfg.attributes["legato_shard_count"] = shard_count
    return cfg


@cache
def head_revision() -> str:
    """The migration head this package expects."""
    head = ScriptDirectory.from_config(alembic_config(DEFAULT_SCHEMA)).get_current_head()
    assert head is not None, "Legato ships at least one migration"
    return head


def migration_schema() -> str:
    """The schema a running migration targets.

    From Legato's own environment, or a host's Alembic environment that sets
    ``config.attributes["legato_schema"]``; else ``LEGATO_SCHEMA``; else ``legato``.
    """
    from alembic import op

    config = op.get_context().config
    attributes = config.attributes if config is not None else {}
    schema = attributes.get("legato_schema") or os.environ.get("LEGATO_SCHEMA") or DEFAULT_SCHEMA
    return validate_schema_name(str(schema))


def hosted() -> bool:
    """Whether a host application's Alembic environment (not ``legato db``) runs this migration.

    A host records Legato's revisions in its own version table, so each Legato migration
    mirrors its revision into ``<schema>.legato_version`` (``record_revision``): the
    engine's start-up check reads that table whichever environment migrated.
    """
    from alembic import op

    context = op.get_context()
    return not (
        context.version_table == VERSION_TABLE
        and context.version_table_schema == migration_schema()
    )


def record_revision(revision: str | None) -> None:
    """End of every Legato migration: under a host's Alembic, set ``legato_version`` to
    ``revision`` (``None`` after downgrading to base). Under ``legato db`` Alembic does it."""
    if not hosted():
        return
    from alembic import op

    version = Table(
        VERSION_TABLE,
        MetaData(),
        Column("version_num", String(32), primary_key=True),
        schema=migration_schema(),
    )
    bind = op.get_bind()
    version.create(bind, checkfirst=True)
    bind.execute(version.delete())
    if revision is not None:
        bind.execute(version.insert().values(version_num=revision))


@dataclass(frozen=True)
class MigrationState:
    current: tuple[str, ...]
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == (self.head,)


_command_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _command_lock() -> asyncio.Lock:
    """One Alembic command at a time per event loop.

    Alembic's ``context``/``op`` proxies are module globals, so two commands interleaving
    on one loop (greenlets switch at every query) corrupt each other; across processes
    the advisory lock in ``env.py`` serialises them instead.
    """
    loop = asyncio.get_running_loop()
    lock = _command_locks.get(loop)
    if lock is None:
        lock = _command_locks[loop] = asyncio.Lock()
    return lock


async def upgrade(
    engine: AsyncEngine, schema: str, revision: str = "head", *, shard_count: int | None = None
) -> None:
    """Apply Legato's migrations up to ``revision`` (each in its own transaction).

    ``shard_count`` is the number of shard keys recorded when migration 0011 first runs
    (default ``LEGATO_SHARD_COUNT``, else 16); on a schema that already has its keys, a
    different count is a ``ConfigurationError``: the count never changes after creation.
    """
    if shard_count is not None:
        check_shard_count(shard_count)
        recorded = await recorded_shard_count(engine, schema)
        if recorded is not None and recorded != shard_count:
            raise ConfigurationError(
                f"schema {schema!r} was created with {recorded} shard keys, not {shard_count}: "
                "the count is fixed when the schema is created; omit --shards / shard_count"
            )
    await _migrate(engine, schema, revision, command.upgrade, shard_count)


async def recorded_shard_count(engine: AsyncEngine, schema: str) -> int | None:
    """The shard key count ``schema`` records, or None before migration 0011."""
    validate_schema_name(schema)
    async with connect(engine) as conn:
        found = await conn.execute(
            text("SELECT to_regclass(:table) IS NOT NULL"), {"table": f"{schema}.installation"}
        )
        if not found.scalar_one():
            return None
        count = await conn.execute(select(Installation.shard_count))
        return int(count.scalar_one())


async def downgrade(engine: AsyncEngine, schema: str, revision: str = "base") -> None:
    """Revert Legato's migrations down to ``revision`` (``base`` removes everything)."""
    await _migrate(engine, schema, revision, command.downgrade)


async def _migrate(
    engine: AsyncEngine,
    schema: str,
    revision: str,
    step: Callable[[Config, str], None],
    shard_count: int | None = None,
) -> None:
    """Run Alembic's ``step`` to ``revision``; an Alembic refusal is raised as the typed
    error that says what to do (``migration_refused``), before anything is changed."""
    validate_schema_name(schema)
    if not isinstance(revision, str) or not revision.strip():
        raise ConfigurationError(
            f"migration revision {revision!r} must be a non-empty string: a revision id, "
            "'head' or 'base'"
        )
    try:
        async with _command_lock(), connect(engine) as conn:
            await conn.run_sync(
                lambda sync: step(alembic_config(schema, sync, shard_count), revision)
            )
    except CommandError as error:
        raise migration_refused(schema, revision, error, await state(engine, schema)) from None


def migration_refused(
    schema: str, revision: str, error: CommandError, now: MigrationState
) -> IncompatibleDatabase | ConfigurationError:
    """Why Alembic refused to migrate ``schema`` to ``revision``, as a typed error; pure
    but for reading the package's revisions.

    A schema at a revision this package does not know was migrated by a newer Legato:
    that is said as ``legato db check`` says it (``schema_mismatch``), not as Alembic's
    "Can't locate revision"."""
    known = known_revisions()
    if any(rev not in known for rev in now.current):
        return IncompatibleDatabase(schema_mismatch(schema, list(now.current), now.head))
    return ConfigurationError(
        f"cannot migrate schema {schema!r} to migration revision {revision!r}: {error} (this "
        f"package knows {', '.join(sorted(known))}, or use 'head' or 'base'; the schema is "
        f"at {', '.join(now.current) or 'base'})"
    )


@cache
def known_revisions() -> frozenset[str]:
    """Every migration this package ships."""
    script = ScriptDirectory.from_config(alembic_config(DEFAULT_SCHEMA))
    return frozenset(rev.revision for rev in script.walk_revisions())


def _current(sync: Connection, schema: str) -> tuple[str, ...]:
    context = MigrationContext.configure(
        sync, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    return tuple(context.get_current_heads())


async def state(engine: AsyncEngine, schema: str) -> MigrationState:
    """The applied revision(s) of ``schema`` and the package's head."""
    validate_schema_name(schema)
    async with connect(engine) as conn:
        current = await conn.run_sync(lambda sync: _current(sync, schema))
    return MigrationState(current=current, head=head_revision())
