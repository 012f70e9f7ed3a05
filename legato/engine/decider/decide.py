"""The pure decider: ``decide(spec, snapshot, now) -> list[Action]``.

No I/O, no clock, no randomness: the same spec, snapshot and ``now`` always give
the same actions, and deciding again after applying them gives nothing new.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import JsonValue

from legato.engine.decider.backoff import retry_delay, retry_seed
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
    BufferedSignal,
    CancelChildRun,
    ConsumeSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    MarkObserved,
    ResolveTask,
    RunSnapshot,
    StartChildRun,
    TaskError,
    TaskRecord,
    child_run_id_for,
    task_id_for,
    timer_id_for,
)
from legato.flow.spec import (
    DEFAULT_CASE,
    HANDLER_NODE_ID,
    INPUT_NODE_ID,
    ChildNodeSpec,
    EventNodeSpec,
    FailureInfo,
    FirstOfNodeSpec,
    JsonScalar,
    MapNodeSpec,
    NodeSpec,
    SleepNodeSpec,
    SwitchNodeSpec,
    TaskNodeSpec,
    WorkflowSpec,
    topological_order,
)
from legato.schema.enums import NodeKind, RunStatus, TaskState, TimerKind


class DeciderError(Exception):
    """The snapshot does not fit the spec (a bug or a corrupted run), never user data."""


class UnknownNodeError(DeciderError):
    """A task row names a node the run's workflow version does not have."""


class Status(enum.Enum):
    PENDING = "pending"  # not started: waiting for dependencies
    LIVE = "live"  # work in flight (an attempt, a wait, a retry, map elements)
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


# A node's status in this decision, with its output when DONE.
Outcome = tuple[Status, JsonValue]


@dataclass(frozen=True)
class _Row:
    task_id: uuid.UUID
    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    output: JsonValue = None
    error: TaskError | None = None


@dataclass(frozen=True)
class _Failure:
    row: _Row
    error: TaskError


_RETRYABLE_KINDS = frozenset({NodeKind.TASK, NodeKind.MAP, NodeKind.HANDLER})
_FAILED_STATES = frozenset({TaskState.FAILED, TaskState.TIMED_OUT})


def decide(spec: WorkflowSpec, snapshot: RunSnapshot, now: datetime) -> list[Action]:
    """Decide what happens next in one run. Pure: see the module docstring."""
    return _Decision(spec, snapshot, now).run()


def _json_equal(a: JsonValue, b: JsonScalar) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


