"""The node kinds of the decider: one ``NodeHandler`` per spec ``kind``, in ``HANDLERS``.

Each handler reads and advances one node through the ``Decision`` it is given; the
driver, emitting, retries and the run's failure path live in ``decide.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import JsonValue

from legato.engine.decider.model import CancelChildRun, ConsumeSignal, StartChildRun, TaskError
from legato.engine.decider.state import DeciderError, Outcome, Row, Status
from legato.flow.spec import (
    DEFAULT_CASE,
    ChildNodeSpec,
    EventNodeSpec,
    FirstOfNodeSpec,
    JsonScalar,
    MapNodeSpec,
    NodeSpec,
    SleepNodeSpec,
    SwitchNodeSpec,
    TaskNodeSpec,
)
from legato.schema.enums import NodeKind, TaskState, TimerKind

if TYPE_CHECKING:
    from legato.engine.decider.decision import Decision


def _json_equal(a: JsonValue, b: JsonScalar) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


N = TypeVar("N", bound=NodeSpec)


class NodeHandler(Generic[N]):
    """What one node kind does in a decision. ``HANDLERS`` maps each spec ``kind`` to
    its handler; adding a kind is a handler plus its entry (see docs/architecture.md)."""

    row_kind: NodeKind  # the kind of its tasks rows (and of its skip record)

    def evaluate(self, d: Decision, node: N, row: Row | None) -> Outcome:
        """The node's status this decision (``row``: its iteration-0 row, if any),
        emitting whatever starts or advances it. By default: wait for the node's gate,
        then ``start`` it once, then ``progress`` its row."""
        if row is None:
            gate = d._gate(node)
            if gate is Status.SKIPPED:
                return d._skip(node)
            if gate is Status.PENDING:
                return (Status.PENDING, None)
            return self.start(d, node)
        return self.progress(d, node, row)

    def start(self, d: Decision, node: N) -> Outcome:
        """Start the node once its gate opens (its first row, timers, events); a kind
        that overrides ``evaluate`` need not."""
        raise DeciderError(f"cannot start node {node.id!r} of kind {node.kind!r}")

    def progress(self, d: Decision, node: N, row: Row) -> Outcome:
        """A started node: done when its row completed, live while it is active, else
        failed (``failed_for_good`` decides whether the run fails over it)."""
        if row.state is TaskState.COMPLETED:
            return (Status.DONE, row.output)
        if row.state.active:
            return (Status.LIVE, None)
        return (Status.FAILED, None)

    def task_name(self, node: N) -> str | None:
        """The task its rows run, whose retry policy applies; None: never retried."""
        return None

    def failed_for_good(self, d: Decision, node: N, row: Row) -> bool:
        """Whether a FAILED or TIMED_OUT row fails the run (no retry is left)."""
        return not d._can_retry(row, self.task_name(node))

    def cancelled(self, d: Decision, row: Row) -> None:
        """Called when the decision cancels the node's live row (its row is resolved)."""


class _Task(NodeHandler[TaskNodeSpec]):
    row_kind = NodeKind.TASK

    def task_name(self, node: TaskNodeSpec) -> str | None:
        return node.task

    def start(self, d: Decision, node: TaskNodeSpec) -> Outcome:
        args: JsonValue = [d._output(i) for i in node.inputs]
        d._start_attempt(node.id, 0, 1, self.row_kind, node.task, args, d.now)
        return (Status.LIVE, None)

    def progress(self, d: Decision, node: TaskNodeSpec, row: Row) -> Outcome:
        if d._can_retry(row, node.task):
            d._retry(row, node.task, [d._output(i) for i in node.inputs])
            return (Status.LIVE, None)
        return super().progress(d, node, row)


class _Sleep(NodeHandler[SleepNodeSpec]):
    row_kind = NodeKind.SLEEP

    def start(self, d: Decision, node: SleepNodeSpec) -> Outcome:
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.WAITING)
        d._timer(row, TimerKind.SLEEP, d.now + timedelta(seconds=node.seconds))
        d._event("sleep_started", row, data={"seconds": node.seconds})
        return (Status.LIVE, None)


class _Event(NodeHandler[EventNodeSpec]):
    row_kind = NodeKind.EVENT

    def start(self, d: Decision, node: EventNodeSpec) -> Outcome:
        signal = d._take_signal(node.event)
        if signal is not None:
            row = d._create(
                node.id,
                0,
                1,
                self.row_kind,
                TaskState.COMPLETED,
                event_name=node.event,
                output=signal.payload,
            )
            d._emit(ConsumeSignal(signal_id=signal.signal_id, task_id=row.task_id))
            d._event(
                "event_received",
                row,
                data={"event": node.event, "signal_id": str(signal.signal_id)},
            )
            return (Status.DONE, signal.payload)
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.WAITING, event_name=node.event)
        if node.timeout is not None:
            d._timer(row, TimerKind.EVENT_TIMEOUT, d.now + timedelta(seconds=node.timeout))
        d._event("event_wait_started", row, data={"event": node.event})
        return (Status.LIVE, None)

    def progress(self, d: Decision, node: EventNodeSpec, row: Row) -> Outcome:
        if row.state is TaskState.WAITING:
            signal = d._take_signal(node.event)
            if signal is None:
                return (Status.LIVE, None)
            d._emit(ConsumeSignal(signal_id=signal.signal_id, task_id=row.task_id))
            d._resolve(row, TaskState.COMPLETED, signal.payload)
            d._event(
                "event_received",
                row,
                data={"event": node.event, "signal_id": str(signal.signal_id)},
            )
            return (Status.DONE, signal.payload)
        if row.state is TaskState.TIMED_OUT and node.has_default:
            return (Status.DONE, node.default)
        return super().progress(d, node, row)

    def failed_for_good(self, d: Decision, node: EventNodeSpec, row: Row) -> bool:
        if row.state is TaskState.TIMED_OUT:
            return not node.has_default
        return super().failed_for_good(d, node, row)


