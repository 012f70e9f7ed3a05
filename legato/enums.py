"""Legato's vocabulary: the states and kinds stored as TEXT with CHECK constraints
(see ``legato.schema.tables``), and the history events that end a run.

It imports nothing, so every layer names them downwards: the errors (``RunFailed``),
the schema (``legato.schema.enums`` re-exports them), the decider and the public models.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Lifecycle of a run. ``RUNNING`` is the only active state."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"  # the workflow's execution_timeout passed first

    @property
    def finished(self) -> bool:
        return self is not RunStatus.RUNNING


class TaskState(StrEnum):
    """Lifecycle of one attempt of one node of a run (a row of ``tasks``)."""

    QUEUED = "QUEUED"  # a task attempt waiting in task_queue for a worker
    RUNNING = "RUNNING"  # leased by a worker
    WAITING = "WAITING"  # a sleep, an event wait or a child run, resolved by a timer/signal/child
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"

    @property
    def active(self) -> bool:
        return self in ACTIVE_TASK_STATES


ACTIVE_TASK_STATES = frozenset({TaskState.QUEUED, TaskState.RUNNING, TaskState.WAITING})

# The history event types that end a run: the last event of every finished run is one.
FINAL_EVENT_TYPES = frozenset({"run_succeeded", "run_failed", "run_cancelled", "run_timed_out"})


class NodeKind(StrEnum):
    """What a ``tasks`` row stands for."""

    TASK = "TASK"
    SLEEP = "SLEEP"
    EVENT = "EVENT"
    SWITCH = "SWITCH"
    MAP = "MAP"
    CHILD = "CHILD"
    JOIN = "JOIN"
    HANDLER = "HANDLER"


class TimerKind(StrEnum):
    """Why a timer was armed; each names the task transition it causes when it fires."""

    SLEEP = "SLEEP"  # WAITING sleep -> COMPLETED
    EVENT_TIMEOUT = "EVENT_TIMEOUT"  # WAITING event wait -> TIMED_OUT
    SCHEDULE_TO_START = "SCHEDULE_TO_START"  # QUEUED attempt -> TIMED_OUT
    START_TO_CLOSE = "START_TO_CLOSE"  # QUEUED or RUNNING attempt -> TIMED_OUT
    RUN_TIMEOUT = "RUN_TIMEOUT"  # RUNNING run -> timed out (runs.timed_out_at), decided again


class CatchUp(StrEnum):
    """What a schedule does with the ticks it missed while no decider ran."""

    SKIP = "SKIP"  # fire none of them; only a tick reached within its grace fires
    ONCE = "ONCE"  # fire the most recent one, once
    ALL = "ALL"  # fire each of them, oldest first, at most max_catch_up
