"""The decider's contract: the run snapshot it reads and the actions it returns.

Everything here is plain data. The decider (``legato.engine.decider``) is a pure
function ``decide(spec, snapshot, now) -> list[Action]``; the decider loop
builds the snapshot from the database under the run's row lock and applies the
actions in the same transaction.

External facts reach the decider as row state it can see in the snapshot:

* a worker's report, a fired timer (sleep done, event wait or task timed out)
  and an expired lease are all fenced transitions of a ``tasks`` row, applied
  by the loop that observed them (worker, timer, lease sweeper) together with a
  ``decide_queue`` upsert;
* a finished child run completes its parent's CHILD task row the same way;
* a signal is a ``signals`` row, buffered until a wait consumes it;
* a cancellation request is ``RunSnapshot.cancel_requested``;
* a passed ``execution_timeout`` is ``RunSnapshot.timed_out`` (set by the timer
  loop when the RUN_TIMEOUT timer the run's first decision armed fires).

A terminal task row the decider has not yet recorded in history has
``observed=False``; the decider records it (``AppendEvent``) and marks it
observed (``MarkObserved``), so deciding again with nothing new yields nothing.

Task and timer ids are derived deterministically (``task_id_for``), so the same
snapshot always gives the same actions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import JsonValue

from legato.enums import NodeKind, RunStatus, TaskState, TimerKind
from legato.schema.values import TaskError as TaskError

# Plain frozen values, not pydantic models: the decider builds them from typed values
# and they never cross a trust boundary, so validating every construction (as a
# pydantic model would, on the hot path of every decision) buys nothing. Keyword-only,
# as the models they replace were. ``TaskError`` stays pydantic: it is stored in JSONB.
_value = dataclass(frozen=True, slots=True, kw_only=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One row of ``tasks``: one attempt of one iteration of one node."""

    task_id: uuid.UUID
    node_id: str
    iteration: int = 0
    attempt: int = 1
    kind: NodeKind
    state: TaskState
    output: JsonValue = None
    error: TaskError | None = None
    observed: bool = False
    created_at: datetime
    finished_at: datetime | None = None
    cached: bool = False  # the output came from the output cache


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferedSignal:
    """An unconsumed ``signals`` row, oldest first in the snapshot."""

    signal_id: uuid.UUID
    name: str
    payload: JsonValue = None
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSnapshot:
    """What the decider sees of one run, loaded under the run's row lock."""

    run_id: uuid.UUID
    status: RunStatus
    input: JsonValue = None
    cancel_requested: bool = False
    timed_out: bool = False
    tasks: tuple[TaskRecord, ...] = ()
    signals: tuple[BufferedSignal, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTask:
    """Insert a ``tasks`` row (a new attempt, a wait, a child node, a switch's record...)."""

    action: Literal["create_task"] = "create_task"
    task_id: uuid.UUID
    node_id: str
    iteration: int = 0
    attempt: int = 1
    kind: NodeKind
    state: TaskState
    task_name: str | None = None
    queue: str | None = None
    input: JsonValue = None
    output: JsonValue = None
    error: TaskError | None = None
    event_name: str | None = None
    available_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueTask:
    """Insert the ``task_queue`` row that lets a worker of ``queue`` claim the attempt."""

    action: Literal["enqueue_task"] = "enqueue_task"
    task_id: uuid.UUID
    task_name: str
    queue: str
    attempt: int
    priority: int = 0
    available_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmTimer:
    """Insert a ``timers`` row; when due, the timer loop applies ``kind``'s transition."""

    action: Literal["arm_timer"] = "arm_timer"
    timer_id: uuid.UUID
    task_id: uuid.UUID
    attempt: int
    kind: TimerKind
    fire_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeSignal:
    """Mark a buffered signal consumed by the wait ``task_id``."""

    action: Literal["consume_signal"] = "consume_signal"
    signal_id: uuid.UUID
    task_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveTask:
    """Move an active task row to a terminal state (fenced on ``attempt`` and active state).

    Used for an event wait completed by a signal and for cancellation; the
    runtime also deletes the attempt's queue row and disarms its timers.
    """

    action: Literal["resolve_task"] = "resolve_task"
    task_id: uuid.UUID
    attempt: int
    state: TaskState
    output: JsonValue = None
    error: TaskError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkObserved:
    """Record that the decider has seen these terminal rows (their history is written)."""

    action: Literal["mark_observed"] = "mark_observed"
    task_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildRun:
    """Start a child run whose id is the parent's CHILD task id; its result completes that task."""

    action: Literal["start_child_run"] = "start_child_run"
    task_id: uuid.UUID
    workflow_name: str
    input: JsonValue = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelChildRun:
    """Ask the child run ``run_id`` (a CHILD task's id) to cancel."""

    action: Literal["cancel_child_run"] = "cancel_child_run"
    run_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishRun:
    """Finish the run. Emitted at most once, and only when no work is live."""

    action: Literal["finish_run"] = "finish_run"
    status: RunStatus
    output: JsonValue = None
    error: TaskError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEvent:
    """Append one history event (``run_events``), in the order actions are returned."""

    action: Literal["append_event"] = "append_event"
    type: str
    node_id: str | None = None
    iteration: int | None = None
    attempt: int | None = None
    data: JsonValue = None


Action = (
    CreateTask
    | EnqueueTask
    | ArmTimer
    | ConsumeSignal
    | ResolveTask
    | MarkObserved
    | StartChildRun
    | CancelChildRun
    | FinishRun
    | AppendEvent
)

_TASK_NAMESPACE = uuid.UUID("6c1f1f0e-7a51-4c55-9a57-1e6a7c0d2f10")


def task_id_for(run_id: uuid.UUID, node_id: str, iteration: int, attempt: int) -> uuid.UUID:
    """The id of one attempt: derived, so deciding twice creates the same row (and conflicts)."""
    return uuid.uuid5(_TASK_NAMESPACE, f"{run_id}/{node_id}/{iteration}/{attempt}")


def timer_id_for(task_id: uuid.UUID, kind: TimerKind) -> uuid.UUID:
    """The id of the ``kind`` timer guarding ``task_id`` (the run id for RUN_TIMEOUT)."""
    return uuid.uuid5(_TASK_NAMESPACE, f"{task_id}/{kind.value}")


def child_run_id_for(run_id: uuid.UUID, node_id: str, iteration: int, attempt: int) -> uuid.UUID:
    """The id of a CHILD task row, which is also the child run's id.

    Deterministic like ``task_id_for``, but shaped as a UUIDv7 carrying the parent
    run's timestamp, so the child run lands in the parent's ``runs`` partition, and the
    parent's low 16 bits, so it lands in the parent's shard key whatever the key count
    (``legato.schema.shards``: the key is those bits modulo the count).
    """
    digest = uuid.uuid5(_TASK_NAMESPACE, f"child/{run_id}/{node_id}/{iteration}/{attempt}").bytes
    raw = bytearray(run_id.bytes[:6] + digest[6:14] + run_id.bytes[14:])
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC 4122 variant
    return uuid.UUID(bytes=bytes(raw))
