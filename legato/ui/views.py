"""What the pages show, computed from what is stored: plain functions the templates
call (times, durations, an event's one-line summary, its payload without tracebacks)
and a stored spec that may no longer validate."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup
from pydantic import JsonValue, ValidationError

from legato.engine.repositories.tasks import TaskRow
from legato.engine.repositories.ui_queries import Attempt, Quarantine
from legato.flow.spec import WorkflowSpec
from legato.models import HistoryEvent, Run
from legato.schema import NodeKind

PREVIEW_CHARS = 1500
SUMMARY_CHARS = 160


def pretty(value: JsonValue) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def when(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


@dataclass(frozen=True)
class StoredSpec:
    """A version's stored spec: ``spec`` when it validates, else ``error`` says why
    (a run of it is shown with the raw JSON instead of a graph)."""

    raw: JsonValue
    spec: WorkflowSpec | None
    error: str | None

    @property
    def node_ids(self) -> tuple[str, ...]:
        return () if self.spec is None else tuple(n.id for n in self.spec.nodes)


def stored_spec(raw: JsonValue) -> StoredSpec:
    try:
        return StoredSpec(raw, WorkflowSpec.model_validate(raw), None)
    except ValidationError as error:
        return StoredSpec(raw, None, str(error))


def event_error(data: JsonValue) -> dict[str, JsonValue] | None:
    """The error an event records (``task_failed``, ``run_failed``, ...), if any."""
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) and "type" in error else None


def without_tracebacks(value: JsonValue) -> JsonValue:
    """``value`` with every ``traceback`` string left out: the page shows each one once,
    as text, with the attempt (or the run's error) it belongs to."""
    if isinstance(value, dict):
        return {
            key: without_tracebacks(item)
            for key, item in value.items()
            if not (key == "traceback" and isinstance(item, str))
        }
    if isinstance(value, list):
        return [without_tracebacks(item) for item in value]
    return value


def has_traceback(value: JsonValue) -> bool:
    return value != without_tracebacks(value)


def is_cached(data: JsonValue) -> bool:
    """A completed task whose output came from the output cache (its body did not run)."""
    return isinstance(data, dict) and data.get("cached") is True


def summary(data: JsonValue) -> str:
    """An event's payload on one line: the error's type and message, else compact JSON,
    cut short (the full payload is folded beneath)."""
    error = event_error(data)
    if error is not None:
        text = f"{error['type']}: {error.get('message', '')}"
    else:
        text = json.dumps(without_tracebacks(data), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def attempt_anchor(node_id: str | None, iteration: int | None, attempt: int | None) -> str:
    """The id of an attempt's row on the run page, where its traceback is shown; a run's
    own error has ``run-error``."""
    if node_id is None or attempt is None:
        return "run-error"
    return f"attempt-{node_id}-{iteration or 0}-{attempt}"


def traceback_owner(traceback: str | None, attempts: Iterable[TaskRow]) -> str | None:
    """The anchor of the attempt whose traceback is ``traceback`` (a run that failed
    with its node's error shows it there, not twice)."""
    if traceback is None:
        return None
    for row in attempts:
        if row.error is not None and row.error.traceback == traceback:
            return attempt_anchor(row.node_id, row.iteration, row.attempt)
    return None


def child_run_ids(attempts: Iterable[TaskRow]) -> list[str]:
    """The runs a parent started: a CHILD row's task id is its child run's id."""
    return [str(row.task_id) for row in attempts if row.kind is NodeKind.CHILD]


@dataclass(frozen=True)
class RunView:
    """Everything the run page shows, read once; the live stream re-renders its parts."""

    run: Run
    history: list[HistoryEvent]
    attempts: list[Attempt]
    quarantine: Quarantine | None
    stored: StoredSpec | None
    graph: Markup | None
    timeline: Markup | None
    rerun_of: uuid.UUID | None = None  # the run this one reruns
    reruns: tuple[uuid.UUID, ...] = ()  # this run's reruns, oldest first
    nodes: tuple[str, ...] = ()  # the node ids a rerun may start from

    @property
    def children(self) -> list[str]:
        return child_run_ids(self.attempts)

    @property
    def last_seq(self) -> int:
        return self.history[-1].seq if self.history else 0

    @property
    def error_owner(self) -> str | None:
        """The attempt that shows the run's traceback, if it is that attempt's."""
        error = self.run.error
        return None if error is None else traceback_owner(error.traceback, self.attempts)

    @property
    def events(self) -> list[str]:
        """The event names the run's spec waits for (the signal form's choices)."""
        spec = None if self.stored is None else self.stored.spec
        return [] if spec is None else sorted(spec.event_names())
