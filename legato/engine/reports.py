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
    applied = 0
    finished_queue_rows: list[tuple[str, uuid.UUID]] = []
    for report in sorted(reports, key=lambda r: (r.move.run_id, r.move.task_id)):
        queue = await tasks.transition(conn, report.move)
        if queue is False:
            continue
        applied += 1
        if report.queue_key is not None:
            finished_queue_rows.append(report.queue_key)
        elif isinstance(queue, str):
            finished_queue_rows.append((queue, report.move.task_id))
    # Stale reports drop their queue row too: it belongs to an attempt that is over.
    finished_queue_rows.extend(
        report.queue_key for report in reports if report.queue_key is not None
    )
    await task_queue.remove(conn, sorted(set(finished_queue_rows)))
    await notify.send(conn, notify.decide_channel(notify.schema_of(conn)))
    return applied
