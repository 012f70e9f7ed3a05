"""A decision's writes of other runs: a child run started in its parent's decision, and
a finished child's result reported to its parent (``Batch.write`` calls them after the
batch's one write statement).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.decider.model import FinishRun, StartChildRun, TaskError
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import definitions, runs, tasks
from legato.schema import RunStatus, Shards, TaskState


async def start_child(
    conn: AsyncConnection, shard: int, parent_id: uuid.UUID, action: StartChildRun
) -> None:
    """Start a child run of key ``shard`` (its parent's) inside the parent's decision (its
    id is the CHILD task's id), in the parent's trace."""
    version = await definitions.deployed_version(conn, action.workflow_name)
    if version is None:
        raise LookupError(
            f"child workflow {action.workflow_name!r} is not deployed (legato deploy --app ...)"
        )
    await runs.start_runs(
        conn,
        shard,
        [
            runs.NewRun(
                run_id=action.task_id,
                workflow_name=action.workflow_name,
                workflow_version=version,
                input=action.input,
                parent_run_id=parent_id,
            )
        ],
        "child started",
        children=True,
    )


async def complete_parents(
    conn: AsyncConnection, shards: Shards, finishes: Sequence[tuple[runs.RunRow, FinishRun]]
) -> None:
    """A finished child's result completes its parent's CHILD task, like a worker's report
    (in the parent's key: the child's, but for a child started before keys existed)."""
    reports: list[Report] = []
    for run, action in finishes:
        if run.parent_run_id is None:
            continue
        if action.status is RunStatus.SUCCEEDED:
            state, output, error = TaskState.COMPLETED, action.output, None
        else:
            state, output = TaskState.FAILED, None
            error = action.error or TaskError(
                type="ChildRunCancelled",
                message=f"child run {run.id} was {action.status.value}",
                retryable=False,
            )
        move = tasks.Transition(
            run_id=run.parent_run_id,
            task_id=run.id,
            attempt=None,
            state=state,
            output=output,
            error=error,
        )
        reports.append(Report(move, shards.of_run(run.parent_run_id)))
    await apply_reports(conn, reports, "child finished", layout=shards)
