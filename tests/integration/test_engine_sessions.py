"""The sessions of a Legato engine: generic plans for the hot statements, and what a
caller passes through ``connect_args`` kept."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from legato.db import create_engine


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
    assert await _show(
        database_url, "application_name", "plan_cache_mode", connect_args=given
    ) == ["billing", "auto"]
    named = {"server_settings": {"application_name": "billing"}}
    assert await _show(
        database_url, "application_name", "plan_cache_mode", connect_args=named
    ) == ["billing", "force_generic_plan"]
