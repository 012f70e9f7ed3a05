"""Rows written straight into the tables, for tests that drive one loop or one statement
with nothing else running: a workflow's definition, RUNNING runs of chosen shard keys,
and attempts of the task ``work`` with their queue rows."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import task_queue
from legato.schema import (
    NodeKind,
    Runs,
    RunStatus,
    Shards,
    TaskQueue,
    Tasks,
    TaskState,
    WorkflowDefinitions,
    uuid7,
)


async def seed_runs(
    conn: AsyncConnection, shards: Shards, keys: Sequence[int], workflow: str
) -> list[uuid.UUID]:
    """``workflow``'s definition and one RUNNING run per entry of ``keys`` (a key may
    repeat); the run ids in the order of ``keys``."""
    await conn.execute(
        insert(WorkflowDefinitions.table).values(
            name=workflow, version=1, spec={"nodes": []}, spec_hash=workflow
        )
    )
    run_ids = [shards.new_run_id(key) for key in keys]
    await conn.execute(
        insert(Runs.table),
        [
            {
                "id": run_id,
                "shard": key,
                "workflow_name": workflow,
                "workflow_version": 1,
                "status": RunStatus.RUNNING,
            }
            for key, run_id in zip(keys, run_ids, strict=True)
        ],
    )
    return run_ids


async def seed_attempts(
    conn: AsyncConnection,
    runs: Sequence[tuple[int, uuid.UUID]],
    inputs: Sequence[Any],
    *,
    priorities: Sequence[int] | None = None,
    leased_to: str | None = None,
) -> list[uuid.UUID]:
    """One attempt of ``work`` on the queue ``default`` per ``(key, run id)`` of ``runs``,
    with ``inputs`` and ``priorities`` (0 by default) in the same order, and its queue
    row, available since a second ago. Attempts are QUEUED, or RUNNING with their queue
    rows leased to ``leased_to`` for five minutes; their ids in the order of ``runs``."""
    task_ids = [uuid7() for _ in runs]
    ranks = priorities or [0] * len(runs)
    available_at = datetime.now(UTC) - timedelta(seconds=1)
    await conn.execute(
        insert(Tasks.table),
        [
            {
                "shard": key,
                "run_id": run_id,
                "id": task_id,
                "node_id": "work",
                "kind": NodeKind.TASK,
                "state": TaskState.QUEUED if leased_to is None else TaskState.RUNNING,
                "task_name": "work",
                "queue": "default",
                "input": input_,
                "lease_owner": leased_to,
            }
            for (key, run_id), task_id, input_ in zip(runs, task_ids, inputs, strict=True)
        ],
    )
    for (key, run_id), task_id, priority in zip(runs, task_ids, ranks, strict=True):
        row = task_queue.NewQueueRow("default", task_id, run_id, 1, "work", priority, available_at)
        await task_queue.enqueue(conn, key, [row])
    if leased_to is not None:
        await conn.execute(
            update(TaskQueue.table)
            .where(TaskQueue.task_id.in_(task_ids))
            .values(lease_owner=leased_to, lease_expires_at=available_at + timedelta(minutes=5))
        )
    return task_ids
