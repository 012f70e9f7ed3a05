"""Rerunning a finished run from one of its nodes: a new run, linked to the original
(``runs.rerun_of``, its ``rerun_started`` event), that reuses the original's completed
outputs for every node the chosen one does not lead to and runs that node and what
follows again (the plan: ``legato.rerun_plan``).

The rerun is written in one transaction of the original's shard key, under the
original's row lock: its ``runs`` row, the completed rows it reuses (observed, so the
decider never schedules their bodies), its first history events (``run_started``,
``rerun_started``, one ``node_reused`` per reused node), its deadline timer and its
``run.started`` webhook event if it has them, and its decide_queue row.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import JsonValue, TypeAdapter, ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine.decider.model import child_run_id_for, task_id_for, timer_id_for
from legato.engine.repositories import (
    decide_queue,
    definitions,
    outbox,
    reruns,
    run_events,
    runs,
    tasks,
    timers,
)
from legato.enums import NodeKind, RunStatus, TaskState, TimerKind
from legato.errors import InvalidArgument, RunNotFound, RunStillRunning, UnknownWorkflow
from legato.flow import App
from legato.flow.spec import WorkflowSpec
from legato.flow.tasks import adapter_for
from legato.rerun_plan import RerunPlan, Reused, StoredAttempt, plan_rerun
from legato.schema import Shards
from legato.schema.types import uuid7
from legato.webhook_signature import EventType

Version = Literal["deployed", "original"]
VERSIONS: tuple[Version, ...] = ("deployed", "original")


def check_version(version: object) -> Version:
    if version == "deployed":
        return "deployed"
    if version == "original":
        return "original"
    raise InvalidArgument(
        f"version={version!r} must be 'deployed' (the workflow's deployed version: how a "
        "fix reaches runs that failed on a bug) or 'original' (the version the run ran)"
    )


@dataclass(frozen=True)
class Rerun:
    """A rerun just started: its id, the run it reruns and what it reuses."""

    run_id: uuid.UUID
    rerun_of: uuid.UUID
    workflow_version: int
    from_node: str
    reused_nodes: tuple[str, ...]


@dataclass
class Specs:
    """Spec versions and deployed versions read once per rerun or bulk action."""

    app: App | None = None
    _specs: dict[tuple[str, int], WorkflowSpec] = field(default_factory=dict)
    _deployed: dict[str, int] = field(default_factory=dict)
    _outputs: dict[str, TypeAdapter[object] | None] = field(default_factory=dict)

    async def spec(self, conn: AsyncConnection, name: str, version: int) -> WorkflowSpec:
        key = (name, version)
        if key not in self._specs:
            raw = await definitions.load_spec(conn, name, version)
            if raw is None:
                raise UnknownWorkflow(f"workflow {name!r} has no stored version {version}")
            self._specs[key] = WorkflowSpec.model_validate(raw)
        return self._specs[key]

    async def target(
        self, conn: AsyncConnection, run: runs.RunRow, version: Version
    ) -> tuple[int, str]:
        """The version a rerun runs and how errors name it."""
        if version == "original":
            return run.workflow_version, f"version {run.workflow_version} (the original)"
        name = run.workflow_name
        if name not in self._deployed:
            deployed = await definitions.deployed_version(conn, name)
            if deployed is None:
                raise UnknownWorkflow(
                    f"workflow {name!r} has no deployed version: deploy it (legato deploy) "
                    "or rerun on the original version (version='original', --version original)"
                )
            self._deployed[name] = deployed
        return self._deployed[name], f"version {self._deployed[name]} (deployed)"

    def output_refused(self, task_name: str, output: JsonValue) -> str | None:
        """Why the app's task ``task_name`` would not return ``output``, or None (also
        when the client has no app, or the app lacks the task)."""
        if task_name not in self._outputs:
            task = None if self.app is None else self.app.tasks.get(task_name)
            self._outputs[task_name] = None if task is None else adapter_for(task.return_type)
        adapter = self._outputs[task_name]
        if adapter is None:
            return None
        try:
            adapter.validate_python(output)
        except ValidationError as error:
            return str(error).splitlines()[0] + ": " + error.errors()[0]["msg"]
        return None


async def rerun(
    engine: AsyncEngine,
    shards: Shards,
    specs: Specs,
    run_id: uuid.UUID,
    *,
    from_node: str | None,
    version: Version,
    unless_rerun: bool = False,
) -> Rerun | None:
    """Start a rerun of ``run_id`` in one transaction; None when ``unless_rerun`` and
    the run already has a rerun (the bulk rerun). Raises ``RunNotFound``,
    ``RunStillRunning``, ``UnknownNode``, ``RerunIncompatible`` or ``UnknownWorkflow``."""
    shard = shards.of_run(run_id)
    async with engine.begin() as conn:
        original = await reruns.lock_original(conn, shard, run_id)
        if original is None:
            raise RunNotFound(f"no run {run_id}")
        if original.status is RunStatus.RUNNING:
            raise RunStillRunning(
                f"run {run_id} is still running: cancel it (legato runs cancel {run_id}) "
                "or wait for it to finish, then rerun it"
            )
        if unless_rerun and await reruns.has_rerun(conn, shard, run_id):
            return None
        source = await specs.spec(conn, original.workflow_name, original.workflow_version)
        version_number, label = await specs.target(conn, original, version)
        target = await specs.spec(conn, original.workflow_name, version_number)
        rows = (await tasks.load_many(conn, shard, [run_id]))[run_id]
        plan = plan_rerun(
            source,
            target,
            original.status,
            [
                StoredAttempt(r.node_id, r.iteration, r.attempt, r.kind, r.state, r.output)
                for r in rows
            ],
            from_node=from_node,
            run=str(run_id),
            version=label,
            check_output=specs.output_refused
            if version_number != original.workflow_version
            else None,
        )
        new_id = shards.new_run_id(shard)
        now = datetime.now(UTC)
        await reruns.insert_rerun(
            conn,
            shard,
            reruns.NewRerun(new_id, run_id, original.workflow_name, version_number, original.input),
            [_seeded(new_id, reused, now) for reused in plan.reused],
            _history(new_id, run_id, version_number, plan),
        )
        if target.execution_timeout is not None:
            due = now + timedelta(seconds=target.execution_timeout)
            timer_id = timer_id_for(new_id, TimerKind.RUN_TIMEOUT)
            deadline = timers.DueTimer(due, timer_id, new_id, new_id, 0, TimerKind.RUN_TIMEOUT, due)
            await timers.arm(conn, shard, [deadline], now)
        started = outbox.Event(uuid7(), new_id, EventType.STARTED, {"status": "RUNNING"})
        await outbox.publish(conn, shard, [started])
        await decide_queue.enqueue(conn, shard, [new_id], "rerun")
    return Rerun(new_id, run_id, version_number, plan.from_node, plan.reused_nodes)


def _seeded(run_id: uuid.UUID, reused: Reused, now: datetime) -> tasks.NewTask:
    """A reused completion as the rerun's own first attempt: observed, so the decider
    writes no history for it and takes it as done."""
    id_for = child_run_id_for if reused.kind is NodeKind.CHILD else task_id_for
    return tasks.NewTask(
        run_id=run_id,
        id=id_for(run_id, reused.node_id, reused.iteration, 1),
        node_id=reused.node_id,
        iteration=reused.iteration,
        attempt=1,
        kind=reused.kind,
        state=TaskState.COMPLETED,
        task_name=reused.task_name,
        queue=reused.queue,
        input=None,
        output=reused.output,
        error=None,
        event_name=reused.event_name,
        created_at=now,
        available_at=None,
        finished_at=now,
        observed=True,
    )


def _history(
    run_id: uuid.UUID, original: uuid.UUID, version: int, plan: RerunPlan
) -> Sequence[run_events.NewEvent]:
    started: JsonValue = {
        "rerun_of": str(original),
        "from_node": plan.from_node,
        "version": version,
        "rerun": list(plan.rerun),
        "reused": list(plan.reused_nodes),
    }
    events = [
        run_events.NewEvent(run_id, 1, "run_started", None, None, None, None),
        run_events.NewEvent(run_id, 2, "rerun_started", None, None, None, started),
    ]
    for node_id in plan.reused_nodes:
        rows = [r for r in plan.reused if r.node_id == node_id]
        data: dict[str, JsonValue] = {"rerun_of": str(original)}
        if rows[0].kind is NodeKind.MAP:
            data["elements"] = len(rows)
        else:
            data["output"] = rows[0].output
        events.append(
            run_events.NewEvent(run_id, len(events) + 1, "node_reused", node_id, None, None, data)
        )
    return events
