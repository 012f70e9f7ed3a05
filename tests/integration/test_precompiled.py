"""Statements run in the caller's transaction from text compiled once
(``legato.engine.repositories.precompiled``): they are part of that transaction (the
first one sent begins it), they write in the engine's own schema, and SQLAlchemy's
cursor events still see them."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import migrations, uuid7
from legato.db import create_engine
from legato.engine.repositories import decide_queue
from legato.schema import DecideQueue


async def _queued(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(DecideQueue.table))).scalar_one()
        )


async def test_the_first_statement_begins_the_callers_transaction(engine: AsyncEngine) -> None:
    """A precompiled statement sent first in a transaction is not autocommitted: rolled
    back, it leaves nothing; committed, its row is there. SQLAlchemy's cursor events saw
    it (what statement-shape tests and instrumentation rely on)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        sent.append(text)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with engine.connect() as conn:
            await decide_queue.enqueue(conn, 3, [uuid7()], "a test")
            await conn.rollback()
        assert await _queued(engine) == 0
        async with engine.begin() as conn:
            await decide_queue.enqueue(conn, 3, [uuid7()], "a test")
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert await _queued(engine) == 1
    assert sum("INSERT INTO legato.decide_queue" in text for text in sent) == 2


@pytest.mark.parametrize("schema", ["wf_custom", "Tenant_2"])
async def test_a_statement_writes_in_its_engines_schema(
    empty_database_url: str, schema: str
) -> None:
    """Two engines on two schemas of one database: each statement goes to its engine's
    schema, though both run the same statement object (its text is compiled per
    schema)."""
    other = create_engine(empty_database_url, schema)
    default = create_engine(empty_database_url, "legato")
    try:
        for engine, name in ((other, schema), (default, "legato")):
            await migrations.upgrade(engine, name)
        async with other.begin() as conn:
            await decide_queue.enqueue(conn, 1, [uuid7(), uuid7()], "a test")
        async with default.begin() as conn:
            await decide_queue.enqueue(conn, 1, [uuid7()], "a test")
        assert (await _queued(other), await _queued(default)) == (2, 1)
    finally:
        await other.dispose()
        await default.dispose()
