"""``task_queue``: the narrow, hash-partitioned queue workers claim from.

A row exists from enqueue until its attempt is reported (or cancelled); the lease
(owner + expiry) is the only thing that changes in between, and leased rows leave
the dequeue index. Every statement here works within one shard key (``shard = $k`` on
``task_queue`` and on every ``tasks`` / ``runs`` row it joins): a batch over several
keys is one statement per key, written by the caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

from pydantic import JsonValue
from sqlalchemy import (
    Insert,
    Integer,
    Interval,
    Select,
    SmallInteger,
    Text,
    bindparam,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement

from legato.engine.repositories import concurrency, routed
from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import (
    Unnest,
    fan_out,
    in_array,
    rows_of,
    shard_param,
    text_array,
    uuid_array,
)
from legato.schema import Runs, TaskQueue, Tasks, TaskState
from legato.schema.layout import routed as routes


class NewQueueRow(NamedTuple):
    """A ``task_queue`` row: an attempt workers of ``queue`` may claim from ``available_at``.

    Its key is the batch's (``enqueued_params(shard, rows)``): every row of a batch
    belongs to runs of that one key."""

    queue: str
    task_id: uuid.UUID
    run_id: uuid.UUID
    attempt: int
    task_name: str
    priority: int
    available_at: datetime


_NEW_ROWS = Unnest("new_queue_rows", NewQueueRow, TaskQueue)



async def enqueue(conn: AsyncConnection, shard: int, rows: Sequence[NewQueueRow]) -> None:
    """Make attempts of runs of key ``shard`` claimable: :func:`enqueued` on its own
    (tests and the claims stress bench seed queues with it; a decision runs it inside
    ``decisions.write``)."""
    if rows:
        await conn.execute(enqueued(), enqueued_params(shard, rows))


@cache
def enqueued() -> Insert:
    """One INSERT over ``unnest`` of array parameters for a batch of runs of one key
    (the scalar parameter ``shard``, the name every part of ``decisions.write`` shares);
    its statement trigger NOTIFYs the workers once, with the key as payload (even for no
    rows, so a decision that enqueues nothing leaves it out). Built once."""
    return _NEW_ROWS.insert(shard=shard_param())


@cache
def enqueued_routed() -> Insert:
    """:func:`enqueued` on a distributed install (``routed.anchored``: the queue rows
    joined to their runs of key ``:in_shard``, so Citus routes it to the key's node); a statement
    of ``decisions.write`` of its own there, bound by :func:`enqueued_params`."""
    return routed.anchored(_NEW_ROWS)


def enqueued_params(shard: int, rows: Sequence[NewQueueRow]) -> dict[str, Any]:
    return {**_NEW_ROWS.bind(rows), "in_shard": shard}


def _keyed(shard: int, keys: Sequence[tuple[str, uuid.UUID]]) -> tuple[ColumnElement[bool], ...]:
    """Rows of key ``shard`` by (queue, task_id): task ids are unique across queues, and
    the queue names prune the hash partitions; array parameters keep one statement
    shape."""
    return (
        TaskQueue.shard == bindparam("in_shard", shard, type_=SmallInteger()),
        in_array(TaskQueue.queue, text_array("queues", {queue for queue, _ in keys})),
        in_array(TaskQueue.task_id, uuid_array("task_ids", [task_id for _, task_id in keys])),
    )


@dataclass(frozen=True)
class Claimed:
    """A leased attempt, started, with what the worker needs to run it (and report it:
    its run's key ``shard``)."""

    shard: int
    queue: str
    task_id: uuid.UUID
    run_id: uuid.UUID
    attempt: int
    task_name: str
    node_id: str
    iteration: int
    input: JsonValue
    workflow_name: str
    # Since when the attempt waited to be claimed, and when the claim started it (both
    # server clock): the queue wait.
    available_at: datetime
    started_at: datetime
    trace_context: JsonValue  # the run starter's W3C trace context, or None


def claim_candidates() -> Select[str, uuid.UUID]:
    """The unleased, available rows of one key and queue a claim takes, best first
    (parameters ``in_shard``, ``in_queue``, ``task_names``, ``limit``); locked by the caller.
    ``ix_task_queue_dequeue`` (shard, queue, priority DESC, available_at)."""
    return (
        select(TaskQueue.queue, TaskQueue.task_id)
        .where(
            TaskQueue.shard == shard_param(),
            TaskQueue.queue == bindparam("in_queue", type_=Text()),
            in_array(TaskQueue.task_name, text_array("task_names")),
            TaskQueue.lease_expires_at.is_(None),
            TaskQueue.available_at <= func.now(),
        )
        .order_by(TaskQueue.priority.desc(), TaskQueue.available_at)
        .limit(bindparam("limit", type_=Integer()))
    )


# What a lease returns per attempt, in order: the worker's ``Claimed``.
_LeaseReturning = ReturningUpdate[
    int,
    str,
    uuid.UUID,
    uuid.UUID,
    int,
    str,
    str,
    int,
    JsonValue,
    str,
    datetime,
    datetime,
    JsonValue,
]


@cache
def _claim_statement() -> _LeaseReturning:
    return _lease_statement(locked(claim_candidates(), "candidates"))


def _lease_statement(chosen: Any, clock: Any = None) -> _LeaseReturning:
    """Lease the ``task_queue`` rows ``chosen`` (queue, task_id) of key ``in_shard`` to
    ``owner`` and mark their attempts RUNNING, returning what the worker needs to run
    them; ``clock`` (the transaction's ``now()`` unless given) stamps the lease and
    ``started_at``. Each table is filtered by the one key parameter."""
    owner = bindparam("owner", type_=Text())
    clock = func.now() if clock is None else clock
    leased = (
        update(TaskQueue.table)
        .where(
            TaskQueue.shard == shard_param(),
            TaskQueue.queue == chosen.c.queue,
            TaskQueue.task_id == chosen.c.task_id,
        )
        .values(
            lease_owner=owner,
            lease_expires_at=clock + bindparam("lease", type_=Interval()),
        )
        .returning(
            TaskQueue.shard,
            TaskQueue.queue,
            TaskQueue.task_id,
            TaskQueue.run_id,
            TaskQueue.attempt,
            TaskQueue.task_name,
            TaskQueue.available_at,
        )
        .cte("leased")
    )
    return (
        update(Tasks.table)
        .where(
            Tasks.shard == shard_param(),
            Tasks.run_id == leased.c.run_id,
            Tasks.id == leased.c.task_id,
            Tasks.attempt == leased.c.attempt,
            Tasks.state == TaskState.QUEUED,
            Runs.shard == shard_param(),
            Runs.id == Tasks.run_id,
        )
        .values(state=TaskState.RUNNING, started_at=clock, lease_owner=owner)
        .returning(
            leased.c.shard,
            leased.c.queue,
            leased.c.task_id,
            leased.c.run_id,
            leased.c.attempt,
            leased.c.task_name,
            Tasks.node_id,
            Tasks.iteration,
            Tasks.input,
            Runs.workflow_name,
            leased.c.available_at,
            Tasks.started_at,
            Runs.trace_context,
        )
    )


async def claim(
    conn: AsyncConnection,
    shard: int,
    queue: str,
    task_names: Sequence[str],
    owner: str,
    limit: int,
    lease: timedelta,
) -> list[Claimed]:
    """Lease up to ``limit`` available attempts of key ``shard`` in ``queue`` whose task
    this worker knows (``task_names``), and mark them RUNNING, in one statement (worker
    loop, once per dirty (key, queue)).

    Highest priority first, then oldest; ``FOR UPDATE SKIP LOCKED`` so workers never
    wait on each other; a worker never takes a task its code does not have (a rolling
    deploy leaves it to the workers that do). The task update is fenced on (attempt,
    QUEUED); a leased row whose attempt is no longer queued is not returned, and the
    sweeper drops it when its lease expires. Served by the partial index
    ``ix_task_queue_dequeue`` (shard, queue, priority DESC, available_at), then the
    primary keys of ``tasks`` and ``runs``. Built once.
    """
    result = await conn.execute(
        _claim_statement(),
        {
            "in_shard": shard,
            "in_queue": queue,
            "task_names": list(task_names),
            "owner": owner,
            "limit": limit,
            "lease": lease,
        },
    )
    return [Claimed(**row._asdict()) for row in result]


@dataclass(frozen=True)
class Candidate:
    """An available attempt locked by a limited claim, with the input its limit keys
    are computed from."""

    queue: str
    task_id: uuid.UUID
    task_name: str
    input: JsonValue


async def lock_candidates(
    conn: AsyncConnection, shard: int, queue: str, task_names: Sequence[str], limit: int
) -> list[Candidate]:
    """Lock up to ``limit`` available attempts of key ``shard`` in ``queue``, best first,
    with their inputs (worker's limited claim, first statement of its transaction): the
    caller decides which of them its limits admit and leases those with :func:`lease`;
    the rest are unlocked at commit, untouched. The same materialized ``FOR UPDATE SKIP
    LOCKED`` CTE as :func:`claim`; ``ix_task_queue_dequeue``, then the primary key of
    ``tasks``."""
    result = await conn.execute(
        _lock_candidates_statement(),
        {"in_shard": shard, "in_queue": queue, "task_names": list(task_names), "limit": limit},
    )
    return [Candidate(**row._asdict()) for row in result]


@cache
def _lock_candidates_statement() -> Any:
    candidates = locked(
        claim_candidates().add_columns(
            TaskQueue.run_id,
            TaskQueue.attempt,
            TaskQueue.task_name,
            TaskQueue.priority,
            TaskQueue.available_at,
        ),
        "candidates",
    )
    return (
        select(candidates.c.queue, candidates.c.task_id, candidates.c.task_name, Tasks.input)
        .join(
            Tasks.table,
            (Tasks.run_id == candidates.c.run_id) & (Tasks.id == candidates.c.task_id),
        )
        .where(
            Tasks.shard == shard_param(),
            Tasks.attempt == candidates.c.attempt,
            Tasks.state == TaskState.QUEUED,
        )
        .order_by(candidates.c.priority.desc(), candidates.c.available_at)
    )


async def lease(
    conn: AsyncConnection,
    shard: int,
    keys: Sequence[tuple[str, uuid.UUID]],
    owner: str,
    lease: timedelta,
) -> list[Claimed]:
    """Lease attempts of key ``shard`` this transaction locked with
    :func:`lock_candidates` and mark them RUNNING, as :func:`claim` does (worker's
    limited claim, after its limits admitted them). Primary keys; the rows are locked
    already, so nothing is rechecked."""
    return await _lease_given(conn, _lease_given_statement(), shard, keys, owner, lease)


async def hand_off(
    conn: AsyncConnection,
    shard: int,
    keys: Sequence[tuple[str, uuid.UUID]],
    owner: str,
    lease: timedelta,
) -> list[Claimed]:
    """Lease attempts of key ``shard`` this decision transaction enqueued to the worker
    of its own process and mark them RUNNING, writing what :func:`claim` would (decider
    loop's local hand-off, ``legato.engine.transport.handoff``). Primary keys of
    ``task_queue`` and ``tasks``.

    No lock is waited on and nothing can be rechecked (EvalPlanQual): both rows were
    inserted by this same transaction, invisible to every other one until it commits,
    so no concurrent update can meet them. Stamped with ``statement_timestamp()``, not
    the transaction's ``now()``, because the attempts' ``available_at`` is the decision's
    clock, read after the transaction began: the queue wait stays >= 0."""
    return await _lease_given(conn, _hand_off_statement(), shard, keys, owner, lease)


async def _lease_given(
    conn: AsyncConnection,
    statement: _LeaseReturning,
    shard: int,
    keys: Sequence[tuple[str, uuid.UUID]],
    owner: str,
    lease: timedelta,
) -> list[Claimed]:
    if not keys:
        return []
    result = await conn.execute(
        statement,
        {
            "in_shard": shard,
            "queues": [queue for queue, _ in keys],
            "task_ids": [task_id for _, task_id in keys],
            "owner": owner,
            "lease": lease,
        },
    )
    return [Claimed(**row._asdict()) for row in result]


def _given_rows() -> Any:
    return rows_of("chosen", queue=text_array("queues"), task_id=uuid_array("task_ids"))


@cache
def _lease_given_statement() -> _LeaseReturning:
    return _lease_statement(_given_rows())


@cache
def _hand_off_statement() -> _LeaseReturning:
    return _lease_statement(_given_rows(), func.statement_timestamp())


async def extend_leases(
    conn: AsyncConnection,
    shard: int,
    owner: str,
    keys: Sequence[tuple[str, uuid.UUID]],
    lease: timedelta,
) -> set[uuid.UUID]:
    """Extend the leases of a worker's in-flight attempts of key ``shard``, and the
    concurrency slots they hold, in one statement (worker's lease keeper, one per key).
    Returns the task ids still leased by ``owner``: a missing one was cancelled or timed
    out, and the worker cancels it. Primary key."""
    if not keys:
        return set()
    task_ids = uuid_array("slot_task_ids", [task_id for _, task_id in keys])
    slots = concurrency.extended(task_ids, bindparam("slot_owner", owner, type_=Text()), lease)
    result = await conn.execute(
        update(TaskQueue.table)
        .where(*_keyed(shard, keys), TaskQueue.lease_owner == owner)
        .values(lease_expires_at=func.now() + lease)
        .returning(TaskQueue.task_id)
        .add_cte(slots)
    )
    return set(result.scalars())


async def remove(
    conn: AsyncConnection,
    shard: int,
    keys: Sequence[tuple[str, uuid.UUID]],
    *,
    unleased: bool = False,
) -> None:
    """Delete finished attempts' rows of key ``shard`` and free their concurrency slots
    (worker reports, timer loop, sweeper, decider's cancellations; one statement per
    key); with ``unleased``, only rows no worker holds (which hold no slot). Primary
    key."""
    if not keys:
        return
    statement = delete(TaskQueue.table).where(*_keyed(shard, keys))
    if unleased:
        statement = statement.where(TaskQueue.lease_expires_at.is_(None))
    elif routes(conn):  # the slots (on the coordinator) by a statement of their own
        await concurrency.free(conn, _slot_holders(keys))
    else:
        statement = statement.add_cte(concurrency.freed(_slot_holders(keys)))
    await conn.execute(statement)


def _slot_holders(keys: Sequence[tuple[str, uuid.UUID]]) -> Any:
    return uuid_array("slot_task_ids", [task_id for _, task_id in keys])


async def release(
    conn: AsyncConnection, shard: int, owner: str, keys: Sequence[tuple[str, uuid.UUID]]
) -> None:
    """Drop ``owner``'s leases of key ``shard``, and free their concurrency slots, so
    another worker claims the attempts at once (worker graceful shutdown, one statement
    per key). Primary key."""
    if keys:
        statement = (
            update(TaskQueue.table)
            .where(*_keyed(shard, keys), TaskQueue.lease_owner == owner)
            .values(lease_owner=None, lease_expires_at=None)
        )
        if routes(conn):  # the slots (on the coordinator) by a statement of their own
            await concurrency.free(conn, _slot_holders(keys))
        else:
            statement = statement.add_cte(concurrency.freed(_slot_holders(keys)))
        await conn.execute(statement)


@dataclass(frozen=True)
class Expired:
    queue: str
    task_id: uuid.UUID
    run_id: uuid.UUID
    attempt: int


async def expired(conn: AsyncConnection, shard: int, limit: int) -> list[Expired]:
    """Leased rows of key ``shard`` whose lease has expired (lease sweeper, per held
    key): their worker is gone.

    Not locked here: the sweeper's report takes the run's decide row first (one lock
    order everywhere), and a second sweeper's report of the same row is fenced out.
    Served by the partial index ``ix_task_queue_leased`` (shard, lease_expires_at).
    """
    result = await conn.execute(
        select(TaskQueue.queue, TaskQueue.task_id, TaskQueue.run_id, TaskQueue.attempt)
        .where(
            TaskQueue.shard == bindparam("in_shard", shard, type_=SmallInteger()),
            TaskQueue.lease_expires_at.is_not(None),
            TaskQueue.lease_expires_at < func.now(),
        )
        .order_by(TaskQueue.lease_expires_at)
        .limit(limit)
    )
    return [Expired(*row) for row in result]


async def leased_by(conn: AsyncConnection, owner: str) -> int:
    """Fan-out across shard keys: how many rows ``owner`` still leases, in every key
    (tests of graceful shutdown, ``legato`` status; never on a hot path)."""
    result = await conn.execute(
        fan_out(
            select(func.count()).select_from(TaskQueue.table).where(TaskQueue.lease_owner == owner)
        )
    )
    return int(result.scalar_one())
