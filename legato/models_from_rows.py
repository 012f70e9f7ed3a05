"""The one place where the repositories' rows become the public read models of
``legato.models``: what ``Client`` returns when it reads runs."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, TypeVar

from legato.engine.repositories.decide_queue import QuarantinedRun as QuarantinedRow
from legato.engine.repositories.run_events import HistoryEvent as EventRow
from legato.engine.repositories.runs import RunRow
from legato.engine.repositories.tasks import TaskRow
from legato.models import Attempt, HistoryEvent, QuarantinedRun, Run, error_info

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Model = TypeVar("Model", bound=DataclassInstance)
else:
    Model = TypeVar("Model")


def run_from_row(row: RunRow) -> Run:
    return _public(Run, row, error=error_info(row.error))


def attempt_from_row(row: TaskRow) -> Attempt:
    return _public(Attempt, row, error=error_info(row.error))


def event_from_row(row: EventRow) -> HistoryEvent:
    return _public(HistoryEvent, row)


def quarantined_from_row(row: QuarantinedRow) -> QuarantinedRun:
    return QuarantinedRun(
        row.run_id, row.workflow_name, row.failures, row.quarantined_at, row.last_error
    )


def _public(model: type[Model], row: object, **converted: object) -> Model:
    """``model`` from the fields of ``row`` of the same names, except ``converted``'s:
    a row's extra fields (what only the engine reads) stay behind."""
    copied = {f.name: getattr(row, f.name) for f in fields(model) if f.name not in converted}
    return model(**copied, **converted)
