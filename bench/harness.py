"""The benchmark's PostgreSQL, its databases, the machine context and the figures.

One server per run: an embedded PostgreSQL 18 in a temporary directory (durable
defaults: ``fsync = on``, ``synchronous_commit = on``), or ``--database-url``. Each
scenario gets a fresh database cloned from a migrated template (or, when the role
cannot create databases, a fresh schema in the given database; on a Citus coordinator
with ``--citus``, a fresh schema with ``CITUS_KEYS`` keys, distributed or not). With ``pooler``, a
PgBouncer in transaction mode in front of the server carries every engine's statements
while LISTEN goes straight to the server (``listen_url``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench.lived_in import live_in
from bench.txcount import LOG_LINE_PREFIX, PROBE_APP, STATEMENT_LOG, LogWindow
from legato import migrations
from legato.db import create_engine
from legato.db.urls import resolve_url
from legato.distributed import DISTRIBUTED_SESSION_SETTINGS, distribute
from legato.embedded import LocalPostgres
from legato.testing.database import running_pgbouncer

SCHEMA = "legato"
# Keys of a Citus bench schema (``--citus``): each a Citus shard of its own (9 per
# table), so a scenario's schema is distributed in seconds.
CITUS_KEYS = 4

#: Server settings of the embedded PostgreSQL: room for the bench's connections and the
#: million-run history; everything else stays at PostgreSQL's (durable) defaults.
#: The log line prefix lets bench.txcount count a scenario's transactions.
EMBEDDED_SETTINGS = {
    "max_connections": "200",
    "shared_buffers": "256MB",
    "log_line_prefix": LOG_LINE_PREFIX,
}


@dataclass
class Figure:
    """One measured figure and the settings it was measured with."""

    scenario: str
    name: str
    value: float
    unit: str
    settings: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return f"{self.scenario:<8} {self.name:<46} {_fmt(self.value):>10} {self.unit:<6} {shown}"


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Target:
    """A database (URL + schema) a scenario runs against; behind a transaction pooler,
    ``url`` is the pooler's and ``listen_url`` the server's own for the same database."""

    url: str
    schema: str
    pooler: str | None = None
    listen_url: str | None = None
    # A distributed schema: the bench's own engines (probes, seeding) take the session
    # settings a Legato process adopts there (legato.distributed), as libpq settings.
    distributed: bool = False

    @property
    def direct_url(self) -> str:
        """The server's own URL of the database (the bare-commit floor's connection)."""
        return self.listen_url or self.url

    def engine(self, **options: Any) -> AsyncEngine:
        """A Legato engine on this database (through the pooler when there is one)."""
        if self.distributed:
            connect_args = dict(options.pop("connect_args", {}))
            settings = dict(connect_args.get("server_settings", {}))
            connect_args["server_settings"] = {**settings, **DISTRIBUTED_SESSION_SETTINGS}
            options["connect_args"] = connect_args
        return create_engine(
            self.url, self.schema, pooler=self.pooler, listen_url=self.listen_url, **options
        )


class Server:
    """The PostgreSQL server of one bench run and the databases made on it."""

    def __init__(
        self,
        database_url: str | None,
        *,
        pooler: bool = False,
        citus: str | None = None,
        lived_in: bool = False,
    ) -> None:
        self.local: LocalPostgres | None = None
        self.given = database_url
        self.pooler = pooler
        # On a Citus coordinator (``--citus``): a schema per scenario in the given
        # database with CITUS_KEYS keys, "distributed" over the cluster or kept on the
        # coordinator alone ("single-node"), so the two layouts compare like for like.
        self.citus = citus
        # Each scenario's database starts lived-in (bench.lived_in), not fresh.
        self.lived_in = lived_in
        self._pooler_url: str | None = None
        self._pgbouncer = ExitStack()
        self._template: str | None = None
        self._made: list[Target] = []
        self.databases = True
        self.run_tag = uuid.uuid4().hex[:8]

    async def start(self) -> None:
        if self.given is None:
            self.local = LocalPostgres(settings=dict(EMBEDDED_SETTINGS)).start()
            self.admin_url = self.local.url()
        else:
            self.admin_url = self.given
        if self.pooler:
            try:
                self._pooler_url = self._pgbouncer.enter_context(running_pgbouncer(self.admin_url))
            except BaseException:
                await self.stop()
                raise
        if self.citus is not None:
            self.databases = False
            return
        try:
            await self._admin(f'CREATE DATABASE "lb_{self.run_tag}_tpl"')
            self._template = f"lb_{self.run_tag}_tpl"
            tpl = self.url_of(self._template)
            engine = create_engine(tpl, SCHEMA)
            try:
                await migrations.upgrade(engine, SCHEMA)
                if self.lived_in:
                    await live_in(engine)
            finally:
                await engine.dispose()
        except Exception:
            if self.given is None:
                raise
            self.databases = False  # no CREATE DATABASE: fresh schemas in the given database

    def url_of(self, database: str, *, server_url: str | None = None) -> str:
        return (
            resolve_url(server_url or self.admin_url)
            .set(database=database)
            .render_as_string(hide_password=False)
            .replace("postgresql+asyncpg://", "postgresql://")
        )

    async def _admin(self, statement: str) -> None:
        engine = create_async_engine(resolve_url(self.admin_url), isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql(statement)
        finally:
            await engine.dispose()

    async def fresh(self, label: str) -> Target:
        """A fresh migrated Legato database (or schema) for one scenario."""
        name = f"lb_{self.run_tag}_{label.replace('-', '_')}_{len(self._made)}"
        if self.databases:
            await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
            target = self._target(self.url_of(name), SCHEMA)
        else:
            assert self.given is not None
            target = self._target(self.given, name)
            if self.citus == "distributed":
                target = replace(target, distributed=True)
            engine = create_engine(self.given, name)
            try:
                if self.citus is None:
                    await migrations.upgrade(engine, name)
                else:
                    await migrations.upgrade(engine, name, shard_count=CITUS_KEYS)
                if self.citus == "distributed":
                    async with engine.connect() as conn:
                        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
                        await distribute(autocommit, name, CITUS_KEYS)
                if self.lived_in:
                    await live_in(engine)
            finally:
                await engine.dispose()
        self._made.append(target)
        return target

    def _target(self, direct_url: str, schema: str) -> Target:
        """``direct_url``'s database as a Target: through the pooler when there is one
        (PgBouncer's wildcard entry serves every database by its name)."""
        if self._pooler_url is None:
            return Target(direct_url, schema)
        database = str(resolve_url(direct_url).database)
        pooled = self.url_of(database, server_url=self._pooler_url)
        return Target(pooled, schema, pooler="transaction", listen_url=direct_url)

    async def empty_database(self, label: str) -> str:
        """A fresh empty database for a peer (plain URL); the given one without CREATE."""
        if not self.databases:
            assert self.given is not None
            return self.given
        name = f"lb_{self.run_tag}_{label}"
        await self._admin(f'CREATE DATABASE "{name}"')
        self._made.append(Target(self.url_of(name), ""))
        return self.url_of(name)

    async def statement_log(self, target: Target) -> LogWindow | None:
        """Log every statement of ``target``'s database from its next connections on, to
        count its transactions (bench.txcount); None when the server's log is not ours."""
        if self.local is None or not self.databases:
            return None
        database = resolve_url(target.url).database
        await self._admin(f"ALTER DATABASE \"{database}\" SET log_statement = '{STATEMENT_LOG}'")
        return LogWindow(self.local.log_file, str(database))

    async def stop(self) -> None:
        self._pgbouncer.close()
        if self.local is not None:
            for line in self.local.crash_reports():
                print(f"PostgreSQL crash during the bench: {line}", file=sys.stderr)
            self.local.stop()
            return
        for target in self._made:
            if self.databases:
                database = resolve_url(target.url).database
                await self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            elif target.schema:
                await self._admin(f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE')
        if self._template is not None:
            await self._admin(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')


def probe_engine(target: Target) -> AsyncEngine:
    """An engine for the bench's own reads (progress polls, counters), named so that
    bench.txcount leaves its transactions out."""
    return target.engine(
        pool_size=2, connect_args={"server_settings": {"application_name": PROBE_APP}}
    )


async def machine_context(engine: AsyncEngine) -> dict[str, Any]:
    """What every figure is measured on."""
    async with engine.connect() as conn:

        async def show(name: str) -> str:
            return str((await conn.exec_driver_sql(f"SHOW {name}")).scalar_one())

        context = {
            "cores": os.cpu_count(),
            "cpu": _cpu_model(),
            "python": platform.python_version(),
            "postgresql": await show("server_version"),
            "synchronous_commit": await show("synchronous_commit"),
            "fsync": await show("fsync"),
            "shared_buffers": await show("shared_buffers"),
            "max_connections": await show("max_connections"),
        }
    return context


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def to_json(context: dict[str, Any], figures: Sequence[Figure], extra: dict[str, Any]) -> str:
    return json.dumps(
        {"machine": context, "figures": [asdict(f) for f in figures], **extra}, indent=2
    )
