"""In-process hand-offs between the decider loops and the worker of one process.

When a process runs both roles (``legato dev``, a ``Runtime`` with the decider and
worker roles), a new attempt need not travel decision commit -> NOTIFY -> the worker's
claim transaction: the decision writes it leased to the local worker in its own write
(the queue row inserted with the worker as ``lease_owner``, the attempt inserted
RUNNING: what a claim would have written, with no statement of its own and no row
version to update) and, once that transaction has committed, the worker runs the
``Claimed`` items it is handed in memory; each carries its key, so the worker's
reports of it go to that key. Likewise a worker's committed
report nudges the local decider at once instead of waiting for the decide queue's
NOTIFY. This process drops its own copy of the NOTIFY such a commit still sends for the
other processes (:func:`absorb`), so its loops do not wake twice.

Only attempts the worker would claim itself are handed off: of its queues and task
names, available now, with no concurrency, rate or queue limit (those keep the claim
through ``Admission``), while the worker has free slots and nothing it could not take
may be queued: its last claim drained the queue and it was not woken with every slot
taken (otherwise older rows wait, and the claim's priority order takes them as soon as
a slot frees).
Slots are reserved synchronously before the decision's write and released when the
decision ends, so the claims and the hand-offs together never exceed the worker's
concurrency. Kill safety needs nothing new: the lease is part of the decision's commit;
a process killed after it leaves a leased row whose lease expires, and the lease sweeper
returns the attempt as it does for any dead worker's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import notify, task_queue

if TYPE_CHECKING:
    from legato.engine.transport.wakeups import Wakeups

# What :func:`absorb` registered: (channel, backend pid), or nothing.
Absorbed = tuple[str, int, str | None] | None


class LocalSlots(Protocol):
    """What the hand-off needs of the local worker (``legato.engine.loops.worker``)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def lease(self) -> timedelta: ...
    @property
    def serves(self) -> frozenset[tuple[str, str]]: ...
    @property
    def serves_unlimited(self) -> frozenset[tuple[str, str]]: ...
    def reserve(self, wanted: int) -> int: ...
    def unreserve(self, n: int) -> None: ...
    def accept(self, claimed: list[task_queue.Claimed]) -> None: ...
    def claim_soon(self, shard: int) -> None: ...


class LocalReports(Protocol):
    """What the local worker needs of the hand-off: its committed reports wake the local
    decider in memory, and it drops its own copy of their decide NOTIFY."""

    def committing(self) -> contextlib.AbstractContextManager[list[Absorbed]]: ...
    async def absorb(self, conn: AsyncConnection, channel: str) -> Absorbed: ...
    def absorb_backend(self, pid: int, channel: str) -> Absorbed: ...
    def unabsorb(self, absorbed: Absorbed) -> None: ...
    def reported(self, shards: Iterable[int]) -> None: ...


def eligible(
    rows: Sequence[task_queue.NewQueueRow], now: datetime, serves: frozenset[tuple[str, str]]
) -> list[task_queue.NewQueueRow]:
    """The enqueued attempts a local worker may be handed, best first (the claim's order:
    priority, then age): available at the decision's clock ``now`` and of a (queue, task
    name) the worker serves without a limit."""
    chosen = [r for r in rows if r.available_at <= now and (r.queue, r.task_name) in serves]
    chosen.sort(key=lambda r: (-r.priority, r.available_at))
    return chosen


async def absorb(
    wakeups: Wakeups | None, conn: AsyncConnection, channel: str, payload: str | None = None
) -> Absorbed:
    """Drop the notification on ``channel`` (with ``payload``, when given) that the
    transaction on ``conn`` sends at commit (its decide or task queue trigger's), because
    the caller wakes the loop it concerns in memory: without this the loop would wake
    twice and its second tick would find nothing. Give it back with :func:`unabsorb` if
    the commit fails."""
    if wakeups is None:
        return None
    driver = (await conn.get_raw_connection()).driver_connection
    assert driver is not None  # the connection is checked out: it has its driver's
    return absorb_backend(wakeups, int(driver.get_server_pid()), channel, payload)


