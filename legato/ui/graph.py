"""A compiled spec's DAG as server-side SVG, each node coloured by the state of its
latest attempt: no layout library and no script in the page.

Nodes are placed in columns by their longest path from the input, in spec order
within a column. A map node shows one cell per iteration; a node a switch skipped
is drawn dashed; a node with no attempt yet is drawn blank.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from markupsafe import escape

from legato.flow.spec import (
    HANDLER_NODE_ID,
    INPUT_NODE_ID,
    ChildNodeSpec,
    EventNodeSpec,
    MapNodeSpec,
    NodeSpec,
    SleepNodeSpec,
    TaskNodeSpec,
    WorkflowSpec,
    topological_order,
)
from legato.schema import TaskState

PENDING = "PENDING"  # no attempt yet: not a TaskState, only a colour here

NODE_W, NODE_H = 168, 48
COL_GAP, ROW_GAP = 56, 22
PAD = 12
CELL, CELL_GAP, MAX_CELLS = 8, 2, 24


@dataclass(frozen=True)
class NodeState:
    """A node's state in a run: the latest attempt's state of each iteration."""

    iterations: dict[int, TaskState]

    @property
    def summary(self) -> str:
        states = set(self.iterations.values())
        if not states:
            return PENDING
        for state in (
            TaskState.FAILED,
            TaskState.TIMED_OUT,
            TaskState.RUNNING,
            TaskState.QUEUED,
            TaskState.WAITING,
            TaskState.CANCELLED,
        ):
            if state in states:
                return state.value
        if states == {TaskState.SKIPPED}:
            return TaskState.SKIPPED.value
        return TaskState.COMPLETED.value


def node_states(attempts: Iterable[tuple[str, int, int, TaskState]]) -> dict[str, NodeState]:
    """``(node_id, iteration, attempt, state)`` rows -> each node's latest state per
    iteration (a retry is a new row with a higher attempt)."""
    latest: dict[tuple[str, int], tuple[int, TaskState]] = {}
    for node_id, iteration, attempt, state in attempts:
        seen = latest.get((node_id, iteration))
        if seen is None or attempt >= seen[0]:
            latest[(node_id, iteration)] = (attempt, state)
    nodes: dict[str, NodeState] = {}
    for (node_id, iteration), (_, state) in sorted(latest.items()):
        nodes.setdefault(node_id, NodeState({})).iterations[iteration] = state
    return nodes


def _detail(node: NodeSpec) -> str:
    if isinstance(node, TaskNodeSpec):
        return f"task {node.task}"
    if isinstance(node, MapNodeSpec):
        return f"map {node.task}"
    if isinstance(node, SleepNodeSpec):
        return f"sleep {node.seconds:g}s"
    if isinstance(node, EventNodeSpec):
        return f"event {node.event}"
    if isinstance(node, ChildNodeSpec):
        return f"child {node.workflow}"
    return node.kind


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_svg(spec: WorkflowSpec, states: dict[str, NodeState] | None = None) -> str:
    """The spec's graph as an ``<svg>`` element; every label is HTML-escaped."""
    states = states or {}
    ordered = topological_order(spec)
    depth: dict[str, int] = {INPUT_NODE_ID: 0}
    for node in ordered:
        depth[node.id] = 1 + max((depth[d] for d in node.dependencies()), default=0)
    columns: dict[int, list[str]] = {0: [INPUT_NODE_ID]}
    for node in ordered:
        columns.setdefault(depth[node.id], []).append(node.id)
    if spec.on_failure is not None:
        columns.setdefault(max(columns) + 1, []).append(HANDLER_NODE_ID)
    position: dict[str, tuple[int, int]] = {}
    for col, ids in columns.items():
        for row, node_id in enumerate(ids):
            position[node_id] = (
                PAD + col * (NODE_W + COL_GAP),
                PAD + row * (NODE_H + ROW_GAP),
            )
    width = PAD * 2 + len(columns) * (NODE_W + COL_GAP) - COL_GAP
    height = PAD * 2 + max(len(ids) for ids in columns.values()) * (NODE_H + ROW_GAP) - ROW_GAP

    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="graph of workflow {escape(spec.name)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#64748b"/></marker></defs>',
    ]
    for node in ordered:
        x2, y2 = position[node.id]
        for dep in dict.fromkeys(node.dependencies()):
            x1, y1 = position[dep]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            dashed = ' stroke-dasharray="4 3"' if dep not in node.inputs else ""
            parts.append(
                f'<path class="edge" d="M {sx} {sy} C {mid} {sy}, {mid} {ey}, {ex} {ey}" '
                f'fill="none" stroke="#64748b"{dashed} marker-end="url(#arrow)"/>'
            )
    by_id = {node.id: node for node in ordered}
    for node_id, (x, y) in position.items():
        spec_node = by_id.get(node_id)
        state = states.get(node_id, NodeState({}))
        summary = "COMPLETED" if node_id == INPUT_NODE_ID else state.summary
        if spec_node is not None:
            detail = _detail(spec_node)
        else:
            detail = "input" if node_id == INPUT_NODE_ID else "failure handler"
        title = f"{node_id}: {detail} — {summary.lower()}"
        if len(state.iterations) > 1 or isinstance(spec_node, MapNodeSpec):
            title += f" ({len(state.iterations)} iterations)"
        parts.append(
            f'<g class="node state-{summary}" data-node="{escape(node_id)}" '
            f'data-state="{summary}"><title>{escape(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
            f'<text x="{x + 8}" y="{y + 18}" class="label">{escape(_short(node_id))}</text>'
            f'<text x="{x + 8}" y="{y + 34}" class="detail">{escape(_short(detail, 26))}</text>'
        )
        if isinstance(spec_node, MapNodeSpec) and state.iterations:
            parts.append(_cells(x, y, state))
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _cells(x: int, y: int, state: NodeState) -> str:
    """One small square per map iteration along the node's bottom edge."""
    cells = []
    shown = sorted(state.iterations.items())[:MAX_CELLS]
    for i, (iteration, iteration_state) in enumerate(shown):
        cx = x + 8 + i * (CELL + CELL_GAP)
        cells.append(
            f'<rect class="iter state-{iteration_state.value}" x="{cx}" '
            f'y="{y + NODE_H - CELL - 3}" width="{CELL}" height="{CELL}">'
            f"<title>iteration {iteration}: {iteration_state.value.lower()}</title></rect>"
        )
    hidden = len(state.iterations) - len(shown)
    if hidden > 0:
        cx = x + 8 + len(shown) * (CELL + CELL_GAP)
        cells.append(f'<text x="{cx}" y="{y + NODE_H - 3}" class="detail">+{hidden}</text>')
    return "".join(cells)
