"""What a rerun reuses and what it runs again: a pure plan from the original run's
spec and attempts, the spec of the version the rerun runs, and the node chosen.

The rerun runs the chosen node and every node that depends on it, directly or
through others (its inputs, its ``after`` and its guarding switch), again. Every other
node the original completed is reused: the rerun starts with that node's completed
rows, so the decider, which rebuilds a run's state from its rows, treats it as done
and never schedules its body. A node the original did not complete runs as in a new
run. On another version the nodes to reuse must mean the same there (kind, task,
dependencies...), or the plan refuses, naming the node and why. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from legato.enums import NodeKind, RunStatus, TaskState
from legato.errors import InvalidArgument, RerunIncompatible, UnknownNode
from legato.flow.spec import (
    HANDLER_NODE_ID,
    ChildNodeSpec,
    EventNodeSpec,
    MapNodeSpec,
    NodeSpec,
    SwitchNodeSpec,
    TaskNodeSpec,
    WorkflowSpec,
    topological_order,
)

# A task name and a stored output -> why the new code would not accept it, or None.
OutputCheck = Callable[[str, JsonValue], str | None]


@dataclass(frozen=True)
class StoredAttempt:
    """One attempt of the original run, as its ``tasks`` row has it."""

    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    output: JsonValue = None


@dataclass(frozen=True)
class Reused:
    """A completed row of the original the rerun starts with (one per map element)."""

    node_id: str
    iteration: int
    kind: NodeKind
    output: JsonValue
    task_name: str | None
    queue: str | None
    event_name: str | None


@dataclass(frozen=True)
class RerunPlan:
    from_node: str
    rerun: tuple[str, ...]  # the nodes run again, in the target's topological order
    reused: tuple[Reused, ...]

    @property
    def reused_nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.node_id for r in self.reused))


_FAILED = (TaskState.FAILED, TaskState.TIMED_OUT)


def latest_attempts(attempts: Iterable[StoredAttempt]) -> dict[tuple[str, int], StoredAttempt]:
    """The last attempt of each (node, iteration), the failure handler's left out."""
    latest: dict[tuple[str, int], StoredAttempt] = {}
    for row in attempts:
        if row.node_id == HANDLER_NODE_ID:
            continue
        key = (row.node_id, row.iteration)
        if key not in latest or row.attempt > latest[key].attempt:
            latest[key] = row
    return latest


def default_from_node(
    spec: WorkflowSpec, status: RunStatus, attempts: Sequence[StoredAttempt], run: str
) -> str:
    """The node a rerun without ``from_node`` starts from: the first node (in the
    original's order) whose last attempt failed or timed out, else the first one
    cancelled, else the first one never completed; a run that succeeded has none."""
    latest = latest_attempts(attempts)
    order = topological_order(spec)

    def first(states: tuple[TaskState, ...]) -> str | None:
        for node in order:
            if any(r.state in states for (n, _), r in latest.items() if n == node.id):
                return node.id
        return None

    found = first(_FAILED) or first((TaskState.CANCELLED,))
    if found is None and status is not RunStatus.SUCCEEDED:
        completed = {n for (n, _), r in latest.items() if r.state is TaskState.COMPLETED}
        found = next((node.id for node in order if node.id not in completed), None)
    if found is None:
        raise InvalidArgument(
            f"run {run} {status.value.lower()} with no failed node: name the node to rerun "
            f"from (from_node= or --from; one of {_names(spec)})"
        )
    return found


def downstream(spec: WorkflowSpec, node_id: str) -> tuple[str, ...]:
    """``node_id`` and every node that depends on it, in topological order."""
    chosen = {node_id}
    ordered = []
    for node in topological_order(spec):
        if node.id == node_id or chosen.intersection(node.dependencies()):
            chosen.add(node.id)
            ordered.append(node.id)
    return tuple(ordered)


