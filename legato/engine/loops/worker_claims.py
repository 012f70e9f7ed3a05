"""How a worker claims from one of its queues: the limited claim when a limit applies
to it (``Admission``), the fair claim per key for a queue shared fairly between keys,
else the one-statement claim, within one key (the distributed layout) or across the
held keys (one PostgreSQL). The one-statement claims start from the worker's floor
(docs/design.md, "The worker's floor")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.admission import Admission
from legato.engine.floors import Floors
from legato.engine.repositories import fair_claims, task_queue
from legato.flow import App
from legato.schema import Shards

# A floor's scope: a queue and the keys one claim covers (a change in the keys held
# starts the new set from the oldest row).
ClaimScope = tuple[str, tuple[int, ...]]


class WorkerClaims:
    """The claims of one worker: ``owner`` leases up to ``free`` attempts of a queue
    for ``lease``, of the tasks ``app`` has; a claim looks from the oldest row at least
    every ``full_look_every`` seconds (the worker's ``Loop.once_a_poll``)."""

    def __init__(
        self,
        engine: AsyncEngine,
        app: App,
        queues: Sequence[str],
        shards: Shards,
        owner: str,
        lease: timedelta,
        full_look_every: float,
    ) -> None:
        self.engine = engine
        self.shards = shards
        self.owner = owner
        self.lease = lease
        self.task_names = sorted(app.tasks)
        # Per queue: None unless the queue or a task served from it is limited (then the
        # limited claim), else the one-statement claim.
        self.admissions = {q: Admission.of(app, (q,), self.task_names) for q in queues}
        # Queues a task of the app shares fairly between keys (FairShare): claimed per key.
        self.fair = {t.queue for t in app.tasks.values() if t.fair_share} & set(queues)
        self._full_look_every = full_look_every
        self._floors: Floors[ClaimScope] = Floors()

    def spans_keys(self, queue: str) -> bool:
        """Whether one claim of ``queue`` covers every held key (one PostgreSQL, a queue
        neither limited nor fair)."""
        return not (
            self.shards.distributed or self.admissions[queue] is not None or queue in self.fair
        )

    async def claim(self, keys: list[int], queue: str, free: int) -> list[task_queue.Claimed]:
        """Lease up to ``free`` attempts of ``queue`` in ``keys``: one key (the distributed
        layout, a limited or fair queue) or several in one statement."""
        admission = self.admissions[queue]
        if admission is not None:
            (shard,) = keys
            async with self.engine.begin() as conn:
                return await admission.claim(conn, shard, queue, self.owner, free, self.lease)
        # The claim is one statement, atomic on its own: no BEGIN/COMMIT round trips.
        async with self.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            if queue in self.fair:
                (shard,) = keys
                return await fair_claims.claim(
                    autocommit, shard, queue, self.task_names, self.owner, free, self.lease
                )
            scope = (queue, tuple(sorted(keys)))
            since = self._floors.since(scope, time.monotonic(), self._full_look_every)
            if self.shards.distributed:
                (shard,) = keys
                claimed = await task_queue.claim(
                    autocommit, shard, queue, self.task_names, self.owner, free, self.lease, since
                )
            else:
                claimed = await task_queue.claim_held(
                    autocommit, keys, queue, self.task_names, self.owner, free, self.lease, since
                )
        self._floors.look(scope, since, _oldest_left(claimed, free), time.monotonic())
        return claimed


def _oldest_left(claimed: Sequence[task_queue.Claimed], free: int) -> datetime | None:
    """What a claim of ``free`` slots tells of the rows it left, as the oldest row it
    returned (pure): a claim that filled fewer slots took every row it could see and
    lock, so none is older than its oldest. A full claim says nothing: it took the best
    rows, highest priority first, and lower-priority rows older than those may wait."""
    if len(claimed) >= free or not claimed:
        return None
    return min(attempt.available_at for attempt in claimed)
