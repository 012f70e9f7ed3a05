"""``task_queue``: the narrow, hash-partitioned queue workers claim from.

A row exists from enqueue until its attempt is reported (or cancelled); the lease
(owner + expiry) is the only thing that changes in between, and leased rows leave
the dequeue index. Every statement here works within one shard key (``shard = $k`` on
``task_queue`` and on every ``tasks`` / ``runs`` row it joins): a batch over several
keys is one statement per key, written by the caller — but for the ``*_held`` variants
of a single-node installation, which span the keys a process holds in one statement,
each row matched in its own run's key (docs/design.md, "The statement layout"). The
leases after the claim are ``queue_leases``.
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
    Uuid,
    any_,
    bindparam,
    case,
    cast,
    func,
    null,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement

from legato.engine.repositories import routed
from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import (
    Unnest,
    from_floor,
    in_array,
    rows_of,
    run_shard,
    shard_param,
    shards_param,
    text_array,
    uuid_array,
)
from legato.schema import Runs, TaskQueue, Tasks, TaskState


class NewQueueRow(NamedTuple):
    """A ``task_queue`` row: an attempt workers of ``queue`` may claim from ``available_at``.

    Its key is the batch's (``enqueued_params(shard, rows)``): every row of a batch
    belongs to runs of that one key. ``fair_key``/``fair_weight``: set on a fair queue's
    rows only (``legato.engine.fair_keys``). ``lease_owner``: a row handed to the
    decider's own worker, inserted leased to it (``legato.engine.transport.handoff``):
    it never enters the claim's index, and its lease runs from the server's clock."""

    queue: str
    task_id: uuid.UUID
    run_id: uuid.UUID
    attempt: int
    task_name: str
    priority: int
    available_at: datetime
    fair_key: str | None = None
    fair_weight: int | None = None
    lease_owner: str | None = None


_NEW_ROWS = Unnest("new_queue_rows", NewQueueRow, TaskQueue)
HANDED_LEASE = "handed_lease"  # the lease of the rows inserted leased (an interval)


def _handed_lease() -> ColumnElement[Any]:
    """A handed row's lease expiry, from the server's clock as a claim's is (the
    decision's own clock stamps only when the attempt became available and started)."""
    return case(
        (
            _NEW_ROWS.value("lease_owner").is_not(None),
            func.statement_timestamp() + bindparam(HANDED_LEASE, type_=Interval()),
        ),
        else_=null(),
    )


async def enqueue(conn: AsyncConnection, shard: int, rows: Sequence[NewQueueRow]) -> None:
    """Make attempts of runs of key ``shard`` claimable: :func:`enqueued` on its own
    (tests and the claims stress bench seed queues with it; a decision runs it inside
    ``decisions.write``)."""
    if rows:
        await conn.execute(enqueued(), enqueued_params(shard, rows))


@cache
def enqueued(spanning: bool = False) -> Insert:
    """One INSERT over ``unnest`` of array parameters for a batch of runs of one key
    (the scalar parameter ``shard``, the name every part of ``decisions.write`` shares);
    its statement trigger NOTIFYs the workers once, with the key as payload (even for no
    rows, so a decision that enqueues nothing leaves it out). Built once."""
    return _NEW_ROWS.insert(
        shard=run_shard(_NEW_ROWS.value("run_id")) if spanning else shard_param(),
        lease_expires_at=_handed_lease(),
    )


@cache
def enqueued_routed() -> Insert:
    """:func:`enqueued` on a distributed install (``routed.anchored``: the queue rows
    joined to their runs of key ``:in_shard``, so Citus routes it to the key's node); a statement
    of ``decisions.write`` of its own there, bound by :func:`enqueued_params`."""
    return routed.anchored(_NEW_ROWS, lease_expires_at=_handed_lease())


def enqueued_params(
    shard: int, rows: Sequence[NewQueueRow], lease: timedelta | None = None
) -> dict[str, Any]:
    """The parameters of :func:`enqueued`; ``lease``: of the rows with a ``lease_owner``."""
    return {**_NEW_ROWS.bind(rows), "in_shard": shard, HANDED_LEASE: lease}


def queue_keys(
    shard: int | None, keys: Sequence[tuple[str, uuid.UUID]]
) -> tuple[ColumnElement[bool], ...]:
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


