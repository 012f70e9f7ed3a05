"""Reporting what happened to attempts: the one path by which workers, the timer loop,
the lease sweeper and finished child runs hand facts to the decider.

One transaction: first the decide_queue upserts, in run-id order (the
upsert takes the run's decide row lock before anything else, so a report that
races a decision waits for it and re-queues the run — no lost wake-up, and one lock
order everywhere), then the fenced task updates, then the queue rows' deletion.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import decide_queue, task_queue, tasks


@dataclass(frozen=True)
class Report:
    """A fenced transition plus the queue row of the attempt, if it has one.

    ``only_if_unleased`` keeps the queue row when a worker has leased it (a
    schedule-to-start timeout must not take away an attempt that just started).
    """

    move: tasks.Transition
    queue_key: tuple[str, uuid.UUID] | None = None
    only_if_unleased: bool = False


async def apply_reports(conn: AsyncConnection, reports: Sequence[Report], reason: str) -> int:
    """Apply reports in the caller's transaction; returns how many were not stale.

    Lock order, as everywhere: the runs' decide rows (in run-id order), then the queue
    rows, then the task rows. Stale reports (an attempt already finished, cancelled
    or superseded) change no task; their queue rows go, because their attempt is over.
    The deciders are notified at commit (decide_queue's trigger).
    """
    if not reports:
        return 0
    await decide_queue.enqueue(conn, (report.move.run_id for report in reports), reason)
    await task_queue.remove(
        conn, [r.queue_key for r in reports if r.queue_key and not r.only_if_unleased]
    )
    await task_queue.remove(
        conn, [r.queue_key for r in reports if r.queue_key and r.only_if_unleased], unleased=True
    )
    applied = await tasks.transition_many(conn, [report.move for report in reports])
    return len(applied)
