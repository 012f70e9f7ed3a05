"""The sessions of a Legato engine: generic plans for the hot statements, and what a
caller passes through ``connect_args`` kept."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from legato.db import _replan_periodically, create_engine


async def _show(url: str, *names: str, **options: Any) -> list[str]:
    engine = create_engine(url, "legato", **options)
    try:
        async with engine.connect() as conn:
            return [(await conn.execute(text(f"SHOW {name}"))).scalar_one() for name in names]
    finally:
        await engine.dispose()


async def test_an_engine_plans_its_statements_generically(database_url: str) -> None:
    assert await _show(database_url, "plan_cache_mode") == ["force_generic_plan"]


async def test_server_settings_passed_by_the_caller_are_kept_and_win(database_url: str) -> None:
    given = {"server_settings": {"application_name": "billing", "plan_cache_mode": "auto"}}
    assert await _show(database_url, "application_name", "plan_cache_mode", connect_args=given) == [
        "billing",
        "auto",
    ]
    named = {"server_settings": {"application_name": "billing"}}
    assert await _show(database_url, "application_name", "plan_cache_mode", connect_args=named) == [
        "billing",
        "force_generic_plan",
    ]


async def test_a_long_lived_connection_plans_again_for_the_tables_it_has_now(
    database_url: str,
) -> None:
    """A generic plan is made from the tables' sizes when it is made, and a session kept
    it: made while a table was empty, it scanned the table whole after it had grown. A
    connection checked out ``REPLAN_EVERY`` after it last planned discards its plans, and
    the same prepared statement is planned for the table as it is."""
    engine = create_engine(database_url, "legato", pool_size=1)
    statement = text("EXPLAIN EXECUTE touch(ARRAY[1, 2, 3])")

    async def plan() -> str:
        async with engine.connect() as conn:
            return "\n".join((await conn.execute(statement)).scalars())

    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TEMP TABLE probe (id int PRIMARY KEY, v text)"))
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "PREPARE touch(int[]) AS UPDATE probe SET v = 'x' "
                    "FROM unnest($1) AS given(id) WHERE probe.id = given.id"
                )
            )
        young = await plan()
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO probe SELECT i, repeat('v', 200) FROM generate_series(1, 50000) i"
                )
            )
        kept = await plan()  # within REPLAN_EVERY: the plan it made
        _replan_periodically(engine, 0.0)  # as a checkout REPLAN_EVERY later does
        grown = await plan()
    finally:
        await engine.dispose()
    assert "Seq Scan on probe" in young, young
    assert kept == young
    assert "Index Scan using probe_pkey" in grown, grown
