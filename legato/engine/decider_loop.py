"""The decider loop: claim runs from decide_queue, decide each under its row lock,
apply the pure decider's actions, NOTIFY the queues that got work.

Several runs are decided per transaction, each inside a savepoint, so one bad run
(a bug, a deadlock with a parent/child decision) cannot sink the batch: its
decide row stays, postponed, and the others commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.decider.decide import decide
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
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
)
from legato.engine.loops import Loop, Wakeups
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import (
    decide_queue,
    definitions,
    notify,
    run_events,
    runs,
    signals,
    task_queue,
    tasks,
    timers,
)
from legato.flow.spec import WorkflowSpec
from legato.schema import RunStatus, TaskState

log = logging.getLogger("legato.decider")


class SpecCache:
    """Specs by (name, version): a version never changes once stored."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, int], WorkflowSpec] = {}

    async def get(self, conn: AsyncConnection, name: str, version: int) -> WorkflowSpec:
        key = (name, version)
        spec = self._specs.get(key)
        if spec is None:
            raw = await definitions.load_spec(conn, name, version)
            if raw is None:
                raise LookupError(f"workflow {name!r} version {version} is not stored")
            spec = WorkflowSpec.model_validate(raw)
            self._specs[key] = spec
        return spec


@dataclass
class Applied:
    """What a decision changed that matters after commit."""

    queues: set[str] = field(default_factory=set)
    finished: bool = False


class DecisionAborted(Exception):
    """A fenced write of a decision matched nothing: the snapshot was wrong."""


async def decide_run(
    conn: AsyncConnection, run_id: uuid.UUID, specs: SpecCache, now: datetime
) -> Applied:
    """Lock, load, decide and apply one run, in the caller's transaction."""
    run = await runs.lock(conn, run_id)
    if run is None or run.status is not RunStatus.RUNNING:
        return Applied()
    spec = await specs.get(conn, run.workflow_name, run.workflow_version)
    rows = await tasks.load(conn, run_id)
    pending = await signals.pending(conn, run_id)
    snapshot = RunSnapshot(
        run_id=run_id,
        status=run.status,
        input=run.input,
        cancel_requested=run.cancel_requested,
        tasks=tuple(row.record() for row in rows),
        signals=tuple(pending),
    )
    actions = decide(spec, snapshot, now)
    return await apply_actions(conn, run, actions, now)


async def apply_actions(
    conn: AsyncConnection, run: runs.RunRow, actions: Sequence[Action], now: datetime
) -> Applied:
    """Write a decision: every action of one run, in one transaction (savepoint)."""
    applied = Applied()
    creates = [a for a in actions if isinstance(a, CreateTask)]
    enqueues = [a for a in actions if isinstance(a, EnqueueTask)]
    await tasks.insert_many(conn, run.id, creates, now)
    await task_queue.enqueue(conn, run.id, enqueues)
    await timers.arm(conn, run.id, [a for a in actions if isinstance(a, ArmTimer)], now)
    await signals.consume(conn, run.id, [a for a in actions if isinstance(a, ConsumeSignal)])
    applied.queues.update(item.queue for item in enqueues)
    for action in actions:
        if isinstance(action, ResolveTask):
            await _resolve(conn, run.id, action)
    observed = [task_id for a in actions if isinstance(a, MarkObserved) for task_id in a.task_ids]
    await tasks.mark_observed(conn, run.id, observed)
    for action in actions:
        if isinstance(action, StartChildRun):
            await start_child(conn, run.id, action)
        elif isinstance(action, CancelChildRun) and await runs.request_cancel(
            conn, action.run_id
        ):
            await decide_queue.enqueue(conn, [action.run_id], "parent cancelled")
    await run_events.append(conn, run.id, [a for a in actions if isinstance(a, AppendEvent)])
    for action in actions:
        if isinstance(action, FinishRun):
            await _finish(conn, run, action)
            applied.finished = True
    return applied


