"""Migration 0004 removes the columns nothing wrote, and its downgrade puts them back."""

from __future__ import annotations

from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import migrations
from legato.db import create_engine

DEAD = {("timers", "claimed_at"), ("workflow_definitions", "deleted_at")}


async def _dead_schema_present(engine: AsyncEngine) -> tuple[set[tuple[str, str]], set[str]]:
    def read(sync: object) -> tuple[set[tuple[str, str]], set[str]]:
        inspector = inspect(sync)
        columns = {
            (table, column["name"])
            for table in ("timers", "workflow_definitions")
            for column in inspector.get_columns(table, schema="legato")
        }
        indexes = {str(index["name"]) for index in inspector.get_indexes("timers", "legato")}
        return columns & DEAD, indexes & {"ix_timers_unclaimed"}

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_0004_drops_dead_columns_and_downgrade_restores_them(
    empty_database_url: str,
) -> None:
    engine = create_engine(empty_database_url, "legato")
    try:
        await migrations.upgrade(engine, "legato")
        at_head = await _dead_schema_present(engine)
        await migrations.downgrade(engine, "legato", "0001")
        at_0001 = await _dead_schema_present(engine)
        await migrations.upgrade(engine, "legato")
        again = await _dead_schema_present(engine)
    finally:
        await engine.dispose()
    assert at_head == (set(), set())
    assert at_0001 == (DEAD, {"ix_timers_unclaimed"})
    assert again == (set(), set())
