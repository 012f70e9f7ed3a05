"""A run's attempts on a shared time axis, as server-side SVG: one lane per node (per
iteration of a map), one bar per attempt, so a retry is the next bar in its lane.

A task attempt is a thin "queued" line from its creation (a retry's includes the
back-off) to its start, then a solid bar while it ran, coloured by its state. Sleeps,
event waits and child runs are hatched bars: time spent waiting, not working. An
attempt still open runs to ``now``. Switches, joins and skipped nodes take no time and
are not drawn. Every label is HTML-escaped; colours come from the stylesheet's classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from markupsafe import escape

from legato.schema import NodeKind, TaskState

WAIT_KINDS = frozenset({NodeKind.SLEEP, NodeKind.EVENT, NodeKind.CHILD})
DRAWN_KINDS = WAIT_KINDS | {NodeKind.TASK, NodeKind.MAP, NodeKind.HANDLER}

LABEL_W, PLOT_W, PAD = 190, 1100, 10
AXIS_H, LANE_H, BAR_H, QUEUED_H = 24, 16, 11, 3
MIN_BAR = 2.0
MAX_LANES = 120
TICK_STEPS_MS = tuple(int(m * 10**e) for e in range(9) for m in (1, 2, 5))


class Span(Protocol):
    """An attempt as the timeline reads it (a task row, or the Client's ``Attempt``)."""

    @property
    def node_id(self) -> str: ...
    @property
    def iteration(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def kind(self) -> NodeKind: ...
    @property
    def state(self) -> TaskState: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def drawn(row: Span) -> bool:
    """Whether the timeline has a bar for this attempt."""
    return row.kind in DRAWN_KINDS and row.state is not TaskState.SKIPPED


def span_text(seconds: float) -> str:
    """A length of time as the axis and the bars' titles print it."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f}".rstrip("0").rstrip(".") + " s"
    return f"{seconds / 60:.1f} min"


def _lane_key(row: Span) -> tuple[str, int]:
    return (row.node_id, row.iteration)


def _lane_label(row: Span) -> str:
    label = row.node_id if row.kind is not NodeKind.MAP else f"{row.node_id}[{row.iteration}]"
    return label if len(label) <= 26 else label[:25] + "…"


def _tick_step(total_ms: float) -> int:
    """The smallest 1-2-5 step giving at most eight ticks across the axis."""
    fitting = [step for step in TICK_STEPS_MS if total_ms / step <= 8]
    return fitting[0] if fitting else TICK_STEPS_MS[-1]


def render_timeline(attempts: Sequence[Span], start: datetime, now: datetime) -> str | None:
    """The ``<svg>`` timeline of ``attempts`` from ``start`` (the run's creation), or
    None when nothing took time yet."""
    rows = [row for row in attempts if drawn(row)]
    if not rows:
        return None
    end = max([start, *(r.finished_at or now for r in rows)])
    total = max((end - start).total_seconds(), 0.001)

    def x(moment: datetime) -> float:
        return round(LABEL_W + (moment - start).total_seconds() / total * PLOT_W, 1)

    lanes: dict[tuple[str, int], list[Span]] = {}
    for row in sorted(rows, key=lambda r: (r.created_at, r.node_id, r.iteration, r.attempt)):
        lanes.setdefault(_lane_key(row), []).append(row)
    shown = list(lanes.items())[:MAX_LANES]
    width = LABEL_W + PLOT_W + PAD
    height = AXIS_H + len(shown) * LANE_H + PAD + (LANE_H if len(lanes) > MAX_LANES else 0)
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="timeline of the run\'s attempts over {span_text(total)}">',
        '<defs><pattern id="tl-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect class="hatch-bg" width="6" height="6"/>'
        '<line class="hatch" x1="0" y1="0" x2="0" y2="6"/></pattern></defs>',
    ]
    step = _tick_step(total * 1000)
    tick_ms = 0
    while tick_ms <= total * 1000:
        tx = round(LABEL_W + tick_ms / 1000 / total * PLOT_W, 1)
        parts.append(
            f'<line class="tick" x1="{tx}" y1="{AXIS_H - 6}" x2="{tx}" y2="{height - PAD}"/>'
            f'<text class="axis" x="{tx + 2}" y="{AXIS_H - 10}">{span_text(tick_ms / 1000)}</text>'
        )
        tick_ms += step
    for index, (_, lane) in enumerate(shown):
        top = AXIS_H + index * LANE_H
        parts.append(
            f'<text class="lane" x="{PAD}" y="{top + BAR_H}">{escape(_lane_label(lane[0]))}</text>'
        )
        parts.extend(_bar(row, top, now, x) for row in lane)
    hidden = len(lanes) - len(shown)
    if hidden > 0:
        parts.append(
            f'<text class="lane" x="{PAD}" y="{AXIS_H + len(shown) * LANE_H + BAR_H}">'
            f"… {hidden} more lanes (see the attempts below)</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bar(row: Span, top: int, now: datetime, x: Callable[[datetime], float]) -> str:
    """One attempt: its queued line and its working (or waiting) bar, with a title."""
    finished = row.finished_at or now
    waits = row.kind in WAIT_KINDS
    began = row.created_at if waits or row.started_at is None else row.started_at
    kind = "wait" if waits else "work"
    lasted = (finished - row.created_at).total_seconds()
    title = f"{row.node_id}"
    title += f"[{row.iteration}]" if row.kind is NodeKind.MAP else ""
    title += f" attempt {row.attempt}: {row.kind.value.lower()} {row.state.value.lower()}, "
    if not waits and row.started_at is not None:
        title += f"queued {span_text((row.started_at - row.created_at).total_seconds())}, "
        title += f"ran {span_text((finished - row.started_at).total_seconds())}"
    else:
        title += f"{'waited' if waits else 'queued'} {span_text(lasted)}"
    if row.finished_at is None:
        title += " so far"
    mid = top + BAR_H / 2
    out = [
        f'<g class="bar {kind} state-{row.state.value}" data-node="{escape(row.node_id)}" '
        f'data-iteration="{row.iteration}" data-attempt="{row.attempt}" '
        f'data-kind="{row.kind.value}" data-state="{row.state.value}">'
        f"<title>{escape(title)}</title>"
    ]
    if not waits:
        queued_end = row.started_at or finished
        out.append(
            f'<rect class="queued" x="{x(row.created_at)}" y="{mid - QUEUED_H / 2}" '
            f'width="{max(x(queued_end) - x(row.created_at), 0)}" height="{QUEUED_H}"/>'
        )
    if waits or row.started_at is not None:
        left = x(began)
        out.append(
            f'<rect class="span" x="{left}" y="{top}" width="{max(x(finished) - left, MIN_BAR)}" '
            f'height="{BAR_H}" rx="2"/>'
        )
    out.append("</g>")
    return "".join(out)
