"""A host application's own Alembic runs Legato's migrations as a branch (docs/operations.md).

The host adds ``legato:alembic/versions`` to ``version_locations``, depends on the branch
label ``legato`` and names the schema in ``config.attributes["legato_schema"]``; its own
``alembic_version`` records the heads, and Legato's revision is mirrored into
``<schema>.legato_version`` so the engine's start-up check passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from legato import migrations
from legato.db import create_engine
from legato.db.server_check import check_database

HOST_ENV = """\
import asyncio

from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine

config = context.config
config.attributes.setdefault("legato_schema", "app_legato")


def run(connection):
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()


async def main():
    engine = create_async_engine(config.get_main_option("sqlalchemy.url"))
    async with engine.connect() as conn:
        await conn.run_sync(run)
        await conn.commit()
    await engine.dispose()


asyncio.run(main())
"""

HOST_MIGRATION = """\
import sqlalchemy as sa
from alembic import op

revision = "app0001"
down_revision = None
branch_labels = ("app",)
depends_on = "legato"


def upgrade():
    op.create_table("app_things", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("app_things")
"""


def _host_project(root: Path, url: str) -> Path:
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(HOST_ENV)
    (root / "migrations" / "versions" / "app0001_things.py").write_text(HOST_MIGRATION)
    ini = root / "alembic.ini"
    ini.write_text(
        "[alembic]\n"
        "script_location = %(here)s/migrations\n"
        "version_locations = %(here)s/migrations/versions legato:alembic/versions\n"
        "path_separator = space\n"
        f"sqlalchemy.url = {url.replace('%', '%%')}\n"
    )
    return ini


def _alembic(ini: Path, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEGATO_")}
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(ini), *args],
        cwd=ini.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_host_alembic_runs_legato_as_a_branch(
    tmp_path: Path, empty_database_url: str
) -> None:
    ini = _host_project(tmp_path, empty_database_url)
    _alembic(ini, "upgrade", "heads")

    engine = create_engine(empty_database_url, "app_legato")
    try:
        async with engine.connect() as conn:
            await check_database(conn, "app_legato")  # the engine would start
            host_versions = (
                await conn.exec_driver_sql("SELECT version_num FROM public.alembic_version")
            ).scalars()
            assert set(host_versions) <= {"app0001", migrations.head_revision()}
            tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names("app_legato"))
            assert {"runs", "task_queue", "timers", "legato_version"} <= set(tables)
            assert await conn.run_sync(lambda sync: inspect(sync).has_table("app_things"))
        assert (await migrations.state(engine, "app_legato")).up_to_date

        _alembic(ini, "downgrade", "base")
        state = await migrations.state(engine, "app_legato")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names("app_legato"))
    finally:
        await engine.dispose()
    assert state.current == ()
    assert set(tables) == {"legato_version"}