def claim_candidates(spanning: bool = False) -> Select[str, uuid.UUID]:
    """The unleased, available rows of one key and queue a claim takes, best first
    (parameters ``in_shard``, ``in_queue``, ``task_names``, ``limit``), from the optional
    floor ``since`` on; locked by the caller. ``spanning``: of any key in ``in_shards``
    instead, oldest first across them. ``ix_task_queue_dequeue`` (shard, queue, priority
    DESC, available_at): the floor is an index condition, so the entries below it (the
    rows claimed while a snapshot is held, not yet vacuumable) are skipped on the index
    alone, without a visit to the table for each."""
    key = (
        in_array(TaskQueue.shard, shards_param())
        if spanning
        else (TaskQueue.shard == shard_param())
    )
    return (
        select(TaskQueue.queue, TaskQueue.task_id)
        .where(
            key,
            TaskQueue.queue == bindparam("in_queue", type_=Text()),
            in_array(TaskQueue.task_name, text_array("task_names")),
            TaskQueue.lease_expires_at.is_(None),
            TaskQueue.available_at >= from_floor(),
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
def _claim_statement(spanning: bool) -> _LeaseReturning:
    candidates = claim_candidates(spanning)
    if spanning:
        candidates = candidates.add_columns(TaskQueue.shard)
    return _lease_statement(locked(candidates, "candidates"), spanning=spanning)


def _lease_statement(chosen: Any, spanning: bool = False) -> _LeaseReturning:
    """Lease the ``task_queue`` rows ``chosen`` (queue, task_id) of key ``in_shard`` to
    ``owner`` and mark their attempts RUNNING, returning what the worker needs to run
    them; the transaction's ``now()`` stamps the lease and ``started_at``. Each table is
    filtered by the one key parameter, or, ``spanning``, by the key of each chosen row
    (``chosen.c.shard``).

    Spanning (one PostgreSQL), the queue rows are found through the primary key by the
    keys, the queue and the array of the chosen task ids, not by a join with ``chosen``:
    a join is planned from the queue's statistics, and once ``task_queue`` had been
    analyzed while empty the planner scanned the partition's whole primary key for each
    chosen row (docs/design.md, "Plans that do not trust a queue's statistics")."""
    owner = bindparam("owner", type_=Text())
    clock = func.now()
    found = (
        (
            in_array(TaskQueue.shard, shards_param()),
            TaskQueue.queue == bindparam("in_queue", type_=Text()),
            TaskQueue.task_id == any_(_array_of(chosen.c.task_id)),
        )
        if spanning
        else (
            TaskQueue.shard == shard_param(),
            TaskQueue.queue == chosen.c.queue,
            TaskQueue.task_id == chosen.c.task_id,
        )
    )
    leased = (
        update(TaskQueue.table)
        .where(*found)
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
    key = leased.c.shard if spanning else shard_param()
    return (
        update(Tasks.table)
        .where(
            Tasks.shard == key,
            Tasks.run_id == leased.c.run_id,
            Tasks.id == leased.c.task_id,
            Tasks.attempt == leased.c.attempt,
            Tasks.state == TaskState.QUEUED,
            Runs.shard == key,
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


def _array_of(ids: ColumnElement[uuid.UUID]) -> ColumnElement[Any]:
    """``ids``' values as one ``uuid[]`` (an InitPlan; NULL when there are none): cast, so
    ``= ANY`` reads it as an array, not as a subquery's rows."""
    return cast(select(func.array_agg(ids)).scalar_subquery(), ARRAY(Uuid()))


async def claim(
    conn: AsyncConnection,
    shard: int,
    queue: str,
    task_names: Sequence[str],
    owner: str,
    limit: int,
    lease: timedelta,
    since: datetime | None = None,
) -> list[Claimed]:
    """Lease up to ``limit`` available attempts of key ``shard`` in ``queue`` whose task
    this worker knows (``task_names``), and mark them RUNNING, in one statement (worker
    loop, once per dirty (key, queue)); from ``since`` on when it is given (the worker's
    floor, docs/design.md "The worker's floor").

    Highest priority first, then oldest; ``FOR UPDATE SKIP LOCKED`` so workers never
    wait on each other; a worker never takes a task its code does not have (a rolling
    deploy leaves it to the workers that do). The task update is fenced on (attempt,
    QUEUED); a leased row whose attempt is no longer queued is not returned, and the
    sweeper drops it when its lease expires. Served by the partial index
    ``ix_task_queue_dequeue`` (shard, queue, priority DESC, available_at), then the
    primary keys of ``tasks`` and ``runs``. Built once.
    """
    result = await conn.execute(
        _claim_statement(False),
        {
            "in_shard": shard,
            "in_queue": queue,
            "task_names": list(task_names),
            "owner": owner,
            "limit": limit,
            "lease": lease,
            "since": since,
        },
    )
    return [Claimed(**row._asdict()) for row in result]


async def claim_held(
    conn: AsyncConnection,
    keys: Sequence[int],
    queue: str,
    task_names: Sequence[str],
    owner: str,
    limit: int,
    lease: timedelta,
    since: datetime | None = None,
) -> list[Claimed]:
    """:func:`claim` over every key in ``keys`` in ONE statement (worker loop of a
    single-node installation, once per dirty queue over its dirty held keys): the best
    available attempts of any of those keys, highest priority first, then oldest — the
    one queue before there were keys, fair between keys by age. Each leased row, its
    task and its run are matched in the row's own key. The same fences and ``SKIP
    LOCKED``; ``ix_task_queue_dequeue``, one range per key (``shard = ANY``), then the
    primary keys. Built once."""
    result = await conn.execute(
        _claim_statement(True),
        {
            "in_shards": list(keys),
            "in_queue": queue,
            "task_names": list(task_names),
            "owner": owner,
            "limit": limit,
            "lease": lease,
            "since": since,
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
    if not keys:
        return []
    result = await conn.execute(
        _lease_given_statement(),
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
