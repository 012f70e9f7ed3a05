"""``runs.timed_out_at``: a run's ``execution_timeout`` has passed (RUN_TIMEOUT timers)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories.params import in_array, uuid_array
from legato.schema import Runs, RunStatus


async def mark_timed_out(
    conn: AsyncConnection, shard: int, run_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """Record that the deadline of each still-RUNNING run of key ``shard`` passed (timer
    loop, when a RUN_TIMEOUT timer fires); the decider then times the run out. Returns
    the runs marked: a run that finished first is left alone. Served by the primary key
    (shard, id) (the id picks the partition)."""
    if not run_ids:
        return []
    result = await conn.execute(
        update(Runs.table)
        .where(
            Runs.shard == shard,
            in_array(Runs.id, uuid_array("run_ids", sorted(set(run_ids)))),
            Runs.status == RunStatus.RUNNING,
            Runs.timed_out_at.is_(None),
        )
        .values(timed_out_at=func.now(), updated_at=func.now())
        .returning(Runs.id)
    )
    return list(result.scalars())
