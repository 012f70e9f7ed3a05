"""``debounces``: the open debounce window of each (workflow, key) and the run it starts.

Every statement is within one shard key (the start's: ``Shards.of_key`` of its
``shard_key`` or debounce key); the pending run's own rows live in that key too. The
callers of one window are serialised by the window row's lock (the claim's upsert),
and a pending run is told from a started one under its decide row's lock, which a
decider taking the run holds until its decision commits.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.expiry import delete_expired
from legato.schema import DecideQueue, RunEvents, Runs, RunStatus
from legato.schema.tables import Debounces


async def claim(
    conn: AsyncConnection,
    shard: int,
    namespace: str,
    key: str,
    run_id: uuid.UUID,
    now: datetime,
    expires_at: datetime,
) -> tuple[uuid.UUID, datetime]:
    """Open the window of (``namespace``, ``key``) for ``run_id`` at ``now``, or find the
    one open (Client.start with ``debounce``): the window's run id and first call's
    time. Upserts with ``DO UPDATE`` so the row stays locked by this transaction:
    concurrent calls of one window wait on the primary key (shard, namespace, key) and
    go one at a time. A window already open keeps its run and its later expiry."""
    statement = insert(Debounces.table).values(
        shard=shard,
        namespace=namespace,
        key=key,
        run_id=run_id,
        first_at=now,
        expires_at=expires_at,
    )
    result = await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[Debounces.shard, Debounces.namespace, Debounces.key],
            set_={
                Debounces.expires_at: func.greatest(
                    Debounces.expires_at, statement.excluded.expires_at
                )
            },
        ).returning(Debounces.run_id, Debounces.first_at)
    )
    found, first_at = result.one()
    return found, first_at


async def lock_pending(conn: AsyncConnection, shard: int, run_id: uuid.UUID) -> bool:
    """Whether the window's run has not been decided yet, locking its decide row for the
    rest of the transaction so no decider takes it meanwhile (Client.start with
    ``debounce``). A decider that took the row holds it until its decision commits:
    this waits, then finds it gone (started). The run's state is read in a statement
    of its own, after the lock, so it sees that decision. Primary keys (shard, run_id)
    of ``decide_queue``, (shard, id) of ``runs``, (shard, run_id, seq) of ``run_events``."""
    locked = await conn.execute(
        select(DecideQueue.run_id)
        .where(DecideQueue.shard == shard, DecideQueue.run_id == run_id)
        .with_for_update()
    )
    if locked.first() is None:
        return False
    last_seq = (
        select(func.max(RunEvents.seq))
        .where(RunEvents.shard == shard, RunEvents.run_id == run_id)
        .scalar_subquery()
    )
    state = await conn.execute(
        select(Runs.status, Runs.cancel_requested_at, last_seq).where(
            Runs.shard == shard, Runs.id == run_id
        )
    )
    row = state.first()
    # Only `run_started` in the history: no decision yet (a signal may have queued it).
    return row is not None and row[0] is RunStatus.RUNNING and row[1] is None and row[2] == 1


async def replace_pending(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID, input: JsonValue, starts_at: datetime
) -> None:
    """Give the pending run (locked by :func:`lock_pending`) the latest call's input and
    start time (Client.start with ``debounce``). Primary keys (shard, id) of ``runs``
    and (shard, run_id) of ``decide_queue``."""
    await conn.execute(
        update(Runs.table)
        .where(Runs.shard == shard, Runs.id == run_id)
        .values(input=input, scheduled_at=starts_at, updated_at=func.now())
    )
    await conn.execute(
        update(DecideQueue.table)
        .where(DecideQueue.shard == shard, DecideQueue.run_id == run_id)
        .values(available_at=starts_at)
    )


async def reopen(
    conn: AsyncConnection,
    shard: int,
    namespace: str,
    key: str,
    run_id: uuid.UUID,
    now: datetime,
    expires_at: datetime,
) -> None:
    """Point the window row (locked by :func:`claim`) at a new run: the previous one
    started, so this call opens a new window (Client.start with ``debounce``).
    Primary key (shard, namespace, key)."""
    await conn.execute(
        update(Debounces.table)
        .where(Debounces.shard == shard, Debounces.namespace == namespace, Debounces.key == key)
        .values(run_id=run_id, first_at=now, expires_at=expires_at)
    )


async def prune(conn: AsyncConnection, limit: int = 10_000) -> int:
    """Fan-out across shard keys: delete windows closed long enough ago (maintenance in
    the decider process; never on a hot path). Served by ``ix_debounces_expires_at``."""
    return await delete_expired(conn, Debounces.table, Debounces.expires_at, limit)
