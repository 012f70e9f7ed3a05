"""Statements that read or write across shard keys carry ``params.FAN_OUT`` in their SQL.

The test of single-key statements (tests/integration/test_shard_statements.py) leaves
out whatever carries the mark; these check that each fan-out does carry it: the cached
builder is compiled directly, and the fan-outs that build their statement inline are
run on a real database (in a transaction rolled back) while the SQL they send is kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import create_engine
from legato.engine.repositories import (
    decide_queue,
    outbox,
    queue_leases,
    runs,
    stats,
    tasks,
    ui_queries,
)
from legato.engine.repositories.params import FAN_OUT
from legato.engine.repositories.ui_queries import RunQuery
from legato.models import RunFilter
from legato.schema import RunStatus

DIALECT = create_engine("postgresql://nobody@/nowhere", "legato").dialect  # compiles only


def sql_of(statement: Any) -> str:
    return str(statement.compile(dialect=DIALECT))


def test_open_waits_statement_is_marked() -> None:
    """Client.emit's fan-out (``tasks.open_waits``), built once by a cached builder."""
    assert FAN_OUT in sql_of(tasks._open_waits_statement())


FanOut = Callable[[Any], Awaitable[object]]

INLINE: dict[str, FanOut] = {
    "stats.task_backlog": stats.task_backlog,
    "stats.decide_backlog": stats.decide_backlog,
    "stats.quarantined_count": stats.quarantined_count,
    "stats.leases_by_worker": stats.leases_by_worker,
    "stats.running_runs": stats.running_runs,
    "stats.runs_by_status": lambda conn: stats.runs_by_status(conn, timedelta(days=1)),
    "stats.recent_failures": lambda conn: stats.recent_failures(
        conn, timedelta(hours=1), timedelta(days=1)
    ),
    "runs.list_runs": lambda conn: runs.list_runs(
        conn, RunFilter(workflow="wf"), before=None, limit=10
    ),
    "runs.list_runs(every filter)": lambda conn: runs.list_runs(
        conn,
        RunFilter(
            workflow="wf",
            version=2,
            status=RunStatus.FAILED,
            created_after=datetime(2026, 1, 1, tzinfo=UTC),
            created_before=datetime(2027, 1, 1, tzinfo=UTC),
            error_type="ValueError",
            node="charge",
        ),
        before=None,
        limit=10,
    ),
    "runs.count_runs": lambda conn: runs.count_runs(conn, RunFilter(status=RunStatus.FAILED)),
    "queue_leases.leased_by": lambda conn: queue_leases.leased_by(conn, "worker-1"),
    "outbox.entries(dead)": lambda conn: outbox.entries(conn, dead=True, limit=10),
    "outbox.entries(pending)": lambda conn: outbox.entries(conn, dead=False, limit=10),
    "outbox.get": lambda conn: outbox.get(conn, 1),
    "outbox.replay": lambda conn: outbox.replay(conn, [1, 2]),
    "ui_queries.list_runs": lambda conn: ui_queries.list_runs(conn, RunQuery(), None, 10),
    "ui_queries.runs_with_key": lambda conn: ui_queries.runs_with_key(conn, "k"),
    "ui_queries.workflow_versions": ui_queries.workflow_versions,
    "ui_queries.task_queues": ui_queries.task_queues,
    "decide_queue.quarantined": lambda conn: decide_queue.quarantined(conn, 10),
}


@pytest.mark.parametrize("name", sorted(INLINE))
async def test_inline_fan_out_is_marked(engine: AsyncEngine, name: str) -> None:
    sent: list[str] = []

    def keep(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        sent.append(sql)

    async with engine.connect() as conn:
        event.listen(engine.sync_engine, "before_cursor_execute", keep)
        try:
            await INLINE[name](conn)
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", keep)
            await conn.rollback()
    assert sent, f"{name} sent nothing"
    assert all(FAN_OUT in sql for sql in sent), sent
