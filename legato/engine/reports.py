"""Reporting what happened to attempts: the one path by which workers, the timer loop,
the lease sweeper and finished child runs hand facts to the decider.

One transaction: first the decide_queue upserts, in run-id order (DESIGN §3 step 3:
the upsert takes the run's decide row lock before anything else, so a report that
races a decision waits for it and re-queues the run — no lost wake-up, and one lock
order everywhere), then the fenced task updates, then the queue rows' deletion.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import decide_queue, notify, task_queue, tasks


@dataclass(frozen=True)
class Report:
    """A fenced transition plus the queue row it ends, if the caller knows it."""

    move: tasks.Transition
    queue_key: tuple[str, uuid.UUID] | None = None


async def apply_reports(conn: AsyncConnection, reports: Sequence[Report], reason: str) -> int:
    """Apply reports in the caller's transaction; returns how many were not stale.

    Stale reports (an attempt already finished, cancelled or superseded) change
    nothing. The deciders are notified at commit.
    """
    if not reports:
        return 0
    await decide_queue.enqueue(conn, (report.move.run_id for report in reports), reason)
    applied = await tasks.transition_many(conn, [report.move for report in reports])
    # Every report ends its attempt's queue row, stale or not: the attempt is over.
    finished_queue_rows = {r.queue_key for r in reports if r.queue_key is not None}
    finished_queue_rows |= {(queue, task_id) for task_id, queue in applied.items() if queue}
    await task_queue.remove(conn, sorted(finished_queue_rows))
    await notify.send(conn, notify.decide_channel(notify.schema_of(conn)))
    return len(applied)
