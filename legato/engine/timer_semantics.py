"""What a timer means (pure): the row an ``ArmTimer`` stores, when a start-to-close
timer really fires, and the fenced transition a due timer causes. The timer loop, the
decider loop and the in-memory simulator all read timers through these."""

from __future__ import annotations

import uuid
from datetime import datetime

from legato.engine.decider.model import ArmTimer, TaskError
from legato.engine.reports import Report
from legato.engine.repositories import tasks, timers
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


def report_for(timer: timers.DueTimer, shard: int, queue: str | None = None) -> Report:
    """The fenced transition a due timer of key ``shard`` (its run's) causes, ending the
    attempt's queue row in ``queue`` if it has one (pure)."""
    from_states, state = TIMER_TRANSITIONS[timer.kind]
    error = None
    if state is TaskState.TIMED_OUT:
        error = TaskError(type="Timeout", message=_TIMEOUT_MESSAGES[timer.kind])
    return Report(
        shard=shard,
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


def timer_row(run_id: uuid.UUID, action: ArmTimer) -> timers.DueTimer:
    """The ``timers`` row an ``ArmTimer`` stores: due at its fire time (``timers.arm``
    caps the stored fire time at the partitions' horizon)."""
    return timers.DueTimer(
        fire_at=action.fire_at,
        id=action.timer_id,
        run_id=run_id,
        task_id=action.task_id,
        attempt=action.attempt,
        kind=action.kind,
        due_at=action.fire_at,
    )
