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

from legato.engine.decider.model import TaskError
from legato.engine.loops.supervision import Loop
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import decide_queue, run_timeouts, tasks, timers
from legato.engine.transport.wakeups import Wakeups
from legato.schema import TaskState, TimerKind

# What each timer does when it fires: the states it may move the task from, and to.
TIMER_TRANSITIONS: dict[TimerKind, tuple[frozenset[TaskState], TaskState]] = {
    TimerKind.SLEEP: (frozenset({TaskState.WAITING}), TaskState.COMPLETED),
    TimerKind.EVENT_TIMEOUT: (frozenset({TaskState.WAITING}), TaskState.TIMED_OUT),
    TimerKind.SCHEDULE_TO_START: (frozenset({TaskState.QUEUED}), TaskState.TIMED_OUT),
    TimerKind.START_TO_CLOSE: (frozenset({TaskState.RUNNING}), TaskState.TIMED_OUT),
}

_TIMEOUT_MESSAGES = {
    TimerKind.EVENT_TIMEOUT: "no matching event arrived before the wait's timeout",
    TimerKind.SCHEDULE_TO_START: "no worker started the attempt within schedule_to_start",
    TimerKind.START_TO_CLOSE: "the attempt did not finish within start_to_close",
}


def start_to_close_due(
    timer: timers.DueTimer, timing: tasks.AttemptTiming | None
) -> datetime | None:
    """When a start-to-close timer should really fire (pure), or None to drop it.

    The decider arms it before the attempt starts, assuming the latest start the
    attempt is allowed; an attempt that started later gets the same allowance from
    its real start. A worker also enforces start_to_close locally: this timer is the
    backstop for a worker that hangs without losing its lease.
    """
    if timing is None or timing.state is not TaskState.RUNNING or timing.started_at is None:
        return None  # finished, or not started: nothing to time out
    if timing.available_at is None:
        return timer.due_at
    return max(timer.due_at, timing.started_at + (timer.due_at - timing.available_at))


def report_for(timer: timers.DueTimer, queue: str | None = None) -> Report:
    """The fenced transition a due timer causes, ending the attempt's queue row in
    ``queue`` if it has one (pure)."""
    from_states, state = TIMER_TRANSITIONS[timer.kind]
    error = None
    if state is TaskState.TIMED_OUT:
        error = TaskError(type="Timeout", message=_TIMEOUT_MESSAGES[timer.kind])
    return Report(
        queue_key=None if queue is None else (queue, timer.task_id),
        only_if_unleased=timer.kind is TimerKind.SCHEDULE_TO_START,
        move=tasks.Transition(
            run_id=timer.run_id,
            task_id=timer.task_id,
            attempt=timer.attempt,
            state=state,
            error=error,
            from_states=from_states,
        ),
    )


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
    ) -> None:
        super().__init__(poll_interval=poll_interval, wakeups=wakeups, channel=None)
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
