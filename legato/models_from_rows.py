"""The one place where the repositories' rows become the public read models of
``legato.models``: what ``Client`` returns when it reads runs."""

from __future__ import annotations

from legato.engine.repositories.decide_queue import QuarantinedRun as QuarantinedRow
from legato.engine.repositories.run_events import HistoryEvent as EventRow
from legato.engine.repositories.runs import RunRow
from legato.engine.repositories.tasks import TaskRow
from legato.models import Attempt, HistoryEvent, QuarantinedRun, Run, error_info


def run_from_row(row: RunRow) -> Run:
    return Run(
        id=row.id,
        workflow_name=row.workflow_name,
        workflow_version=row.workflow_version,
        status=row.status,
        input=row.input,
        output=row.output,
        error=error_info(row.error),
        parent_run_id=row.parent_run_id,
        cancel_requested=row.cancel_requested,
        created_at=row.created_at,
        finished_at=row.finished_at,
    )


def attempt_from_row(row: TaskRow) -> Attempt:
    return Attempt(
        task_id=row.task_id,
        node_id=row.node_id,
        iteration=row.iteration,
        attempt=row.attempt,
        kind=row.kind,
        state=row.state,
        task_name=row.task_name,
        queue=row.queue,
        output=row.output,
        error=error_info(row.error),
        observed=row.observed,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def event_from_row(row: EventRow) -> HistoryEvent:
    return HistoryEvent(
        seq=row.seq,
        type=row.type,
        node_id=row.node_id,
        iteration=row.iteration,
        attempt=row.attempt,
        data=row.data,
        created_at=row.created_at,
    )


def quarantined_from_row(row: QuarantinedRow) -> QuarantinedRun:
    return QuarantinedRun(
        row.run_id, row.workflow_name, row.failures, row.quarantined_at, row.last_error
    )
