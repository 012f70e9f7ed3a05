"""Run a workflow in memory: the real decider, the real task functions, a fake clock.

```python
sim = Simulator(signup, Signup(email="ada@example.com"))
await sim.settle()                                   # create_user ran; now waiting
assert sim.waiting_for() == ["signup.confirmed"]
await sim.advance(timedelta(minutes=30))             # the event timeout, instantly
assert sim.status is RunStatus.FAILED
```

A worker picks every due task at once; timers (sleeps, event timeouts, task timeouts)
fire when the clock passes them, and a retry waits out its backoff on the clock. Every
step checks the decider's promises (deterministic, idempotent, one live attempt per
node, finish at most once and only when nothing is live) and raises ``AssertionError``
when one breaks.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeGuard, TypeVar

from pydantic import JsonValue

from legato.arguments import RunId, as_run_id, check_aware, check_flag, check_int_argument
from legato.context import TaskContext
from legato.engine.attempts import error_of
from legato.engine.decider.model import AppendEvent, CreateTask, TaskError, TaskRecord
from legato.engine.timer_semantics import report_for, timer_row
from legato.errors import InvalidArgument, InvalidInput, InvalidOutput, LegatoError
from legato.flow import InputValidationError, UnknownEventError, Workflow, WorkflowDefinition
from legato.flow.tasks import TaskDefinition, adapter_for
from legato.limits import MAX_DURATION, check_json, check_name
from legato.models import error_info, run_failed
from legato.schema import NodeKind, RunStatus, TaskState, TimerKind
from legato.testing.decider_sim import T0, Sim

# The latest start a simulation takes (``Simulator(now=...)``).
_LATEST_START = datetime.max.replace(tzinfo=UTC) - 2 * MAX_DURATION

In = TypeVar("In")
Out = TypeVar("Out")


class SimulationError(LegatoError):
    """A simulator call that does not fit the run's state (e.g. completing a node that
    is not running, or asking for the result of a run still running)."""


class Simulator(Generic[In, Out]):
    """One run of ``workflow`` in memory.

    With ``run_tasks=True`` (the default) due tasks run their real functions; with
    ``run_tasks=False`` they stay RUNNING until ``complete`` or ``fail`` says how they
    ended. Child workflow nodes always wait for ``complete``/``fail``.
    """

    def __init__(
        self,
        workflow: Workflow[In, Out],
        input: In | JsonValue,
        *,
        run_tasks: bool = True,
        now: datetime = T0,
        run_id: RunId | None = None,
    ) -> None:
        if not isinstance(workflow, WorkflowDefinition):
            raise InvalidArgument(
                f"Simulator() takes a Workflow object (made by @workflow), not {workflow!r}"
            )
        self.workflow = workflow
        self.run_tasks = check_flag("run_tasks", run_tasks)
        check_aware("now", now)
        # Timers are armed up to MAX_DURATION ahead: from a later start they would pass
        # the end of the calendar.
        if now > _LATEST_START:
            raise InvalidArgument(
                f"now={now.isoformat()} is too close to the year 9999: timers armed from it "
                f"could pass it; start at {_LATEST_START.date().isoformat()} or earlier"
            )
        given_id = None if run_id is None else as_run_id(run_id)
        try:
            payload = workflow.validate_input(input)
        except InputValidationError as error:
            raise InvalidInput(str(error)) from None
        self._sim = Sim(workflow.spec, payload, given_id)
        self._sim.now = now

    # -- reading ------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self._sim.now

    @property
    def run_id(self) -> uuid.UUID:
        return self._sim.snap.run_id

    @property
    def status(self) -> RunStatus:
        return self._sim.snap.status

    @property
    def tasks(self) -> list[TaskRecord]:
        """Every attempt of every node so far, in creation order."""
        return list(self._sim.snap.tasks)

    def task(self, node_id: str, iteration: int = 0) -> TaskRecord:
        """The latest attempt of a node (a map element by ``iteration``)."""
        rows = self._rows(node_id, iteration)
        latest = [t for t in rows if t.iteration == iteration]
        if not latest:
            known = sorted({t.node_id for t in self._sim.snap.tasks})
            raise SimulationError(
                f"node {node_id!r}[{iteration}] has not started; started: {known}"
            )
        return max(latest, key=lambda t: t.attempt)

    def attempts(self, node_id: str, iteration: int = 0) -> int:
        """How many attempts of a node were made."""
        return len([t for t in self._rows(node_id, iteration) if t.iteration == iteration])

    def _rows(self, node_id: str, iteration: int) -> list[TaskRecord]:
        check_name("node id", node_id, InvalidArgument)
        check_int_argument("iteration", iteration, 0)
        return list(self._sim.rows(node_id))

    def running(self) -> list[str]:
        """Node ids of the tasks and child runs in progress (not yet due ones included)."""
        return [t.node_id for t in self._sim.live() if t.kind in (NodeKind.TASK, NodeKind.CHILD)]

    def waiting_for(self) -> list[str]:
        """Event names the run is waiting for right now."""
        return sorted(
            {
                c.event_name
                for c in self._created().values()
                if c.event_name is not None and self._row(c.task_id).state.active
            }
        )

    def result(self) -> Out:
        """The run's output, typed; ``RunFailed`` if it failed, timed out or was cancelled."""
        finishes = self._sim.finishes
        if not finishes:
            raise SimulationError(
                f"run {self.run_id} is still running (running: {self.running()}, "
                f"waiting for: {self.waiting_for()}); settle, signal or advance it first"
            )
        finish = finishes[0]
        if finish.status is RunStatus.SUCCEEDED:
            return self.workflow.parse_output(finish.output)
        events = [action for action in self._sim.log if isinstance(action, AppendEvent)]
        raise run_failed(self.run_id, finish.status, error_info(finish.error), events)

    # -- driving ------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Decide, run due tasks and fire due timers until nothing changes at ``now``."""
        while True:
            self._sim.step()
            if self.status.finished:
                return
            if not (self._fire_due_timers() | await self._pick_due_tasks()):
                return

    async def advance(self, by: timedelta | float) -> None:
        """Move the clock forward, stopping at every timer and backoff on the way so
        each fires at its own time; settles at each stop."""
        target = self._after(by)
        await self.settle()
        while not self.status.finished:
            upcoming = self._next_due()
            if upcoming is None or upcoming > target:
                break
            self._sim.now = upcoming
            await self.settle()
        self._sim.now = max(self.now, target)
        await self.settle()

    def _after(self, by: object) -> datetime:
        """``now`` moved on by ``by``: a ``timedelta`` or a number of seconds, from zero
        to ``MAX_DURATION`` (``InvalidArgument`` otherwise)."""
        try:
            step = timedelta(seconds=by) if _is_seconds(by) and math.isfinite(by) else by
        except OverflowError:  # more seconds than a timedelta holds
            step = None
        if not isinstance(step, timedelta) or not timedelta(0) <= step <= MAX_DURATION:
            raise InvalidArgument(
                f"advance({by!r}): give a timedelta or a number of seconds from zero to "
                f"{MAX_DURATION.days} days, e.g. advance(timedelta(minutes=30))"
            )
        try:
            return self.now + step
        except OverflowError:
            raise InvalidArgument(
                f"advance({by!r}) from {self.now.isoformat()} passes the year 9999"
            ) from None

    async def signal(self, name: str, payload: Any = None) -> None:
        """Deliver a signal (validated like ``Client.signal``) and settle."""
        check_name("signal name", name, InvalidArgument)
        try:
            data = self.workflow.validate_event(name, payload)
        except (InputValidationError, UnknownEventError) as error:
            raise InvalidInput(str(error)) from None
        data = check_json(f"payload of signal {name!r}", data, InvalidInput)
        self._running_run("signal")
        self._sim.signal(name, data)
        await self.settle()

    async def cancel(self) -> None:
        """Ask the run to cancel, as ``Client.cancel``, and settle."""
        self._running_run("cancel")
        self._sim.cancel()
        await self.settle()

    async def complete(self, node_id: str, output: Any = None, iteration: int = 0) -> None:
        """End a running task (``run_tasks=False``) or child run with ``output`` and settle."""
        row = self._in_progress(node_id, iteration)
        value = self._output(node_id, self._definition(row), output)
        self._sim.complete(node_id, value, iteration)
        await self.settle()

    async def fail(
        self,
        node_id: str,
        error: BaseException | str = "it failed",
        *,
        retryable: bool = True,
        iteration: int = 0,
    ) -> None:
        """Fail a running task or child run and settle; a retryable failure of a task
        with retries left is retried after its backoff (``advance`` past it)."""
        if not isinstance(error, BaseException | str):
            raise InvalidArgument(
                f"fail(error={error!r}): give an exception or a message, e.g. "
                "ValueError('card declined')"
            )
        check_flag("retryable", retryable)
        self._in_progress(node_id, iteration)
        exc = error if isinstance(error, BaseException) else RuntimeError(error)
        self._finish(
            self.task(node_id, iteration), TaskState.FAILED, error=error_of(exc, retryable)
        )
        await self.settle()

    # -- the fake worker and timer loop -------------------------------------------------------

    @staticmethod
    def _output(node_id: str, definition: TaskDefinition | None, output: Any) -> JsonValue:
        """``output`` as the JSON a worker would store: validated into the task's return
        type and dumped (a child run's output as it is); ``InvalidOutput`` when it does
        not fit or is not storable JSON."""
        what = f"output of node {node_id!r}"
        try:
            value = (
                _json(output)
                if definition is None
                else definition.dump_result(
                    adapter_for(definition.return_type).validate_python(output)
                )
            )
        except ValueError as error:  # pydantic's validation and serialization errors
            raise InvalidOutput(f"{what} does not fit the task's return type: {error}") from None
        return check_json(what, value, InvalidOutput)

    def _created(self) -> dict[uuid.UUID, CreateTask]:
        return {c.task_id: c for c in self._sim.created}

    def _row(self, task_id: uuid.UUID) -> TaskRecord:
        return next(t for t in self._sim.snap.tasks if t.task_id == task_id)

    def _definition(self, row: TaskRecord) -> TaskDefinition | None:
        name = self._created()[row.task_id].task_name
        return None if name is None else self.workflow.tasks.get(name)

    def _finish(
        self,
        row: TaskRecord,
        state: TaskState,
        output: JsonValue = None,
        error: TaskError | None = None,
    ) -> None:
        self._sim._set(row.task_id, state=state, output=output, error=error)

    def _running_run(self, what: str) -> None:
        if self.status.finished:
            raise SimulationError(
                f"cannot {what}: run {self.run_id} has already {self.status.value}"
            )

    def _in_progress(self, node_id: str, iteration: int) -> TaskRecord:
        row = self.task(node_id, iteration)
        if row.kind not in (NodeKind.TASK, NodeKind.CHILD) or row.state not in (
            TaskState.RUNNING,
            TaskState.WAITING,
        ):
            raise SimulationError(
                f"node {node_id!r}[{iteration}] is {row.kind.value} {row.state.value}, not a "
                f"running task or child run (running: {self.running()})"
            )
        return row

    def _due_at(self, row: TaskRecord) -> datetime:
        enqueued = self._sim.enqueued.get(row.task_id)
        return self.now if enqueued is None else enqueued.available_at

    async def _pick_due_tasks(self) -> bool:
        """Claim every due QUEUED task at once; with ``run_tasks``, run it to its end."""
        picked = False
        for row in self._sim.live():
            if row.kind is not NodeKind.TASK or row.state is not TaskState.QUEUED:
                continue
            if self._due_at(row) > self.now:
                continue
            picked = True
            self._sim._set(row.task_id, state=TaskState.RUNNING)
            if self.run_tasks:
                await self._execute(self._row(row.task_id))
        return picked

    async def _execute(self, row: TaskRecord) -> None:
        definition = self._definition(row)
        assert definition is not None, f"task node {row.node_id!r} names no task"
        ctx = TaskContext(
            run_id=self.run_id,
            task_id=row.task_id,
            workflow=self.workflow.name,
            node_id=row.node_id,
            iteration=row.iteration,
            attempt=row.attempt,
        )
        try:
            output = await definition.invoke(ctx, self._created()[row.task_id].input)
        except Exception as exc:
            self._finish(row, TaskState.FAILED, error=error_of(exc, definition.is_retryable(exc)))
        else:
            self._finish(row, TaskState.COMPLETED, output=output)

    def _fire_due_timers(self) -> bool:
        """Fire due timers through the timer loop's own fenced transitions."""
        fired = False
        for timer_id, arm in sorted(self._sim.timers.items(), key=lambda item: item[1].fire_at):
            if arm.fire_at > self.now:
                continue
            del self._sim.timers[timer_id]
            if arm.kind is TimerKind.RUN_TIMEOUT:
                self._sim.run_timed_out()
                fired = True
                continue
            move = report_for(timer_row(self.run_id, arm), 0).move  # no keys in memory
            row = self._row(arm.task_id)
            if row.attempt == move.attempt and row.state in move.from_states:
                self._finish(row, move.state, error=move.error)
                fired = True
        return fired

    def _next_due(self) -> datetime | None:
        times = [arm.fire_at for arm in self._sim.timers.values()]
        times += [
            self._due_at(row)
            for row in self._sim.live()
            if row.kind is NodeKind.TASK and row.state is TaskState.QUEUED
        ]
        later = [t for t in times if t > self.now]
        return min(later, default=None)


def _is_seconds(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json(value: Any) -> JsonValue:
    dumped: JsonValue = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return dumped