def absorb_backend(
    wakeups: Wakeups | None, pid: int, channel: str, payload: str | None = None
) -> Absorbed:
    """:func:`absorb` for the server backend ``pid`` (asyncpg's ``get_server_pid()``, no
    round trip): the connection of a statement that commits on its own."""
    if wakeups is None:
        return None
    wakeups.absorb(channel, pid, payload)
    return channel, pid, payload


def unabsorb(wakeups: Wakeups | None, absorbed: Absorbed) -> None:
    if absorbed is not None and wakeups is not None:
        wakeups.unabsorb(*absorbed)


class ReportsToDecider:
    """The worker's end of the hand-off (a :class:`LocalReports`): ``decide_now`` wakes the
    process's first decider loop for the keys it is given, ``wake`` wakes it with none.

    It also tells that loop when a report transaction is under way (``in_flight``): the
    loop then neither polls nor settles, since its look would race the report's commit
    (a settle answering "busy", or seeing the report's run due, then a second take for
    the same report once its nudge arrives). The report's end wakes it instead
    (``DeciderLoop.tick``)."""

    def __init__(
        self,
        wakeups: Wakeups | None,
        decide_now: Callable[[Iterable[int] | None], None],
        wake: Callable[[], None],
    ) -> None:
        self.wakeups = wakeups
        self.decide_now = decide_now
        self.wake = wake
        # Per report under way, what its decide NOTIFY absorb registered.
        self._under_way: list[list[Absorbed]] = []
        # While the decider's sleep gate looks (None otherwise): the absorbs of the
        # reports that ended meanwhile.
        self._ended_while_settling: list[Absorbed] | None = None

    @property
    def in_flight(self) -> int:
        """Report writes begun and not yet ended."""
        return len(self._under_way)

    @contextlib.contextmanager
    def settling(self) -> Iterator[None]:
        """Around the decider's sleep gate: what :meth:`absorbs_to_keep` answers in it."""
        self._ended_while_settling = []
        try:
            yield
        finally:
            self._ended_while_settling = None

    def absorbs_to_keep(self) -> list[tuple[str, int, str | None]]:
        """The absorbs a decider that just set its sleep flags keeps: those of the reports
        under way, or that ended while it set them. A report whose write waited on the
        flags' locks notifies once they are set, and its end can come before the gate's
        answer reaches the decider. (One that ended there without notifying, because its
        run's decide row was backing off, keeps an absorb that may drop one later
        NOTIFY from its pooled backend: that wake-up then waits for the poll.)"""
        ended = self._ended_while_settling or []
        absorbed = [each for report in self._under_way for each in report] + ended
        return [each for each in absorbed if each is not None]

    @contextlib.contextmanager
    def committing(self) -> Iterator[list[Absorbed]]:
        """Around one report write: counted in ``in_flight``; yields the list its absorbs
        go in, given back if the write fails. Its end, committed or not, wakes the decider
        loop (a committed one's ``reported`` follows and marks its keys)."""
        absorbed: list[Absorbed] = []
        self._under_way.append(absorbed)
        try:
            yield absorbed
        except BaseException:
            for each in absorbed:
                self.unabsorb(each)
            absorbed.clear()
            raise
        finally:
            self._under_way.remove(absorbed)
            if self._ended_while_settling is not None:
                self._ended_while_settling += absorbed
            self.wake()

    def reported(self, shards: Iterable[int]) -> None:
        """A worker's report committed: the runs it touched, of keys ``shards``, are
        waiting to be decided."""
        self.decide_now(shards)

    async def absorb(self, conn: AsyncConnection, channel: str) -> Absorbed:
        return await absorb(self.wakeups, conn, channel)

    def absorb_backend(self, pid: int, channel: str) -> Absorbed:
        return absorb_backend(self.wakeups, pid, channel)

    def unabsorb(self, absorbed: Absorbed) -> None:
        unabsorb(self.wakeups, absorbed)


