"""The simulator's core: applies decider actions to an in-memory run snapshot.

``legato.testing.Simulator`` drives it for users (real tasks, timers, a clock); the
project's decider tests drive it directly, action by action.

It also checks, at every step, the invariants the decider promises: deterministic,
idempotent, one live attempt per (node, iteration), unique attempt keys, FinishRun
at most once and only when nothing is live.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import assert_never

from pydantic import JsonValue

from legato.engine.decider import decide
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
)
from legato.flow.spec import WorkflowSpec
from legato.schema.enums import RunStatus, TaskState

T0 = datetime(2025, 1, 1, tzinfo=UTC)


class Sim:
    """One run of ``spec``: ``step()`` decides and applies; the other methods are the
    external facts (a task finished, a signal arrived, time passed)."""

    def __init__(
        self, spec: WorkflowSpec, input: JsonValue = None, run_id: uuid.UUID | None = None
    ) -> None:
        self.spec = spec
        self.now = T0
        self.snap = RunSnapshot(
            run_id=run_id or uuid.UUID("01940000-0000-7000-8000-000000000001"),
            status=RunStatus.RUNNING,
            input=input,
        )
        self.finishes: list[FinishRun] = []
        self.timers: dict[uuid.UUID, ArmTimer] = {}
        self.enqueued: dict[uuid.UUID, EnqueueTask] = {}
        self.created: list[CreateTask] = []
        self.children: list[StartChildRun] = []
        self.cancelled_children: list[uuid.UUID] = []
        self.log: list[Action] = []
        self._signal_seq = 0

    # -- deciding ---------------------------------------------------------------

    def step(self) -> list[Action]:
        actions = decide(self.spec, self.snap, self.now)
        again = decide(self.spec, self.snap, self.now)
        assert actions == again, "the decider is not deterministic"
        self.apply(actions)
        assert decide(self.spec, self.snap, self.now) == [], "deciding again gave new actions"
        return actions

    def apply(self, actions: Sequence[Action]) -> None:
        tasks = {t.task_id: t for t in self.snap.tasks}
        signals = list(self.snap.signals)
        status = self.snap.status
        keys = {(t.node_id, t.iteration, t.attempt) for t in tasks.values()}
        for action in actions:
            self.log.append(action)
            if isinstance(action, CreateTask):
                key = (action.node_id, action.iteration, action.attempt)
                assert key not in keys, f"attempt created twice: {key}"
                assert action.task_id not in tasks
                if action.state.active:
                    live = [
                        t
                        for t in tasks.values()
                        if t.node_id == action.node_id
                        and t.iteration == action.iteration
                        and t.state.active
                    ]
                    assert not live, f"two live attempts of {key[:2]}"
                keys.add(key)
                self.created.append(action)
                tasks[action.task_id] = TaskRecord(
                    task_id=action.task_id,
                    node_id=action.node_id,
                    iteration=action.iteration,
                    attempt=action.attempt,
                    kind=action.kind,
                    state=action.state,
                    output=action.output,
                    error=action.error,
                    created_at=self.now,
                    finished_at=None if action.state.active else self.now,
                )
            elif isinstance(action, ResolveTask):
                row = tasks[action.task_id]
                if row.state.active and row.attempt == action.attempt:
                    tasks[action.task_id] = replace(
                        row,
                        state=action.state,
                        output=action.output,
                        error=action.error,
                        finished_at=self.now,
                    )
            elif isinstance(action, MarkObserved):
                for tid in action.task_ids:
                    tasks[tid] = replace(tasks[tid], observed=True)
            elif isinstance(action, ConsumeSignal):
                before = len(signals)
                signals = [s for s in signals if s.signal_id != action.signal_id]
                assert len(signals) == before - 1, "consumed a signal that is not buffered"
            elif isinstance(action, FinishRun):
                assert status is RunStatus.RUNNING, "the run finished twice"
                status = action.status
                self.finishes.append(action)
            elif isinstance(action, ArmTimer):
                self.timers[action.timer_id] = action
            elif isinstance(action, EnqueueTask):
                self.enqueued[action.task_id] = action
            elif isinstance(action, StartChildRun):
                self.children.append(action)
            elif isinstance(action, CancelChildRun):
                self.cancelled_children.append(action.run_id)
            elif not isinstance(action, AppendEvent):  # history is ``self.log``
                assert_never(action)
        self.snap = replace(
            self.snap, tasks=tuple(tasks.values()), signals=tuple(signals), status=status
        )
        if status.finished:
            assert not self.live(), "the run finished with live work"

    # -- external facts ---------------------------------------------------------

    def live(self) -> list[TaskRecord]:
        return [t for t in self.snap.tasks if t.state.active]

    def row(self, node_id: str, iteration: int = 0) -> TaskRecord:
        rows = [t for t in self.snap.tasks if t.node_id == node_id and t.iteration == iteration]
        assert rows, f"no row for {node_id}[{iteration}]"
        return max(rows, key=lambda t: t.attempt)

    def rows(self, node_id: str) -> list[TaskRecord]:
        return [t for t in self.snap.tasks if t.node_id == node_id]

    def _set(
        self,
        task_id: uuid.UUID,
        state: TaskState,
        output: JsonValue = None,
        error: TaskError | None = None,
    ) -> None:
        finished = state is not TaskState.RUNNING
        tasks = []
        for t in self.snap.tasks:
            if t.task_id == task_id:
                assert t.state.active, f"{t.node_id} is not active"
                t = replace(
                    t,
                    state=state,
                    output=output,
                    error=error,
                    finished_at=self.now if finished else None,
                )
            tasks.append(t)
        self.snap = replace(self.snap, tasks=tuple(tasks))

    def complete(self, node_id: str, output: JsonValue = None, iteration: int = 0) -> None:
        self._set(self.row(node_id, iteration).task_id, state=TaskState.COMPLETED, output=output)

    def fail(
        self, node_id: str, iteration: int = 0, *, retryable: bool = True, type: str = "Boom"
    ) -> None:
        error = TaskError(type=type, message="it broke", retryable=retryable)
        self._set(self.row(node_id, iteration).task_id, state=TaskState.FAILED, error=error)

    def time_out(self, node_id: str, iteration: int = 0) -> None:
        self._set(self.row(node_id, iteration).task_id, state=TaskState.TIMED_OUT)

    def signal(self, name: str, payload: JsonValue = None) -> uuid.UUID:
        self._signal_seq += 1
        sid = uuid.UUID(int=self._signal_seq)
        sig = BufferedSignal(signal_id=sid, name=name, payload=payload, created_at=self.now)
        self.snap = replace(self.snap, signals=(*self.snap.signals, sig))
        return sid

    def cancel(self) -> None:
        self.snap = replace(self.snap, cancel_requested=True)

    def run_timed_out(self) -> None:
        """The RUN_TIMEOUT timer fired (what the timer loop records on the run)."""
        self.snap = replace(self.snap, timed_out=True)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