class _Decision:
    def __init__(self, spec: WorkflowSpec, snapshot: RunSnapshot, now: datetime) -> None:
        self.spec = spec
        self.snap = snapshot
        self.now = now
        self.order = topological_order(spec)
        self.index = {n.id: i for i, n in enumerate(spec.nodes)}
        self.actions: list[Action] = []
        self.observed: list[uuid.UUID] = []
        self.signals: list[BufferedSignal] = list(snapshot.signals)
        self.status: dict[str, Outcome] = {INPUT_NODE_ID: (Status.DONE, snapshot.input)}
        # Latest attempt per (node, iteration).
        self.rows: dict[tuple[str, int], _Row] = {}
        known = set(self.index)
        if spec.on_failure is not None:
            known.add(HANDLER_NODE_ID)
        for rec in snapshot.tasks:
            if rec.node_id not in known:
                raise UnknownNodeError(
                    f"run {snapshot.run_id}: task {rec.task_id} names node {rec.node_id!r}, "
                    f"which workflow {spec.name!r} does not have"
                )
            key = (rec.node_id, rec.iteration)
            cur = self.rows.get(key)
            if cur is None or rec.attempt > cur.attempt:
                self.rows[key] = _Row(
                    rec.task_id,
                    rec.node_id,
                    rec.iteration,
                    rec.attempt,
                    rec.kind,
                    rec.state,
                    rec.output,
                    rec.error,
                )

    # -- driver --------------------------------------------------------------------

    def run(self) -> list[Action]:
        self._observe(self.snap.tasks)
        if self.snap.status is RunStatus.RUNNING:
            if self.snap.cancel_requested:
                self._cancel_live()
                self._event("run_cancelled")
                self._emit(FinishRun(status=RunStatus.CANCELLED))
            elif self.snap.timed_out:
                self._time_out()
            else:
                self._arm_deadline()
                self._decide_running()
        if self.observed:
            self._emit(MarkObserved(task_ids=tuple(self.observed)))
        return self.actions

    def _decide_running(self) -> None:
        failure = self._find_failure()
        if failure is None:
            for node in self.order:
                self.status[node.id] = self._evaluate(node)
            failure = self._find_failure()
        if failure is not None:
            self._fail(failure)
            return
        if all(self.status[n.id][0] in (Status.DONE, Status.SKIPPED) for n in self.spec.nodes):
            state, output = self.status[self.spec.output]
            if state is Status.DONE:
                self._event("run_succeeded", data={"output": output})
                self._emit(FinishRun(status=RunStatus.SUCCEEDED, output=output))
            else:
                error = TaskError(
                    type="OutputSkipped",
                    message=f"the output node {self.spec.output!r} was skipped",
                    retryable=False,
                )
                self._event("run_failed", data={"error": error.model_dump(mode="json")})
                self._emit(FinishRun(status=RunStatus.FAILED, error=error))

    # -- emitting ------------------------------------------------------------------

    def _emit(self, action: Action) -> None:
        self.actions.append(action)

    def _event(
        self,
        type: str,
        row: _Row | None = None,
        *,
        node_id: str | None = None,
        data: JsonValue = None,
    ) -> None:
        if row is not None:
            self._emit(
                AppendEvent(
                    type=type,
                    node_id=row.node_id,
                    iteration=row.iteration,
                    attempt=row.attempt,
                    data=data,
                )
            )
        else:
            self._emit(AppendEvent(type=type, node_id=node_id, data=data))

    def _observe(self, records: Iterable[TaskRecord]) -> None:
        pending = [r for r in records if not r.observed and not r.state.active]
        pending.sort(
            key=lambda r: (
                r.finished_at or r.created_at,
                self.index.get(r.node_id, len(self.index)),
                r.iteration,
                r.attempt,
            )
        )
        for rec in pending:
            data: dict[str, JsonValue] = (
                {"output": rec.output} if rec.state is TaskState.COMPLETED else {}
            )
            if rec.error is not None:
                data["error"] = rec.error.model_dump(mode="json")
            self._emit(
                AppendEvent(
                    type=f"task_{rec.state.value.lower()}",
                    node_id=rec.node_id,
                    iteration=rec.iteration,
                    attempt=rec.attempt,
                    data=data,
                )
            )
            self.observed.append(rec.task_id)

    def _create(
        self,
        node_id: str,
        iteration: int,
        attempt: int,
        kind: NodeKind,
        state: TaskState,
        **fields: JsonValue | TaskError | datetime | None,
    ) -> _Row:
        id_for = child_run_id_for if kind is NodeKind.CHILD else task_id_for
        task_id = id_for(self.snap.run_id, node_id, iteration, attempt)
        action = CreateTask.model_validate(
            {
                "task_id": task_id,
                "node_id": node_id,
                "iteration": iteration,
                "attempt": attempt,
                "kind": kind,
                "state": state,
                **fields,
            }
        )
        self._emit(action)
        row = _Row(task_id, node_id, iteration, attempt, kind, state, action.output, action.error)
        self.rows[(node_id, iteration)] = row
        if not state.active:
            self.observed.append(task_id)
        return row

    def _resolve(self, row: _Row, state: TaskState, output: JsonValue = None) -> _Row:
        self._emit(
            ResolveTask(task_id=row.task_id, attempt=row.attempt, state=state, output=output)
        )
        new = replace(row, state=state, output=output)
        self.rows[(row.node_id, row.iteration)] = new
        self.observed.append(row.task_id)
        return new

    def _timer(self, row: _Row, kind: TimerKind, fire_at: datetime) -> None:
        self._emit(
            ArmTimer(
                timer_id=timer_id_for(row.task_id, kind),
                task_id=row.task_id,
                attempt=row.attempt,
                kind=kind,
                fire_at=fire_at,
            )
        )

    def _start_attempt(
        self,
        node_id: str,
        iteration: int,
        attempt: int,
        kind: NodeKind,
        task_name: str,
        args: JsonValue,
        available_at: datetime,
    ) -> _Row:
        task = self.spec.tasks[task_name]
        row = self._create(
            node_id,
            iteration,
            attempt,
            kind,
            TaskState.QUEUED,
            task_name=task_name,
            queue=task.queue,
            input=args,
            available_at=available_at,
        )
        self._emit(
            EnqueueTask(
                task_id=row.task_id,
                task_name=task_name,
                queue=task.queue,
                attempt=attempt,
                priority=task.priority,
                available_at=available_at,
            )
        )
        sts = task.timeouts.schedule_to_start
        stc = task.timeouts.start_to_close
        if sts is not None:
            self._timer(row, TimerKind.SCHEDULE_TO_START, available_at + timedelta(seconds=sts))
        if stc is not None:
            # Latest possible close: it cannot start later than its schedule-to-start bound.
            latest_start = available_at + timedelta(seconds=sts or 0)
            self._timer(row, TimerKind.START_TO_CLOSE, latest_start + timedelta(seconds=stc))
        self._event(
            "task_scheduled" if attempt == 1 else "retry_scheduled",
            row,
            data={"task": task_name, "available_at": available_at.isoformat()},
        )
        return row

    def _retry(self, row: _Row, task_name: str, args: JsonValue) -> _Row:
        policy = self.spec.tasks[task_name].retry
        delay = retry_delay(
            policy,
            row.attempt,
            retry_seed(self.snap.run_id, row.node_id, row.iteration, row.attempt),
        )
        return self._start_attempt(
            row.node_id, row.iteration, row.attempt + 1, row.kind, task_name, args, self.now + delay
        )

    def _cancel_live(self, keep: frozenset[str] = frozenset()) -> None:
        live = [r for r in self.rows.values() if r.state.active and r.node_id not in keep]
        live.sort(key=lambda r: (self.index.get(r.node_id, len(self.index)), r.iteration))
        for row in live:
            self._resolve(row, TaskState.CANCELLED)
            if row.node_id != HANDLER_NODE_ID:
                handler, _ = self._handler(row.node_id)
                handler.cancelled(self, row)
            self._event("task_cancelled", row)

    # -- run timeout ---------------------------------------------------------------

    def _arm_deadline(self) -> None:
        """On the run's first decision (it has no task rows yet: every first decision
        creates some), arm the RUN_TIMEOUT timer of ``execution_timeout``."""
        timeout = self.spec.execution_timeout
        if timeout is None or self.snap.tasks:
            return
        run_id = self.snap.run_id
        self._emit(
            ArmTimer(
                timer_id=timer_id_for(run_id, TimerKind.RUN_TIMEOUT),
                task_id=run_id,
                attempt=0,
                kind=TimerKind.RUN_TIMEOUT,
                fire_at=self.now + timedelta(seconds=timeout),
            )
        )

    def _time_out(self) -> None:
        """The deadline passed: cancel every live row (a cancel) and finish TIMED_OUT.

        The failure handler does not run: the deadline bounds it too.
        """
        self._cancel_live()
        error = TaskError(
            type="RunTimedOut",
            message=f"workflow {self.spec.name!r} did not finish within its "
            f"execution_timeout of {self.spec.execution_timeout:g}s",
            retryable=False,
        )
        self._event("run_timed_out", data={"error": error.model_dump(mode="json")})
        self._emit(FinishRun(status=RunStatus.TIMED_OUT, error=error))

    # -- failures ------------------------------------------------------------------

    def _can_retry(self, row: _Row, task_name: str | None) -> bool:
        if task_name is None or row.kind not in _RETRYABLE_KINDS or row.state not in _FAILED_STATES:
            return False
        if row.state is TaskState.FAILED and row.error is not None and not row.error.retryable:
            return False
        return row.attempt < self.spec.tasks[task_name].retry.attempts

    def _handler(self, node_id: str) -> tuple[NodeHandler[Any], NodeSpec]:
        node = self.spec.nodes[self.index[node_id]]
        return HANDLERS[node.kind], node

    def _is_failure(self, row: _Row) -> bool:
        if row.state is TaskState.CANCELLED:
            return True
        if row.state not in _FAILED_STATES:
            return False
        handler, node = self._handler(row.node_id)
        return handler.failed_for_good(self, node, row)

    def _find_failure(self) -> _Failure | None:
        """The first failed-for-good node in spec order; a real failure beats a cancellation."""
        candidates = sorted(
            (r for r in self.rows.values() if r.node_id != HANDLER_NODE_ID and self._is_failure(r)),
            key=lambda r: (r.state is TaskState.CANCELLED, self.index[r.node_id], r.iteration),
        )
        if not candidates:
            return None
        row = candidates[0]
        error = row.error or TaskError(
            type="TimedOut" if row.state is TaskState.TIMED_OUT else "Cancelled",
            message=f"node {row.node_id!r} {row.state.value.lower().replace('_', ' ')}",
            retryable=False,
        )
        return _Failure(row, error)

    def _fail(self, failure: _Failure) -> None:
        handler = self.spec.on_failure
        error = failure.error
        if handler is None:
            self._cancel_live()
            self._event(
                "run_failed",
                data={"node_id": failure.row.node_id, "error": error.model_dump(mode="json")},
            )
            self._emit(FinishRun(status=RunStatus.FAILED, error=error))
            return
        self._cancel_live(keep=frozenset({HANDLER_NODE_ID}))
        info = FailureInfo(
            workflow=self.spec.name,
            node_id=failure.row.node_id,
            iteration=failure.row.iteration,
            attempt=failure.row.attempt,
            error_type=error.type,
            message=error.message,
            input=self.snap.input,
        )
        args: JsonValue = [info.model_dump(mode="json")]
        row = self.rows.get((HANDLER_NODE_ID, 0))
        if row is None:
            self._start_attempt(HANDLER_NODE_ID, 0, 1, NodeKind.HANDLER, handler, args, self.now)
            return
        if row.state.active:
            return
        if self._can_retry(row, handler):
            self._retry(row, handler, args)
            return
        if row.state is not TaskState.COMPLETED:
            self._event("failure_handler_failed", row)
        self._event(
            "run_failed",
            data={"node_id": failure.row.node_id, "error": error.model_dump(mode="json")},
        )
        self._emit(FinishRun(status=RunStatus.FAILED, error=error))

    # -- node evaluation -----------------------------------------------------------

    def _output(self, node_id: str) -> JsonValue:
        return self.status[node_id][1]

    def _gate(self, node: NodeSpec) -> Status:
        """DONE when the node may start, SKIPPED when it never will, else PENDING."""
        if node.guard is not None:
            sw_state, chosen = self.status[node.guard.switch]
            if sw_state is Status.SKIPPED:
                return Status.SKIPPED
            if sw_state is not Status.DONE:
                return Status.PENDING
            if chosen != node.guard.case:
                return Status.SKIPPED
        states = [self.status[d][0] for d in (*node.inputs, *node.after)]
        if Status.SKIPPED in states:
            return Status.SKIPPED
        if all(s is Status.DONE for s in states):
            return Status.DONE
        return Status.PENDING

    def _skip(self, node: NodeSpec) -> Outcome:
        row = self._create(node.id, 0, 1, HANDLERS[node.kind].row_kind, TaskState.SKIPPED)
        self._event("node_skipped", row)
        return (Status.SKIPPED, None)

    def _evaluate(self, node: NodeSpec) -> Outcome:
        row = self.rows.get((node.id, 0))
        if row is not None and row.state is TaskState.SKIPPED:
            return (Status.SKIPPED, None)
        return HANDLERS[node.kind].evaluate(self, node, row)

    def _take_signal(self, event: str) -> BufferedSignal | None:
        for i, signal in enumerate(self.signals):
            if signal.name == event:
                del self.signals[i]
                return signal
        return None


