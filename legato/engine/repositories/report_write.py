"""``report_write``: a worker's report flush as ONE statement that commits on its own
(single-node layout).

Why: ``engine.reports.apply_reports`` writes a flush in a transaction of three
statements (the runs' decide rows, the attempts' queue rows, the fenced task updates):
five round trips with its BEGIN and COMMIT before the runs' next decision can start,
a chain's every step. Here the same three writes are the parts of one statement, sent
on the asyncpg driver path outside any transaction (``transport.driver``, which the
caller passes in: ``precompiled.Autocommits``): one round trip, atomic on its own.

The lock order stays the transaction's (decide rows, then queue rows, then task rows:
``engine.reports``): each part waits for the part before to run to its end
(``params.after``). A part that waited on a row lock (a decision deciding the run
holds its decide row) reads with the statement's one snapshot, taken before the wait,
where the transaction's later statements took theirs after it: a row the decision
changed meanwhile is rechecked against its committed version by the part's own
conditions (EvalPlanQual: the fence of the task update, the queue row's key), and a
row it inserted is not one these parts look for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Select, select

from legato.engine.repositories import decide_queue, queue_leases, tasks
from legato.engine.repositories.params import after
from legato.engine.repositories.precompiled import Autocommits
from legato.schema import DecideQueue, TaskQueue, TaskState


async def write(
    driver: Autocommits,
    count: int,
    queue_keys: Sequence[tuple[int, str, uuid.UUID]],
    moves: Sequence[tasks.Transition],
    sources: Collection[TaskState],
    reason: str,
    on_connection: Callable[[Any], None] | None = None,
) -> dict[uuid.UUID, str | None]:
    """Upsert the decide rows of the runs of ``moves`` (key computed from each run id;
    ``count`` keys), delete the queue rows ``queue_keys`` (shard, queue, task_id) and free
    their concurrency slots, and apply the fenced ``moves``, all of which leave one of
    ``sources``: :func:`statement`, committed on its own (the worker's report flush on a
    single-node installation). Returns each applied move's task id and queue (a stale
    move is absent). ``on_connection`` gets the driver connection before the statement
    is sent (the flush's NOTIFY absorb)."""
    params = statement_params(count, queue_keys, moves, sources, reason)
    rows = await driver.execute(statement(), params, on_connection)
    return {row[0]: row[1] for row in rows}


def statement_params(
    count: int,
    queue_keys: Sequence[tuple[int, str, uuid.UUID]],
    moves: Sequence[tasks.Transition],
    sources: Collection[TaskState],
    reason: str,
) -> dict[str, Any]:
    """The parameters of :func:`statement` (those of its three parts)."""
    return {
        **decide_queue.enqueued_held_params(count, (m.run_id for m in moves), reason),
        **queue_leases.removal_held_params(queue_keys),
        **tasks.moved_held_params(count, moves, sources),
    }


@cache
def statement() -> Select[Any]:
    """The decide rows' upsert, then the queue rows' deletion (and their slots), then the
    fenced task updates, each part after the one before (``params.after``); returns the
    applied moves' task ids and queues. Served by the primary keys of ``decide_queue``
    (shard, run_id), ``task_queue`` (shard, queue, task_id) and the runs' ``tasks``
    partitions (shard, run_id, id); the slots by ``ix_concurrency_slots_holder``."""
    enqueued = (
        decide_queue.enqueued_held().returning(DecideQueue.run_id).cte("enqueued_decisions")
    )
    removed = (
        queue_leases.removal_held()
        .where(after(enqueued))
        .returning(TaskQueue.task_id)
        .cte("removed_queue_rows")
    )
    moved = tasks.moved(True).where(after(removed)).cte("moved_tasks")
    return select(moved.c.id, moved.c.queue)
