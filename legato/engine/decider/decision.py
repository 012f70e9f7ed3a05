"""``Decision``: one run's decision, driving the node kinds' handlers.

The driver (observing rows, evaluating nodes in order, finishing the run), emitting
actions, retries and the failure path. Each node kind's part is its handler in
``nodes.py``, which ``decide.py`` passes in; this module imports none of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import JsonValue

from legato.engine.decider.backoff import retry_delay, retry_seed
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
    BufferedSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    MarkObserved,
    ResolveTask,
    RunSnapshot,
    TaskError,
    TaskRecord,
    child_run_id_for,
    task_id_for,
    timer_id_for,
)
from legato.engine.decider.state import Outcome, Row, Status, UnknownNodeError
from legato.flow.spec import (
    HANDLER_NODE_ID,
    INPUT_NODE_ID,
    FailureInfo,
    NodeSpec,
    WorkflowSpec,
    topological_order,
)
from legato.schema.enums import NodeKind, RunStatus, TaskState, TimerKind


class Handler(Protocol):
    """What a decision needs of a node kind's handler (``nodes.NodeHandler``)."""

    row_kind: NodeKind

    def evaluate(self, d: Decision, node: Any, row: Row | None) -> Outcome: ...
    def failed_for_good(self, d: Decision, node: Any, row: Row) -> bool: ...
    def cancelled(self, d: Decision, row: Row) -> None: ...


@dataclass(frozen=True)
class _Failure:
    row: Row
    error: TaskError


_RETRYABLE_KINDS = frozenset({NodeKind.TASK, NodeKind.MAP, NodeKind.HANDLER})
_FAILED_STATES = frozenset({TaskState.FAILED, TaskState.TIMED_OUT})


class Decision:
    """One decision of one run: the driver, emitting, retries and the failure path.

    The node kinds' handlers (``nodes.py``, passed in as ``handlers``) call back into it
    for the rows, events and timers they emit."""

    def __init__(
        self,
        spec: WorkflowSpec,
        snapshot: RunSnapshot,
        now: datetime,
        handlers: Mapping[str, Handler],
    ) -> None:
        self.spec = spec
        self.handlers = handlers
        self.snap = snapshot
        self.now = now
        self.order = topological_order(spec)
        self.index = {n.id: i for i, n in enumerate(spec.nodes)}
        self.actions: list[Action] = []
        self.observed: list[uuid.UUID] = []
        self.signals: list[BufferedSignal] = list(snapshot.signals)
        self.status: dict[str, Outcome] = {INPUT_NODE_ID: (Status.DONE, snapshot.input)}
        # Latest attempt per (node, iteration).
        self.rows: dict[tuple[str, int], Row] = {}
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
                self.rows[key] = Row(
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
        row: Row | None = None,
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
            if rec.cached:
                data["cached"] = True
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
        *,
        task_name: str | None = None,
        queue: str | None = None,
        input: JsonValue = None,
        output: JsonValue = None,
        error: TaskError | None = None,
        event_name: str | None = None,
        available_at: datetime | None = None,
    ) -> Row:
        id_for = child_run_id_for if kind is NodeKind.CHILD else task_id_for
        task_id = id_for(self.snap.run_id, node_id, iteration, attempt)
        action = CreateTask(
            task_id=task_id,
            node_id=node_id,
            iteration=iteration,
            attempt=attempt,
            kind=kind,
            state=state,
            task_name=task_name,
            queue=queue,
            input=input,
            output=output,
            error=error,
            event_name=event_name,
            available_at=available_at,
        )
        self._emit(action)
        row = Row(task_id, node_id, iteration, attempt, kind, state, action.output, action.error)
        self.rows[(node_id, iteration)] = row
        if not state.active:
            self.observed.append(task_id)
        return row

    def _resolve(self, row: Row, state: TaskState, output: JsonValue = None) -> Row:
        self._emit(
            ResolveTask(task_id=row.task_id, attempt=row.attempt, state=state, output=output)
        )
        new = replace(row, state=state, output=output)
        self.rows[(row.node_id, row.iteration)] = new
        self.observed.append(row.task_id)
        return new

    def _timer(self, row: Row, kind: TimerKind, fire_at: datetime) -> None:
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
    ) -> Row:
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

    def _retry(self, row: Row, task_name: str, args: JsonValue) -> Row:
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

    def _can_retry(self, row: Row, task_name: str | None) -> bool:
        if task_name is None or row.kind not in _RETRYABLE_KINDS or row.state not in _FAILED_STATES:
            return False
        if row.state is TaskState.FAILED and row.error is not None and not row.error.retryable:
            return False
        return row.attempt < self.spec.tasks[task_name].retry.attempts

    def _handler(self, node_id: str) -> tuple[Handler, NodeSpec]:
        node = self.spec.nodes[self.index[node_id]]
        return self.handlers[node.kind], node

    def _is_failure(self, row: Row) -> bool:
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
        row = self._create(node.id, 0, 1, self.handlers[node.kind].row_kind, TaskState.SKIPPED)
        self._event("node_skipped", row)
        return (Status.SKIPPED, None)

    def _evaluate(self, node: NodeSpec) -> Outcome:
        row = self.rows.get((node.id, 0))
        if row is not None and row.state is TaskState.SKIPPED:
            return (Status.SKIPPED, None)
        return self.handlers[node.kind].evaluate(self, node, row)

    def _take_signal(self, event: str) -> BufferedSignal | None:
        for i, signal in enumerate(self.signals):
            if signal.name == event:
                del self.signals[i]
                return signal
        return None