class _Switch(NodeHandler[SwitchNodeSpec]):
    row_kind = NodeKind.SWITCH

    def start(self, d: Decision, node: SwitchNodeSpec) -> Outcome:
        value = d._output(node.inputs[0])
        if node.field is not None:
            value = value.get(node.field) if isinstance(value, dict) else None
        label: str | None = next(
            (c.label for c in node.cases if _json_equal(value, c.value)),
            DEFAULT_CASE if node.has_default else None,
        )
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.COMPLETED, output=label)
        d._event("switch_decided", row, data={"value": value, "case": label})
        return (Status.DONE, label)


class _Child(NodeHandler[ChildNodeSpec]):
    row_kind = NodeKind.CHILD

    def start(self, d: Decision, node: ChildNodeSpec) -> Outcome:
        child_input = d._output(node.inputs[0])
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.WAITING, input=child_input)
        d._emit(StartChildRun(task_id=row.task_id, workflow_name=node.workflow, input=child_input))
        d._event("child_started", row, data={"workflow": node.workflow, "run_id": str(row.task_id)})
        return (Status.LIVE, None)

    def cancelled(self, d: Decision, row: Row) -> None:
        d._emit(CancelChildRun(run_id=row.task_id))


class _FirstOf(NodeHandler[FirstOfNodeSpec]):
    row_kind = NodeKind.JOIN

    def evaluate(self, d: Decision, node: FirstOfNodeSpec, row: Row | None) -> Outcome:
        if row is not None:
            return (
                (Status.DONE, row.output)
                if row.state is TaskState.COMPLETED
                else (Status.FAILED, None)
            )
        if node.guard is not None:
            gate = d._gate(node.model_copy(update={"inputs": ()}))
            if gate is Status.SKIPPED:
                return d._skip(node)
            if gate is Status.PENDING:
                return (Status.PENDING, None)
        for dep in node.after:
            if d.status[dep][0] is not Status.DONE:
                return (
                    d._skip(node) if d.status[dep][0] is Status.SKIPPED else (Status.PENDING, None)
                )
        states = [d.status[i] for i in node.inputs]
        for i, (state, output) in zip(node.inputs, states, strict=True):
            if state is Status.DONE:
                new = d._create(node.id, 0, 1, self.row_kind, TaskState.COMPLETED, output=output)
                d._event("first_of_chosen", new, data={"input": i})
                return (Status.DONE, output)
        if all(s is Status.SKIPPED for s, _ in states):
            return d._skip(node)
        return (Status.PENDING, None)


class _Map(NodeHandler[MapNodeSpec]):
    row_kind = NodeKind.MAP

    def task_name(self, node: MapNodeSpec) -> str | None:
        return node.task

    def evaluate(self, d: Decision, node: MapNodeSpec, row: Row | None) -> Outcome:
        rows = {it: r for (nid, it), r in d.rows.items() if nid == node.id}
        if not rows:
            gate = d._gate(node)
            if gate is Status.SKIPPED:
                return d._skip(node)
            if gate is Status.PENDING:
                return (Status.PENDING, None)
        items = d._output(node.inputs[0])
        if not isinstance(items, list):
            error = TaskError(
                type="MapInputError",
                message=f"map node {node.id!r} needs a list input, got {type(items).__name__}",
                retryable=False,
            )
            bad = d._create(node.id, 0, 1, self.row_kind, TaskState.FAILED, error=error)
            d._event("task_failed", bad, data={"error": error.model_dump(mode="json")})
            return (Status.FAILED, None)
        limit = node.max_concurrency or len(items)
        live = 0
        outputs: list[JsonValue] = []
        failed = False
        to_start: list[int] = []
        for i, item in enumerate(items):
            element = rows.get(i)
            if element is None:
                to_start.append(i)
            elif element.state is TaskState.COMPLETED:
                outputs.append(element.output)
            elif element.state.active:
                live += 1
            elif d._can_retry(element, node.task):
                d._retry(element, node.task, [item])
                live += 1
            else:
                failed = True
        if failed:
            return (Status.FAILED, None)
        for i in to_start:
            if live >= limit:
                break
            d._start_attempt(node.id, i, 1, self.row_kind, node.task, [items[i]], d.now)
            live += 1
        if len(outputs) == len(items):
            return (Status.DONE, outputs)
        return (Status.LIVE, None)


HANDLERS: Mapping[str, NodeHandler[Any]] = {
    "task": _Task(),
    "sleep": _Sleep(),
    "event": _Event(),
    "switch": _Switch(),
    "first_of": _FirstOf(),
    "map": _Map(),
    "child": _Child(),
}
"""Each spec node ``kind`` to its handler: the decider's dispatch table."""
