"""Plain-text rendering of runs, attempts and history for ``legato runs ...`` and the demo."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from pydantic import JsonValue

from legato.models import Attempt, HistoryEvent, Run


def compact(value: JsonValue, limit: int = 100) -> str:
    """Compact one-line JSON, cut at ``limit`` characters."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _node(event_node: str | None, iteration: int | None, attempt: int | None) -> str:
    if event_node is None:
        return ""
    text = event_node
    if iteration:
        text += f"[{iteration}]"
    if attempt is not None and attempt > 1:
        text += f" #{attempt}"
    return text


def _details(data: JsonValue) -> str:
    if data is None:
        return ""
    if not isinstance(data, dict):
        return compact(data)
    parts: list[str] = []
    for key, value in data.items():
        if key == "error" and isinstance(value, dict):
            parts.append(f"error={value.get('type')}: {value.get('message')}")
        elif key == "available_at" or key == "traceback":
            continue
        elif key == "cached":
            parts.append("(from the output cache)")
        else:
            parts.append(f"{key}={compact(value, 80)}")
    return "  ".join(parts)


def history_line(event: HistoryEvent, started: datetime | None) -> str:
    """``  4  +0.112s  task_completed     create_user      output={...}``"""
    offset = "" if started is None else f"+{(event.created_at - started).total_seconds():.3f}s"
    node = _node(event.node_id, event.iteration, event.attempt)
    return (
        f"{event.seq:>4}  {offset:>9}  {event.type:<20} {node:<22} {_details(event.data)}".rstrip()
    )


def history_lines(events: Sequence[HistoryEvent], started: datetime | None = None) -> list[str]:
    """Every event, timed from ``started`` (default: the first event)."""
    origin = started if started is not None else (events[0].created_at if events else None)
    return [history_line(event, origin) for event in events]


def run_summary(run: Run) -> list[str]:
    lines = [
        f"run       {run.id}",
        f"workflow  {run.workflow_name} v{run.workflow_version}",
        f"status    {run.status.value}"
        + (" (cancel requested)" if run.cancel_requested and run.status.value == "RUNNING" else ""),
        f"created   {_when(run.created_at)}",
        f"finished  {_when(run.finished_at)}",
        f"input     {compact(run.input, 200)}",
    ]
    if run.parent_run_id is not None:
        lines.append(f"parent    {run.parent_run_id}")
    if run.output is not None:
        lines.append(f"output    {compact(run.output, 200)}")
    if run.error is not None:
        lines.append(f"error     {run.error.type}: {run.error.message}")
    return lines


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *rows]
    ]


def _duration(task: Attempt) -> str:
    if task.started_at is None or task.finished_at is None:
        return "-"
    return f"{(task.finished_at - task.started_at).total_seconds():.3f}s"


def attempts_table(tasks: Sequence[Attempt]) -> list[str]:
    ordered = sorted(tasks, key=lambda t: (t.created_at, t.node_id, t.iteration, t.attempt))
    rows = [
        [
            t.node_id,
            str(t.iteration),
            str(t.attempt),
            t.kind.value,
            t.state.value,
            _duration(t),
            f"{t.error.type}: {t.error.message}"[:80] if t.error is not None else "",
        ]
        for t in ordered
    ]
    return table(["NODE", "ITER", "ATTEMPT", "KIND", "STATE", "RAN", "ERROR"], rows)


def runs_table(runs: Sequence[Run]) -> list[str]:
    rows = [
        [
            str(r.id),
            r.workflow_name,
            str(r.workflow_version),
            r.status.value,
            _when(r.created_at),
            _when(r.finished_at),
        ]
        for r in runs
    ]
    return table(["RUN", "WORKFLOW", "VERSION", "STATUS", "CREATED", "FINISHED"], rows)
