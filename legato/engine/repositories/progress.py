"""``run_progress``: what running tasks report (``ctx.progress`` / ``ctx.stream``),
numbered gap-free from 1 per run (``seq``). Every statement is within the run's shard
key (the parameter ``shard``) and served by the primary key (shard, run_id, seq).

Entries are numbered without a lock of the run's row: an append takes the run's last
seq plus one and inserts ``ON CONFLICT DO NOTHING``. Two attempts of one run appending
at once compute the same seq; the second waits on the first's uncommitted key and,
once it commits, inserts nothing and tries again. So an entry with seq n+1 commits only
after the one with seq n: a reader after a cursor never skips a late commit.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Integer, Row, Uuid, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import SHARD_PARAM, shard_param
from legato.progress import ProgressEntry, ProgressKind
from legato.schema.tables import RunProgress

# What an append writes after the shard key; a read returns these and created_at,
# named as ProgressEntry's fields.
_WRITTEN = (
    RunProgress.run_id,
    RunProgress.seq,
    RunProgress.task_id,
    RunProgress.node_id,
    RunProgress.iteration,
    RunProgress.attempt,
    RunProgress.kind,
    RunProgress.value,
)
_COLUMNS = (*_WRITTEN, RunProgress.created_at)


async def append(
    conn: AsyncConnection,
    shard: int,
    run_id: uuid.UUID,
    task_id: uuid.UUID,
    node_id: str,
    iteration: int,
    attempt: int,
    kind: ProgressKind,
    value: JsonValue,
) -> int | None:
    """Append one entry after the run's last (``ctx.progress`` / ``ctx.stream`` in the
    worker's running attempt, ``legato.engine.progress_writer``): its seq, or None when
    an entry of another attempt took that seq first (append again). One INSERT ...
    SELECT: the last seq by a backward scan of the primary key (shard, run_id, seq)."""
    last = select(
        shard_param(),
        literal(run_id, Uuid()),
        func.coalesce(func.max(RunProgress.seq), 0) + 1,
        literal(task_id, Uuid()),
        literal(node_id),
        literal(iteration, Integer()),
        literal(attempt, Integer()),
        literal(kind),
        literal(value, RunProgress.value.type),
    ).where(RunProgress.shard == shard_param(), RunProgress.run_id == run_id)
    statement = (
        insert(RunProgress.table)
        .from_select([RunProgress.shard, *_WRITTEN], last)
        .on_conflict_do_nothing(
            index_elements=[RunProgress.shard, RunProgress.run_id, RunProgress.seq]
        )
        .returning(RunProgress.seq)
    )
    result = await conn.execute(statement, {SHARD_PARAM: shard})
    return result.scalar_one_or_none()


async def after(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID, after_seq: int, limit: int
) -> list[ProgressEntry]:
    """The run's entries after ``after_seq``, oldest first, at most ``limit``
    (``Client.stream``, ``legato runs stream``). A forward range scan of the primary
    key (shard, run_id, seq)."""
    result = await conn.execute(
        select(*_COLUMNS)
        .where(
            RunProgress.shard == shard,
            RunProgress.run_id == run_id,
            RunProgress.seq > after_seq,
        )
        .order_by(RunProgress.seq)
        .limit(limit)
    )
    return [_entry(row) for row in result]


async def latest(
    conn: AsyncConnection, shard: int, run_id: uuid.UUID, limit: int
) -> list[ProgressEntry]:
    """The run's last ``limit`` entries, oldest first (the dashboard's run page). A
    backward range scan of the primary key (shard, run_id, seq)."""
    result = await conn.execute(
        select(*_COLUMNS)
        .where(RunProgress.shard == shard, RunProgress.run_id == run_id)
        .order_by(RunProgress.seq.desc())
        .limit(limit)
    )
    return [_entry(row) for row in reversed(result.all())]


def _entry(row: Row[*tuple[Any, ...]]) -> ProgressEntry:  # _COLUMNS: named as its fields
    return ProgressEntry(**row._mapping)