async def _resolve(conn: AsyncConnection, run_id: uuid.UUID, action: ResolveTask) -> None:
    queue = await tasks.transition(
        conn,
        tasks.Transition(
            run_id=run_id,
            task_id=action.task_id,
            attempt=action.attempt,
            state=action.state,
            output=action.output,
            error=action.error,
        ),
    )
    if queue is False:
        raise DecisionAborted(f"task {action.task_id} of run {run_id} was not active")
    if isinstance(queue, str):
        await task_queue.remove(conn, [(queue, action.task_id)])


async def start_child(conn: AsyncConnection, parent_id: uuid.UUID, action: StartChildRun) -> None:
    """Start a child run inside the parent's decision (its id is the CHILD task's id)."""
    version = await definitions.deployed_version(conn, action.workflow_name)
    if version is None:
        raise LookupError(
            f"child workflow {action.workflow_name!r} is not deployed (legato deploy --app ...)"
        )
    await runs.insert_runs(
        conn,
        [runs.NewRun(action.task_id, action.workflow_name, version, action.input, parent_id)],
    )
    await run_events.append_first(
        conn,
        [action.task_id],
        AppendEvent(type="run_started", data={"parent_run_id": str(parent_id)}),
    )
    await decide_queue.enqueue(conn, [action.task_id], "child started")


async def _finish(conn: AsyncConnection, run: runs.RunRow, action: FinishRun) -> None:
    if not await runs.finish(conn, run.id, action.status, action.output, action.error):
        raise DecisionAborted(f"run {run.id} was already finished")
    if run.parent_run_id is None:
        return
    # The child's result completes the parent's CHILD task, like a worker's report.
    if action.status is RunStatus.SUCCEEDED:
        move = tasks.Transition(
            run_id=run.parent_run_id,
            task_id=run.id,
            attempt=None,
            state=TaskState.COMPLETED,
            output=action.output,
        )
    else:
        error = action.error or TaskError(
            type="ChildRunCancelled",
            message=f"child run {run.id} was {action.status.value}",
            retryable=False,
        )
        move = tasks.Transition(
            run_id=run.parent_run_id,
            task_id=run.id,
            attempt=None,
            state=TaskState.FAILED,
            error=error,
        )
    await apply_reports(conn, [Report(move)], "child finished")


class DeciderLoop(Loop):
    """Claims batches of runs to decide; decides each under its row lock."""

    name = "decider"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        wakeups: Wakeups | None = None,
        batch_size: int = 50,
        poll_interval: float = 1.0,
        retry_delay: timedelta = timedelta(seconds=2),
    ) -> None:
        schema = engine.get_execution_options()["schema_translate_map"]["legato"]
        super().__init__(
            poll_interval=poll_interval, wakeups=wakeups, channel=notify.decide_channel(schema)
        )
        self.engine = engine
        self.schema = schema
        self.batch_size = batch_size
        self.retry_delay = retry_delay
        self.specs = SpecCache()
        self.decided = 0

    async def tick(self) -> bool:
        async with self.engine.begin() as conn:
            claimed = await decide_queue.claim(conn, self.batch_size)
            if not claimed:
                return False
            now = datetime.now(UTC)
            done: list[uuid.UUID] = []
            queues: set[str] = set()
            for run_id in sorted(claimed):
                try:
                    async with conn.begin_nested():
                        applied = await decide_run(conn, run_id, self.specs, now)
                except Exception as error:
                    log.exception("deciding run %s failed; retrying later", run_id)
                    await decide_queue.postpone(
                        conn, run_id, now + self.retry_delay, f"decision failed: {error}"[:500]
                    )
                    continue
                done.append(run_id)
                queues |= applied.queues
            await decide_queue.remove(conn, done)
            if queues:
                await notify.send(conn, notify.tasks_channel(self.schema), queues)
        self.decided += len(done)
        return len(claimed) >= self.batch_size