# -- node kinds ----------------------------------------------------------------------

N = TypeVar("N", bound=NodeSpec)


class NodeHandler(Generic[N]):
    """What one node kind does in a decision. ``HANDLERS`` maps each spec ``kind`` to
    its handler; adding a kind is a handler plus its entry (see docs/architecture.md)."""

    row_kind: NodeKind  # the kind of its tasks rows (and of its skip record)

    def evaluate(self, d: _Decision, node: N, row: _Row | None) -> Outcome:
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

    def start(self, d: _Decision, node: N) -> Outcome:
        """Start the node once its gate opens (its first row, timers, events); a kind
        that overrides ``evaluate`` need not."""
        raise DeciderError(f"cannot start node {node.id!r} of kind {node.kind!r}")

    def progress(self, d: _Decision, node: N, row: _Row) -> Outcome:
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

    def failed_for_good(self, d: _Decision, node: N, row: _Row) -> bool:
        """Whether a FAILED or TIMED_OUT row fails the run (no retry is left)."""
        return not d._can_retry(row, self.task_name(node))

    def cancelled(self, d: _Decision, row: _Row) -> None:
        """Called when the decision cancels the node's live row (its row is resolved)."""


class _Task(NodeHandler[TaskNodeSpec]):
    row_kind = NodeKind.TASK

    def task_name(self, node: TaskNodeSpec) -> str | None:
        return node.task

    def start(self, d: _Decision, node: TaskNodeSpec) -> Outcome:
        args: JsonValue = [d._output(i) for i in node.inputs]
        d._start_attempt(node.id, 0, 1, self.row_kind, node.task, args, d.now)
        return (Status.LIVE, None)

    def progress(self, d: _Decision, node: TaskNodeSpec, row: _Row) -> Outcome:
        if d._can_retry(row, node.task):
            d._retry(row, node.task, [d._output(i) for i in node.inputs])
            return (Status.LIVE, None)
        return super().progress(d, node, row)


