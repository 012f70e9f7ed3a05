"""Migration 0002 replaces the partition functions; its downgrade restores 0001's bodies."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from legato import migrations
from legato.db import create_engine

FUNCTIONS = ("ensure_partitions_v1(integer,integer)", "drop_partitions_v1(timestamptz,boolean)")


async def _definitions(conn: AsyncConnection) -> dict[str, tuple[str, list[str] | None]]:
    found = {}
    for signature in FUNCTIONS:
        result = await conn.exec_driver_sql(
            "SELECT pg_get_functiondef(p.oid), p.proconfig FROM pg_proc p "
            f"WHERE p.oid = 'legato.{signature}'::regprocedure"
        )
        definition, config = tuple(result.one())
        found[signature] = (str(definition), config)
    return found


async def test_downgrade_to_0001_restores_the_old_functions(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        await migrations.upgrade(engine, "legato", "0001")
        async with engine.connect() as conn:
            old = await _definitions(conn)
        await migrations.upgrade(engine, "legato")
        async with engine.connect() as conn:
            new = await _definitions(conn)
        await migrations.downgrade(engine, "legato", "0001")
        async with engine.connect() as conn:
            restored = await _definitions(conn)
    finally:
        await engine.dispose()
    assert all(config is None for _, config in old.values())
    assert all(config == ["TimeZone=UTC"] for _, config in new.values())
    assert "retention cut-off" in new[FUNCTIONS[1]][0]
    assert restored == old
