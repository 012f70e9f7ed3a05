"""Retention against a real server: cut-offs that would reach the current month are
refused everywhere, and partition arithmetic is UTC whatever the session's time zone."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.repositories import partitions
from legato.errors import ConfigurationError
from legato.schema import RunEvents, Runs, RunStatus, Signals, Tasks, uuid7_bound
from legato.schema.tables import RunProgress
from tests.helpers import run_legato
from tests.integration.test_cli_db import assert_one_line_error
from tests.integration.test_partitions import _partitions, _past_month_with_a_run

ZONES = ("America/Los_Angeles", "Asia/Tokyo")


async def _finished_past_month(engine: AsyncEngine) -> None:
    """January 2024's partitions, holding one finished run with a task, signal, event and
    progress entry."""
    run_id = await _past_month_with_a_run(engine)
    async with engine.begin() as conn:
        await conn.execute(
            update(Runs.table).where(Runs.id == run_id).values(status=RunStatus.SUCCEEDED)
        )


async def _row_counts(conn: AsyncConnection) -> list[int]:
    tables = (Runs.table, Tasks.table, Signals.table, RunEvents.table, RunProgress.table)
    return [
        int((await conn.execute(select(func.count()).select_from(t))).scalar_one()) for t in tables
    ]


def _this_month() -> datetime:
    return partitions.month_start(datetime.now(UTC))


def test_check_retention_cutoff_is_pure() -> None:
    now = datetime(2026, 5, 17, 12, tzinfo=UTC)
    partitions.check_retention_cutoff(datetime(2026, 5, 1, tzinfo=UTC), now)
    partitions.check_retention_cutoff(datetime(2025, 1, 1, tzinfo=UTC), now)
    for refused in (datetime(2026, 5, 1, 0, 0, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)):
        with pytest.raises(ConfigurationError, match="no later than 2026-05-01") as caught:
            partitions.check_retention_cutoff(refused, now)
        assert f"{refused:%Y-%m-%d}" in str(caught.value)
    # The month is the UTC month: 2026-05-01T01:00+09:00 is still April in UTC.
    tokyo = datetime(2026, 5, 1, 1, tzinfo=UTC) - timedelta(hours=9)
    with pytest.raises(ConfigurationError, match="no later than 2026-04-01"):
        partitions.check_retention_cutoff(datetime(2026, 4, 2, tzinfo=UTC), tokyo)


async def test_a_cutoff_past_this_month_is_refused_and_drops_nothing(
    engine: AsyncEngine, database_url: str
) -> None:
    await _finished_past_month(engine)
    async with engine.connect() as conn:
        before, counts = await _partitions(conn), await _row_counts(conn)
    future = (datetime(2999, 1, 1, tzinfo=UTC), _this_month() + timedelta(days=1))

    for cutoff in future:  # Python
        async with engine.begin() as conn:
            with pytest.raises(ConfigurationError, match="after the start of the current month"):
                await partitions.drop(conn, cutoff)

    for cutoff in future:  # the SQL function itself, called directly
        async with engine.begin() as conn:
            with pytest.raises(DBAPIError) as caught:
                await conn.exec_driver_sql(
                    f"SELECT * FROM legato.drop_partitions_v1('{cutoff.isoformat()}')"
                )
            assert getattr(caught.value.orig, "sqlstate", None) == "22023"
            assert "after the start of the current month" in str(caught.value.orig)

    cli = await run_legato(
        "partitions", "drop", "--older-than", "2999-01-01", database_url=database_url
    )
    assert_one_line_error(cli, "2999-01-01", f"no later than {_this_month():%Y-%m-%d}")

    async with engine.connect() as conn:
        assert await _partitions(conn) == before
        assert await _row_counts(conn) == counts

    # The start of this month is the latest cut-off: it drops the past month only.
    async with engine.begin() as conn:
        assert await partitions.drop(conn, _this_month()) == [("runs_p202401", "dropped")]
    async with engine.connect() as conn:
        assert await _partitions(conn) == before - {
            f"{table}_p202401"
            for table in ("runs", "tasks", "signals", "run_events", "run_progress")
        }


@pytest.mark.parametrize("zone", ZONES)
async def test_drop_is_utc_whatever_the_session_time_zone(engine: AsyncEngine, zone: str) -> None:
    await _finished_past_month(engine)
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"SET timezone = '{zone}'")
        # January ends exactly at the cut-off: it is reported, and dropped.
        cutoff = datetime(2024, 2, 1, tzinfo=UTC)
        assert await partitions.drop(conn, cutoff, dry_run=True) == [("runs_p202401", "would drop")]
        assert await partitions.drop(conn, cutoff - timedelta(seconds=1)) == []
        assert await partitions.drop(conn, cutoff) == [("runs_p202401", "dropped")]
    async with engine.connect() as conn:
        assert not any(name.endswith("_p202401") for name in await _partitions(conn))


@pytest.mark.parametrize("zone", ZONES)
async def test_ensure_is_utc_whatever_the_session_time_zone(engine: AsyncEngine, zone: str) -> None:
    months_ahead, days_ahead = 14, 40  # across both DST changes of either zone's year
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"SET timezone = '{zone}'")
        await partitions.ensure(conn, months_ahead=months_ahead, days_ahead=days_ahead)
        bounds = await partitions.run_partition_bounds(conn)
        names = await _partitions(conn)
    this_month = _this_month()
    index = this_month.year * 12 + this_month.month - 1
    months = [
        datetime((index + i) // 12, (index + i) % 12 + 1, 1, tzinfo=UTC)
        for i in range(months_ahead + 2)
    ]
    assert bounds == [
        (uuid7_bound(int(lower.timestamp() * 1000)), uuid7_bound(int(upper.timestamp() * 1000)))
        for lower, upper in itertools.pairwise(months)
    ]
    assert {f"runs_p{month:%Y%m}" for month in months[:-1]} <= names
    today = datetime.now(UTC).date()
    days = {f"timers_p{today + timedelta(days=i):%Y%m%d}" for i in range(days_ahead + 1)}
    assert days <= names