class _Sleep(NodeHandler[SleepNodeSpec]):
    row_kind = NodeKind.SLEEP

    def start(self, d: _Decision, node: SleepNodeSpec) -> Outcome:
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.WAITING)
        d._timer(row, TimerKind.SLEEP, d.now + timedelta(seconds=node.seconds))
        d._event("sleep_started", row, data={"seconds": node.seconds})
        return (Status.LIVE, None)


class _Event(NodeHandler[EventNodeSpec]):
    row_kind = NodeKind.EVENT

    def start(self, d: _Decision, node: EventNodeSpec) -> Outcome:
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

    def progress(self, d: _Decision, node: EventNodeSpec, row: _Row) -> Outcome:
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

    def failed_for_good(self, d: _Decision, node: EventNodeSpec, row: _Row) -> bool:
        if row.state is TaskState.TIMED_OUT:
            return not node.has_default
        return super().failed_for_good(d, node, row)


class _Switch(NodeHandler[SwitchNodeSpec]):
    row_kind = NodeKind.SWITCH

    def start(self, d: _Decision, node: SwitchNodeSpec) -> Outcome:
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

    def start(self, d: _Decision, node: ChildNodeSpec) -> Outcome:
        child_input = d._output(node.inputs[0])
        row = d._create(node.id, 0, 1, self.row_kind, TaskState.WAITING, input=child_input)
        d._emit(StartChildRun(task_id=row.task_id, workflow_name=node.workflow, input=child_input))
        d._event("child_started", row, data={"workflow": node.workflow, "run_id": str(row.task_id)})
        return (Status.LIVE, None)

    def cancelled(self, d: _Decision, row: _Row) -> None:
        d._emit(CancelChildRun(run_id=row.task_id))


class _FirstOf(NodeHandler[FirstOfNodeSpec]):
    row_kind = NodeKind.JOIN

    def evaluate(self, d: _Decision, node: FirstOfNodeSpec, row: _Row | None) -> Outcome:
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

    def evaluate(self, d: _Decision, node: MapNodeSpec, row: _Row | None) -> Outcome:
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