def plan_rerun(
    original: WorkflowSpec,
    target: WorkflowSpec,
    status: RunStatus,
    attempts: Sequence[StoredAttempt],
    *,
    from_node: str | None,
    run: str,
    version: str,
    check_output: OutputCheck | None = None,
) -> RerunPlan:
    """The plan of a rerun of run ``run`` on ``target`` (``version`` names it in errors).

    Raises ``UnknownNode`` for a ``from_node`` (or a default node) ``target`` lacks and
    ``RerunIncompatible`` for a node to reuse that ``target`` defines differently or whose
    stored output the new code refuses (``check_output``).
    """
    node_id = from_node or default_from_node(original, status, attempts, run)
    if node_id not in {n.id for n in target.nodes}:
        given = "" if from_node else f" (the first failed node of run {run})"
        raise UnknownNode(
            f"workflow {target.name!r} {version} has no node {node_id!r}{given}: "
            f"its nodes are {_names(target)}"
        )
    rerun = downstream(target, node_id)
    latest = latest_attempts(attempts)
    before = {n.id: n for n in original.nodes}
    reused: list[Reused] = []
    for node in topological_order(target):
        if node.id in rerun or node.id not in before:
            continue
        rows = sorted(
            (r for (n, _), r in latest.items() if n == node.id and r.state is TaskState.COMPLETED),
            key=lambda r: r.iteration,
        )
        if not rows:
            continue
        why = _difference(before[node.id], node)
        if why is None and check_output is not None:
            why = _refused_output(node, rows, check_output)
        if why is not None:
            raise RerunIncompatible(
                f"run {run} cannot be rerun on workflow {target.name!r} {version}: node "
                f"{node.id!r} {why}; rerun from {node.id!r} or an earlier node "
                "(from_node= / --from), or on the original version"
            )
        reused += [_reused(node, row, target) for row in rows]
    return RerunPlan(from_node=node_id, rerun=rerun, reused=tuple(reused))


def _reused(node: NodeSpec, row: StoredAttempt, target: WorkflowSpec) -> Reused:
    task = node.task if isinstance(node, TaskNodeSpec | MapNodeSpec) else None
    return Reused(
        node_id=node.id,
        iteration=row.iteration,
        kind=row.kind,
        output=row.output,
        task_name=task,
        queue=None if task is None else target.tasks[task].queue,
        event_name=node.event if isinstance(node, EventNodeSpec) else None,
    )


def _difference(old: NodeSpec, new: NodeSpec) -> str | None:
    """Why ``new`` cannot take ``old``'s stored output as its own, or None."""
    if old.kind != new.kind:
        return f"is a {new.kind} node there but was a {old.kind} node"
    if old.dependencies() != new.dependencies():
        return (
            f"depends on {_listed(new.dependencies())} there but on "
            f"{_listed(old.dependencies())} in the original: its stored output came from "
            "other inputs"
        )
    pairs: list[tuple[str, object, object]] = []
    if isinstance(old, TaskNodeSpec | MapNodeSpec) and isinstance(new, TaskNodeSpec | MapNodeSpec):
        pairs.append(("task", old.task, new.task))
    if isinstance(old, SwitchNodeSpec) and isinstance(new, SwitchNodeSpec):
        pairs += [("field", old.field, new.field), ("cases", old.cases, new.cases)]
    if isinstance(old, EventNodeSpec) and isinstance(new, EventNodeSpec):
        pairs.append(("event", old.event, new.event))
    if isinstance(old, ChildNodeSpec) and isinstance(new, ChildNodeSpec):
        pairs.append(("child workflow", old.workflow, new.workflow))
    for what, was, now in pairs:
        if was != now:
            return f"has {what} {now!r} there but {was!r} in the original"
    return None


def _refused_output(
    node: NodeSpec, rows: Sequence[StoredAttempt], check_output: OutputCheck
) -> str | None:
    if not isinstance(node, TaskNodeSpec | MapNodeSpec):  # a map: each element's output
        return None
    for row in rows:
        why = check_output(node.task, row.output)
        if why is not None:
            return f"stored an output task {node.task!r} no longer accepts: {why}"
    return None


def _listed(ids: Sequence[str]) -> str:
    return "(" + ", ".join(repr(i) for i in ids) + ")" if ids else "nothing"


def _names(spec: WorkflowSpec) -> str:
    return ", ".join(repr(n.id) for n in spec.nodes)
