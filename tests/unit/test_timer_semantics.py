"""What a due timer does (pure): transitions per kind and start-to-close re-arming."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from legato.engine.repositories.tasks import AttemptTiming
from legato.engine.repositories.timers import DueTimer, capped_fire_at
from legato.engine.timer_semantics import report_for, start_to_close_due
from legato.schema import TaskState, TimerKind

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _timer(kind: TimerKind, due: datetime) -> DueTimer:
    return DueTimer(due, uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), 1, kind, due)


def test_each_kind_moves_only_the_state_it_guards() -> None:
    sleep = report_for(_timer(TimerKind.SLEEP, T0), 0).move
    assert sleep.state is TaskState.COMPLETED
    assert set(sleep.from_states) == {TaskState.WAITING}
    wait = report_for(_timer(TimerKind.EVENT_TIMEOUT, T0), 0).move
    assert wait.state is TaskState.TIMED_OUT
    assert wait.error is not None
    assert set(report_for(_timer(TimerKind.SCHEDULE_TO_START, T0), 0).move.from_states) == {
        TaskState.QUEUED
    }
    assert set(report_for(_timer(TimerKind.START_TO_CLOSE, T0), 0).move.from_states) == {
        TaskState.RUNNING
    }


def test_start_to_close_counts_from_the_real_start() -> None:
    # Armed for an attempt available at T0 with 10 s to finish: due T0 + 10 s.
    timer = _timer(TimerKind.START_TO_CLOSE, T0 + timedelta(seconds=10))
    started_late = AttemptTiming(
        timer.task_id, TaskState.RUNNING, "default", T0, T0 + timedelta(seconds=60)
    )
    assert start_to_close_due(timer, started_late) == T0 + timedelta(seconds=70)
    on_time = AttemptTiming(
        timer.task_id, TaskState.RUNNING, "default", T0, T0 + timedelta(seconds=1)
    )
    assert start_to_close_due(timer, on_time) == T0 + timedelta(seconds=11)
    finished = AttemptTiming(timer.task_id, TaskState.COMPLETED, "default", T0, T0)
    assert start_to_close_due(timer, finished) is None
    assert start_to_close_due(timer, None) is None


def test_far_timers_are_capped_at_the_partition_horizon() -> None:
    assert capped_fire_at(T0 + timedelta(days=400), T0) == T0 + timedelta(days=6)
    assert capped_fire_at(T0 + timedelta(hours=1), T0) == T0 + timedelta(hours=1)
