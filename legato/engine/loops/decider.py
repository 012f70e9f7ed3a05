"""The decider loop: claim runs from decide_queue, decide each under its row lock,
apply the pure decider's actions. Workers hear of new attempts from the NOTIFY of
``task_queue``'s insert trigger; the decider announces cancelled attempts itself.

In the distributed layout work is taken one shard key at a time: a batch is runs of
one key, and every statement of its decision (lock, snapshot, writes) is within that
key. On one PostgreSQL (``Shards.distributed`` False) a tick with any dirty key takes
one batch across every held key, and locks, reads and writes it in one statement
each (docs/design.md, "The statement layout"). The loop keeps a set of dirty keys —
the key in each decide NOTIFY's payload (every held key for an empty or unparsable
one), the keys a local worker's reports touched (``decide_now``), and every held key
once per poll interval — and each tick takes from each dirty key it holds (from every
held key, on one PostgreSQL); a take that returns a full batch leaves its key dirty.

Several runs are decided per transaction; when a batch fails, its runs are decided
again one by one, each inside a savepoint, so one bad run (a bug, a corrupted row, a
deadlock with a parent/child decision) cannot sink the batch: the others commit, and
its decide row stays, backing off exponentially per run. After ``max_failures`` in a
row the run is quarantined (``legato runs list --quarantined``) until resumed.

What a batch does (lock, load, ``decide()``, its actions as rows, one write) is
``decision_batch.py``; this module is the loop around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine import hooks
from legato.engine.decider.backoff import exponential
from legato.engine.fair_keys import FairKeys
from legato.engine.floors import Floors
from legato.engine.input_check import InputChecks
from legato.engine.loops import relay
from legato.engine.loops.decider_sleep import SleepGate
from legato.engine.loops.decision_batch import (
    SpecCache,
    decide_runs,
    decide_taken,
    lock_and_load,
)
from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import (
    decide_queue,
    decider_take,
    notify,
    outbox,
)
from legato.engine.repositories.decider_take import Taken
from legato.engine.transport import handoff
from legato.engine.transport.handoff import LocalHandoff, ReportsToDecider
from legato.engine.transport.wakeups import Wakeups, payload_shard, payloads
from legato.outages import one_line, traceback_at_debug
from legato.schema import Shards

log = logging.getLogger("legato.decider")


def decision_retry_delay(failures: int, base: timedelta, cap: timedelta) -> timedelta:
    """How long a run waits after its ``failures``-th failed decision in a row: ``base``
    doubled per failure, at most ``cap``."""
    return exponential(base, failures, cap)


# The floors' scope of a single-node decider, whose one take spans every held key.
EVERY_HELD_KEY = -1


class DeciderLoop(Loop):
    """Takes batches of runs to decide, one shard key at a time, from the keys it holds
    (``held``, every key of ``shards`` by default); decides each under its row lock."""

    name = "decider"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shards: Shards,
        held: HeldShards | None = None,
        wakeups: Wakeups | None = None,
        batch_size: int = 200,
        poll_interval: float = 1.0,
        retry_delay: timedelta = timedelta(seconds=2),
        max_retry_delay: timedelta = timedelta(minutes=5),
        max_failures: int = 10,
        helper: DeciderLoop | None = None,
        handoff: LocalHandoff | None = None,
        local_reports: ReportsToDecider | None = None,
        restarts: RestartPolicy | None = None,
        inputs: InputChecks | None = None,
        fair: FairKeys | None = None,
    ) -> None:
        schema = engine.get_execution_options()["schema_translate_map"]["legato"]
        # No channel for the base loop: this loop subscribes itself, for the payload.
        super().__init__(
            poll_interval=poll_interval, wakeups=wakeups, channel=None, restarts=restarts
        )
        self.engine = engine
        self.schema = schema
        self.shards = shards
        self.held: HeldShards = AllShards(shards) if held is None else held
        self.batch_size = batch_size
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.max_failures = max_failures
        self.specs = SpecCache()
        self.inputs = inputs  # the app's input models, for runs started from SQL
        self.fair = fair  # the app's fair queues, whose enqueued rows get keys
        self.decided = 0
        self.takes = 0  # decide_queue takes sent (one per key and tick it was dirty)
        # A sibling loop in this process, woken when this one finds more than one run
        # waiting in a key: under load two batches of the key overlap, while a lone run
        # (a signal) wakes one loop only and nothing competes with its decision.
        self.helper = helper
        self.handoff = handoff  # a Runtime that also runs a worker leases attempts to it
        # The same process's worker, whose reports wake this loop in memory.
        self.local_reports = local_reports
        self._decide_channel = notify.decide_channel(schema)
        self._listening = False
        # Keys that may have runs to decide, in the order they are taken.
        self._dirty: dict[int, None] = {}
        self._all_marked_at = -float("inf")  # when every held key was last marked dirty
        # Where each take's index range starts (``taken_floor``).
        self._floors: Floors[int] = Floors()
        # Sets the keys' sleep flags. The NOTIFY that ends a sleep must not be dropped for
        # a report flush that expected to send one while this loop was awake (and so sent
        # none): the listening loop forgets those absorbs as it falls asleep.
        self.sleep_gate = SleepGate(
            engine, poll_interval, on_asleep=self._forget_absorbed if wakeups else None
        )

    async def run(self) -> None:
        """Listen on the decide channel for the keys with new work, then run the loop."""
        async with payloads(self._wakeups, self._decide_channel, self._on_decide_payload):
            self._listening = True
            try:
                await super().run()
            finally:
                self._listening = False

    def _on_decide_payload(self, payload: str) -> None:
        """A decide NOTIFY: the key it names has runs to decide (every held key when the
        payload is empty or not a key)."""
        if self._listening:
            shard = payload_shard(payload)
            self.decide_now(None if shard is None else [shard])

    def decide_now(self, shards: Iterable[int] | None = None) -> None:
        """Mark ``shards`` (every held key when None) as having runs to decide and wake the
        loop: a NOTIFY's key, a local worker's committed reports (``Runtime``), a sibling
        loop that found more than one run waiting. Keys not held are ignored."""
        held = self.held.held()
        marked = False
        for shard in held if shards is None else shards:
            if shard in held:
                self._dirty[shard] = None
                marked = True
        if marked:
            self.nudge()

    def _due_keys(self) -> list[int]:
        """The held keys to take from this tick: the dirty ones, and every held key once
        per poll interval (a tick with nothing dirty is a poll)."""
        held = self.held.held()
        clock = time.monotonic()
        if not self._dirty or clock - self._all_marked_at >= self.poll_interval:
            self._all_marked_at = clock
            for shard in held:
                self._dirty[shard] = None
        keys = [shard for shard in self._dirty if shard in held]
        self._dirty.clear()
        return keys

    async def tick(self) -> bool:
        """A tick that found nothing more to do sleeps only once the held keys' sleep
        flags are set, so that their next writer NOTIFYs (``decider_sleep``). While a
        report of this process's worker is being written and no key is marked, it
        neither polls nor settles: the report's end wakes it, and the take it then makes
        covers the report's runs (``ReportsToDecider``)."""
        # Every wake-up's cause is state this tick reads (the marked keys, the reports
        # under way, the poll clock): one that came while the last tick ran is answered
        # here, and left set it would end the next sleep at once for an empty take.
        if self._wake is not None:
            self._wake.clear()
        if self._awaits_local_report():
            return False
        if await self._take_dirty():
            return True
        if self._awaits_local_report():
            return False
        with self.local_reports.settling() if self.local_reports else contextlib.nullcontext():
            return await self.sleep_gate.keep_ticking(
                self.held.held(), self._sleep, self.decided, self._since(EVERY_HELD_KEY)
            )

    def _awaits_local_report(self) -> bool:
        reports = self.local_reports
        return reports is not None and reports.in_flight > 0 and not self._dirty

    def _forget_absorbed(self) -> None:
        if self._wakeups is not None:
            reports = self.local_reports
            kept = reports.absorbs_to_keep() if reports is not None else []
            self._wakeups.forget_absorbed(self._decide_channel, kept)

    async def _take_dirty(self) -> bool:
        """One take per dirty held key (distributed layout, each key's batch in its own
        transaction), or, when any held key is dirty, one take over every held key (one
        PostgreSQL); True when a take came back full (its keys stay dirty) or a key was
        marked meanwhile."""
        keys = self._due_keys()
        if not keys:
            return False
        if not self.shards.distributed:
            # One statement takes from every held key at no extra cost: the runs of keys
            # whose NOTIFY has not arrived yet join this batch rather than make their own.
            held = list(self.held.held())
            if await self._decide(held):
                self._dirty.update(dict.fromkeys(held))
                return True
            return bool(self._dirty)
        full = False
        if len(keys) > 1 and self.helper is not None:
            # The sibling loop takes the other half of the keys: one decides while the
            # other waits on PostgreSQL.
            half = (len(keys) + 1) // 2
            self.helper.decide_now(keys[half:])
            keys = keys[:half]
        for shard in keys:
            if await self._decide([shard]):
                self._dirty[shard] = None
                full = True
        return full

    async def _take(
        self,
        conn: AsyncConnection,
        keys: Sequence[int],
        limit: int,
        run_ids: Sequence[uuid.UUID] | None = None,
    ) -> decide_queue.QueueTake:
        """The layout's take: of the one key ``keys`` holds (distributed, from the key's
        floor unless ``run_ids`` are chosen), or across them."""
        self.takes += 1
        if not self.shards.distributed:
            return await decide_queue.take_held(conn, keys, self.shards.count, limit, run_ids)
        (shard,) = keys
        if run_ids is not None:
            return await decide_queue.take(conn, shard, limit, run_ids)
        since = self._since(shard)
        taken = await decide_queue.take(conn, shard, limit, since=since)
        self._floors.look(shard, since, taken.oldest, time.monotonic())
        return taken

    async def _take_and_load(self, conn: AsyncConnection, keys: Sequence[int]) -> Taken:
        """The layout's take of a batch, locked and read: one call on one PostgreSQL
        (``decider_take_v2``); in the distributed layout, the take, then the lock and
        the read, each a statement within the one key."""
        if not self.shards.distributed:
            self.takes += 1
            since = self._since(EVERY_HELD_KEY)
            taken = await decider_take.take_and_load(conn, keys, self.batch_size, since)
            self._floors.look(EVERY_HELD_KEY, since, taken.oldest, time.monotonic())
            return taken
        failures = (await self._take(conn, keys, self.batch_size)).failures
        if not failures:
            return Taken()
        taken = await lock_and_load(conn, self.shards, keys, list(failures))
        return replace(taken, failures=failures)

    def _since(self, scope: int) -> datetime | None:
        """Where a take of ``scope`` (and, on one PostgreSQL, the sleep gate's look)
        starts: its floor, unless no take has looked from the oldest row for a poll
        interval, so a row stamped long before its commit waits no longer than a poll
        would. The distributed layout's sleep gate looks from the oldest row."""
        if self.shards.distributed and scope == EVERY_HELD_KEY:
            return None
        return self._floors.since(scope, time.monotonic(), self.poll_interval)

    def _backlog(self, taken: int) -> bool:
        """Whether a take of ``taken`` runs says more wait, so the sibling loop should take
        too. In the distributed layout the tick already split the keys between the loops,
        so only a full take calls the sibling onto this one's keys. On one PostgreSQL both
        loops take across the same keys: a take of more than one run is a backlog
        building, and the sibling takes the next batch while this one waits on
        PostgreSQL, which a full take (rare while reports trickle in) would not allow."""
        if self.shards.distributed:
            return taken >= self.batch_size
        return taken > 1

    def _keys_of(self, run_ids: Iterable[uuid.UUID]) -> list[int]:
        return sorted({self.shards.of_run(run_id) for run_id in run_ids})

    async def _decide(self, keys: Sequence[int]) -> bool:
        """Take and decide one batch of ``keys``; True when the take was full."""
        began = time.time_ns()
        claimed: list[uuid.UUID] = []
        try:
            async with handoff.decision(self.handoff) as local, self.engine.begin() as conn:
                taken = await self._take_and_load(conn, keys)
                claimed = list(taken.failures)
                if not claimed:
                    return False
                # Read after the take, whose ``available_at <= now()`` used the server's
                # clock at the transaction's start: a clock read before it could stamp a
                # run taken at its start time with an earlier time.
                now = datetime.now(UTC)
                if self.helper is not None and self._backlog(len(claimed)):
                    self.helper.decide_now(keys)  # more may wait in these keys
                batch = await decide_taken(
                    conn, self.shards, self._keys_of(claimed), taken, self.specs, now,
                    self.inputs, self.fair, local,
                )
                await self._announce(conn, batch.cancels_attempts)
            if local.leased:
                # The attempts just handed to this process's worker start before this
                # loop's own next statements (the sleep gate's, the next take).
                await asyncio.sleep(0)
            self.decided += len(claimed)
            hooks.decisions_committed(batch.facts, began)
        except Exception:
            if not claimed:
                # The batch's rows could not be read (a value no reader can load, stored
                # by SQL of one's own): find its runs without reading them, so the run
                # that cannot be read fails alone instead of stopping the loop. A
                # connection that died fails this take too, and the tick is retried.
                claimed = await self._runs_of_a_batch_not_read(keys)
                if not claimed:
                    raise
            # One bad run must not sink the batch: the batch rolled back, so decide the
            # same runs one by one, each in its own savepoint.
            hooks.decision_batch_failed(len(claimed), began)
            await self._one_by_one(keys, claimed)
        return len(claimed) >= self.batch_size

    async def _runs_of_a_batch_not_read(self, keys: Sequence[int]) -> list[uuid.UUID]:
        """The runs a take of ``keys`` returns now, their decide rows taken in a
        transaction rolled back: the ids alone, nothing of the runs read."""
        async with self.engine.connect() as conn, conn.begin() as transaction:
            taken = await self._take(conn, keys, self.batch_size)
            await transaction.rollback()
        return list(taken.failures)

    async def _one_by_one(self, keys: Sequence[int], run_ids: Sequence[uuid.UUID]) -> None:
        began = time.time_ns()
        facts: list[hooks.DecisionFacts] = []
        async with handoff.decision(self.handoff) as local, self.engine.begin() as conn:
            cancels = False
            taken = await self._take(conn, keys, len(run_ids), run_ids)
            now = datetime.now(UTC)  # after the take, as in ``_decide``
            for run_id, failed_before in taken.failures.items():
                shard = self.shards.of_run(run_id)
                try:
                    async with conn.begin_nested():
                        batch = await decide_runs(
                            conn, self.shards, [shard], [run_id], self.specs, now,
                            self.inputs, self.fair, local,
                        )
                except Exception as error:
                    if conn.invalidated:
                        raise  # the connection died, not the decision: the tick is retried
                    hooks.decision_failed()
                    await self._failed(conn, shard, run_id, failed_before + 1, error, now)
                    continue
                self.decided += 1
                facts += batch.facts
                cancels = cancels or batch.cancels_attempts
            await self._announce(conn, cancels)
        hooks.decisions_committed(facts, began)

    async def _failed(
        self,
        conn: AsyncConnection,
        shard: int,
        run_id: uuid.UUID,
        failures: int,
        error: Exception,
        now: datetime,
    ) -> None:
        """Back the run off, or quarantine it: one log line per failure (the traceback at
        DEBUG), the traceback at ERROR once, when the run is parked."""
        message = f"{type(error).__name__}: {error}"[:2000]
        if failures >= self.max_failures:
            await decide_queue.record_failure(conn, shard, run_id, failures, message, None, now)
            await outbox.publish(conn, shard, [relay.quarantine_event(run_id, failures, message)])
            log.error(
                "run %s quarantined after %d failed decisions (%s); fix the cause, then "
                "`legato runs resume %s`",
                run_id,
                failures,
                one_line(error),
                run_id,
                exc_info=error,
                extra={"run_id": str(run_id), "error_type": type(error).__qualname__},
            )
            return
        delay = decision_retry_delay(failures, self.retry_delay, self.max_retry_delay)
        await decide_queue.record_failure(conn, shard, run_id, failures, message, now + delay, now)
        log.error(
            "deciding run %s failed (%d of %d before quarantine): %s; retrying in %.1fs",
            run_id,
            failures,
            self.max_failures,
            one_line(error),
            delay.total_seconds(),
            exc_info=traceback_at_debug(log, error),
            extra={"run_id": str(run_id), "error_type": type(error).__qualname__},
        )

    async def _announce(self, conn: AsyncConnection, cancels: bool) -> None:
        """NOTIFY the workers of cancelled attempts, so they stop them at once."""
        if cancels:
            await notify.send(conn, notify.cancel_channel(self.schema))
