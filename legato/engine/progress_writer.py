"""The worker's side of streaming progress: the ``ctx.progress`` / ``ctx.stream`` of a
claimed attempt, each entry checked (``legato.progress``), counted against the
attempt's bounds and appended to ``run_progress`` in a transaction of its own before
the call returns, so an entry is kept whatever the attempt does next (a crash, a
retry, a transactional body rolled back). Each entry NOTIFYs the history channel with
``<run_id>:progress``, waking ``Client.stream`` and the dashboard's run page (which
both take only the run id from a payload).

An attempt that lost its lease (cancelled, timed out, superseded) writes no more: its
``ctx.progress`` raises ``TaskCancelled``, as ``ctx.heartbeat`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.context import TaskCancelled, TaskContext
from legato.db.schema_names import engine_schema
from legato.engine.repositories import notify, progress, task_queue
from legato.progress import AttemptBudget, ProgressKind, checked_entry
from legato.schema.types import strip_nul


def with_progress(
    ctx: TaskContext, engine: AsyncEngine, item: task_queue.Claimed, lost: Callable[[], bool]
) -> TaskContext:
    """``ctx`` whose progress is written to ``run_progress`` for attempt ``item``."""
    budget = AttemptBudget()
    channel = notify.events_channel(engine_schema(engine, "Worker"))

    async def report(kind: ProgressKind, value: object) -> None:
        if lost():
            raise TaskCancelled(f"attempt {item.attempt} of {item.task_name!r} was cancelled")
        stored, size = checked_entry(kind, value)
        budget.check(kind, size)
        stored = strip_nul(stored)
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            while (
                await progress.append(
                    autocommit,
                    item.shard,
                    item.run_id,
                    item.task_id,
                    item.node_id,
                    item.iteration,
                    item.attempt,
                    kind,
                    stored,
                )
                is None
            ):
                pass  # another attempt of the run took that seq: take the next
            await notify.send(autocommit, channel, f"{item.run_id}:progress")
        budget.spend(size)

    return replace(ctx, _progress=report)
