"""What ``Client`` returns when it reads runs: plain, frozen read models.

They are defined here, at the client boundary, and built from the repositories' row
types in one place, ``legato.models_from_rows``, so a column added to a table (or a row
type reshaped for the decider) is not a change of the public API. This module imports
nothing from the engine; ``NodeFailure`` (``RunFailed.error``) is defined with the
error in ``legato.errors``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import JsonValue

from legato.enums import FINAL_EVENT_TYPES, NodeKind, RunStatus, TaskState
from legato.errors import NodeFailure as NodeFailure
from legato.errors import RunFailed

if TYPE_CHECKING:
    from legato.schema.values import TaskError

# A run's last events: one of them ends every history whose run finished normally.
FINAL_EVENTS = FINAL_EVENT_TYPES
# The events that record an attempt (or a wait) ending in a failure, cancellation or timeout.
_FAILED_ATTEMPT_EVENTS = frozenset({"task_failed", "task_timed_out", "task_cancelled"})


@dataclass(frozen=True)
class ErrorInfo:
    """Why an attempt or a run failed: the exception's type name and message as recorded
    (``type`` is e.g. ``"Timeout"`` for a timed-out attempt, ``"OutputTooLarge"``)."""

    type: str
    message: str
    retryable: bool
    traceback: str | None


@dataclass(frozen=True)
class Run:
    """A run, as ``Client.get_run`` and ``Client.list_runs`` return it."""

    id: uuid.UUID
    workflow_name: str
    workflow_version: int
    status: RunStatus
    input: JsonValue
    output: JsonValue
    error: ErrorInfo | None
    parent_run_id: uuid.UUID | None
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Attempt:
    """One attempt of one node of a run (one iteration of it, for a map element).

    Every node that ran, waits or was decided has one: task attempts (``kind`` TASK,
    MAP, HANDLER) and also the rows of sleeps, event waits and child runs (WAITING until
    resolved), switches and first-of joins (COMPLETED at once, ``output`` the chosen case
    or value) and skipped nodes (SKIPPED). For a CHILD row, ``task_id`` is the child run's id.
    """

    task_id: uuid.UUID
    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    task_name: str | None
    queue: str | None
    output: JsonValue
    error: ErrorInfo | None
    observed: bool  # its outcome has been recorded in the run's history
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class HistoryEvent:
    """One entry of a run's history; ``seq`` counts 1, 2, 3, ... per run, without gaps."""

    seq: int
    type: str
    node_id: str | None
    iteration: int | None
    attempt: int | None
    data: JsonValue
    created_at: datetime


@dataclass(frozen=True)
class RunDetails:
    """A run with its attempts (every node row, see ``Attempt``) and its history."""

    run: Run
    tasks: list[Attempt]
    history: list[HistoryEvent]
    # The run this one reruns (``Client.rerun``), and the reruns of this one, oldest first.
    rerun_of: uuid.UUID | None = None
    reruns: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True)
class RunFilter:
    """Which runs ``Client.list_runs`` and the bulk actions (``Client.bulk_cancel``,
    ``bulk_rerun``, ``bulk_resume``) choose; every criterion given must hold.

    ``created_after``/``created_before`` bound the run's creation time (its UUIDv7 id);
    ``error_type`` matches the run's error (``ErrorInfo.type``); ``node`` chooses runs
    with a node of that id that failed or timed out and never completed."""

    workflow: str | None = None
    version: int | None = None
    status: RunStatus | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    error_type: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action did: ``matched`` runs chose by the filter, ``done`` acted on,
    ``skipped`` left as they were (already cancelled, finished, not quarantined, or,
    for a rerun, already rerun), ``failed`` refused with a typed error (its message in
    ``errors``, by run id; at most the first 20)."""

    matched: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    errors: tuple[tuple[uuid.UUID, str], ...] = ()


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first; pass ``next_before`` to get the next page."""

    runs: list[Run]
    next_before: uuid.UUID | None


@dataclass(frozen=True)
class QuarantinedRun:
    """A run parked after its decisions failed too often in a row, with the last error."""

    run_id: uuid.UUID
    workflow_name: str
    failures: int
    quarantined_at: datetime
    last_error: str | None


def error_info(error: TaskError | None) -> ErrorInfo | None:
    if error is None:
        return None
    return ErrorInfo(error.type, error.message, error.retryable, error.traceback)


class RecordedEvent(Protocol):
    """What a history event records: a stored ``HistoryEvent``, or a decider's
    ``AppendEvent`` in the in-memory simulator."""

    @property
    def type(self) -> str: ...
    @property
    def node_id(self) -> str | None: ...
    @property
    def iteration(self) -> int | None: ...
    @property
    def attempt(self) -> int | None: ...
    @property
    def data(self) -> JsonValue: ...


def node_failure(error: ErrorInfo, history: Iterable[RecordedEvent]) -> NodeFailure:
    """The node attempt whose failure failed the run, found in the run's history.

    The ``run_failed`` event names the node; the attempt is that node's last failed,
    timed-out or cancelled attempt recorded before it, preferring one that carries the
    very error the run failed with (a map node can have several failed elements)."""
    failed_node: str | None = None
    attempts: list[RecordedEvent] = []
    for event in history:
        if event.type in _FAILED_ATTEMPT_EVENTS:
            attempts.append(event)
        elif event.type == "run_failed" and isinstance(event.data, dict):
            node = event.data.get("node_id")
            failed_node = node if isinstance(node, str) else None
    ended = [e for e in attempts if failed_node is not None and e.node_id == failed_node]
    recorded = {"type": error.type, "message": error.message}
    same = [e for e in ended if _error_of(e) == recorded]
    candidates = same or ended
    chosen = candidates[-1] if candidates else None
    return NodeFailure(
        type=error.type,
        message=error.message,
        node_id=failed_node,
        iteration=None if chosen is None else chosen.iteration,
        attempt=None if chosen is None else chosen.attempt,
        state=None if chosen is None else TaskState(chosen.type.removeprefix("task_").upper()),
        retryable=error.retryable,
        traceback=error.traceback,
    )


def run_failed(
    run_id: uuid.UUID,
    status: RunStatus,
    error: ErrorInfo | None,
    history: Iterable[RecordedEvent],
) -> RunFailed:
    """The ``RunFailed`` that ``result()`` raises for a run that finished ``status``
    (not SUCCEEDED) with ``error``; ``history`` is read only for a failure with an error."""
    if status is RunStatus.CANCELLED:
        return RunFailed(f"run {run_id} was cancelled", run_id=run_id, status=status)
    if error is None:
        return RunFailed(f"run {run_id} failed", run_id=run_id, status=status)
    failure = node_failure(error, history)
    where = ""
    if failure.node_id is not None:
        attempt = "" if failure.attempt is None else f", attempt {failure.attempt}"
        where = f" (node {failure.node_id!r}{attempt})"
    return RunFailed(
        f"run {run_id} failed: {failure.type}: {failure.message}{where}",
        run_id=run_id,
        status=status,
        error=failure,
    )


def _error_of(event: RecordedEvent) -> dict[str, JsonValue] | None:
    data = event.data
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    return {"type": error.get("type"), "message": error.get("message")}