class LocalHandoff:
    """The deciders' end of the hand-off: decisions lease new attempts to ``worker``."""

    def __init__(self, worker: LocalSlots, wakeups: Wakeups | None, schema: str) -> None:
        self.worker = worker
        self.wakeups = wakeups
        self.tasks_channel = notify.tasks_channel(schema)
        self.handed = 0  # attempts leased in a decision and run without a claim


@contextlib.asynccontextmanager
async def decision(handoff: LocalHandoff | None) -> AsyncIterator[DecisionLeases]:
    """One decision transaction's hand-off, entered before the transaction begins and left
    after it ends (a no-op without a local worker): on a commit the leased attempts go to
    the worker and an attempt it serves left in the queue nudges it; on a failure (the
    rollback undid the leases) only the reserved slots are given back."""
    current = DecisionLeases(handoff)
    if handoff is None:
        yield current
        return
    worker = handoff.worker
    try:
        yield current
    except BaseException:
        worker.unreserve(current.reserved)
        for absorbed in current.absorbed:
            unabsorb(handoff.wakeups, absorbed)
        raise
    worker.accept(current.leased)
    worker.unreserve(current.reserved)
    handoff.handed += len(current.leased)
    for shard in sorted(current.left_queued):
        worker.claim_soon(shard)


@dataclass
class DecisionLeases:
    """What one decision transaction reserved and leased for the local worker."""

    handoff: LocalHandoff | None
    reserved: int = 0
    leased: list[task_queue.Claimed] = field(default_factory=list)
    left_queued: set[int] = field(default_factory=set)  # keys with served work left queued
    absorbed: list[Absorbed] = field(default_factory=list)  # one per key it notifies

    @property
    def owner(self) -> str | None:
        """The local worker the chosen attempts are written leased to (None: no worker)."""
        return None if self.handoff is None else self.handoff.worker.worker_id

    @property
    def lease(self) -> timedelta | None:
        return None if self.handoff is None else self.handoff.worker.lease

    def choose(
        self, shard: int, rows: Sequence[task_queue.NewQueueRow], now: datetime
    ) -> list[task_queue.NewQueueRow]:
        """What the local worker may take of the attempts ``rows`` of key ``shard`` this
        decision enqueues (decided at ``now``), before they are written: its slots are
        reserved for them, and the decision writes them leased to it and RUNNING
        (``decision_batch.Batch.write``), what a claim would have written."""
        if not rows or self.handoff is None:
            return []
        worker = self.handoff.worker
        chosen = eligible(rows, now, worker.serves_unlimited)
        take = worker.reserve(len(chosen))
        self.reserved += take
        # Attempts it serves that stay queued (no free slot, a limit): claim them from
        # this key now, not when the NOTIFY arrives.
        if take < len(eligible(rows, now, worker.serves)):
            self.left_queued.add(shard)
        return chosen[:take]

    async def written(
        self,
        conn: AsyncConnection,
        shard: int,
        rows: Sequence[task_queue.NewQueueRow],
        handed: Sequence[task_queue.Claimed],
        now: datetime,
    ) -> None:
        """The decision's transaction ``conn`` wrote the attempts ``rows`` of key
        ``shard``, ``handed`` leased to the local worker, which runs them once it
        commits; called once per key the transaction enqueued into."""
        if not rows or self.handoff is None:
            return
        self.leased += handed
        given = {claimed.task_id for claimed in handed}
        if any(row.available_at <= now and row.task_id not in given for row in rows):
            # The enqueue NOTIFYs once per key with due unleased rows and transaction
            # (PostgreSQL folds repeats; the payload is the key; rows written leased to
            # the local worker wake no one, migration 0019): the local worker is nudged
            # for what stays queued, so this key's notification is dropped. Rows due
            # later than the decision's clock may or may not notify (the trigger's
            # second of slack): theirs is let through, an extra claim, never a lost one.
            self.absorbed.append(
                await absorb(self.handoff.wakeups, conn, self.handoff.tasks_channel, str(shard))
            )
