"""The timer loop: sleeps, event timeouts, task and run timeouts.

A due timer becomes a fenced transition of a task row plus a decide request,
through ``legato.engine.reports`` — the same path as a worker's report (and the
lease sweeper's, ``legato.engine.loops.lease_sweeper``). A timer re-checks the state it
guards (the fence): a timeout armed for an attempt that has since finished matches
nothing and changes nothing.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.reports import apply_reports
from legato.engine.repositories import decide_queue, run_timeouts, tasks, timers
from legato.engine.timer_semantics import report_for, start_to_close_due
from legato.engine.transport.wakeups import Wakeups
from legato.schema import TimerKind

_QUEUED_KINDS = frozenset({TimerKind.SCHEDULE_TO_START, TimerKind.START_TO_CLOSE})
# Timers that guard a run, not a task row: they mark the run and ask for a decision.
_RUN_KINDS = frozenset({TimerKind.RUN_TIMEOUT})


async def time_out_runs(conn: AsyncConnection, run_ids: list[uuid.UUID]) -> None:
    """Mark the runs whose execution_timeout passed and have the decider time them out."""
    marked = await run_timeouts.mark_timed_out(conn, run_ids)
    await decide_queue.enqueue(conn, marked, "run timed out")


def _queue_of(timing: tasks.AttemptTiming | None) -> str | None:
    return None if timing is None else timing.queue


class TimerLoop(Loop):
    """Fires due timers in batches; re-arms those capped at the partition horizon."""

    name = "timer"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        wakeups: Wakeups | None = None,
        batch_size: int = 100,
        poll_interval: float = 0.5,
        restarts: RestartPolicy | None = None,
    ) -> None:
        super().__init__(
            poll_interval=poll_interval, wakeups=wakeups, channel=None, restarts=restarts
        )
        self.engine = engine
        self.batch_size = batch_size
        self.fired = 0

    async def tick(self) -> bool:
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            due = await timers.take_due(conn, self.batch_size)
            queued = [t for t in due if t.kind in _QUEUED_KINDS]
            timing = await tasks.timings(conn, [(t.run_id, t.task_id) for t in queued])
            for timer in [t for t in queued if t.kind is TimerKind.START_TO_CLOSE]:
                real_due = start_to_close_due(timer, timing.get(timer.task_id))
                if real_due is None:
                    due.remove(timer)
                elif real_due != timer.due_at:
                    due[due.index(timer)] = timer._replace(due_at=real_due)
            early = [t for t in due if t.due_at > now]
            await timers.arm(conn, early, now)
            fired = [t for t in due if t.due_at <= now]
            await time_out_runs(conn, [t.run_id for t in fired if t.kind in _RUN_KINDS])
            reports = [
                report_for(t, _queue_of(timing.get(t.task_id)))
                for t in fired
                if t.kind not in _RUN_KINDS
            ]
            await apply_reports(conn, reports, "timer fired")
        self.fired += len(fired)
        return len(due) >= self.batch_size
