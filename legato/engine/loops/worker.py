"""The worker loop: claim attempts for its queues, run them with bounded concurrency,
keep their leases alive, and report results in batches.

Claims are per shard key and queue: the worker keeps a set of dirty (key, queue)
pairs — filled from the tasks channel's NOTIFY payload (the key with new work; an
empty or unparsable payload marks every held key), every held key on each poll
interval, and a local decision's hand-off that left work queued — and each tick takes
one dirty pair (round robin) with one claim statement. A claim that fills every free
slot leaves its pair dirty. Keys the worker does not hold (``HeldShards``) are never
taken from.

Reports are buffered and flushed together every few milliseconds (or when a batch
fills): one transaction, per key, upserts the runs' decide rows (in run-id order),
deletes the queue rows and applies the fenced task updates — see
``legato.engine.reports``. A transactional task's completion is the exception: it is
applied in the body's own transaction (``worker_attempts.run_transactional``).

Running one attempt is ``worker_attempts.py``; keeping the leases ``worker_leases.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.arguments import check_bytes, check_count
from legato.db.schema_names import engine_schema
from legato.engine import hooks
from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy, supervise
from legato.engine.loops.worker_attempts import (
    Committed,
    InFlight,
    Outcome,
    alive,
    context_of,
    run_attempt,
    run_transactional,
)
from legato.engine.loops.worker_claims import WorkerClaims
from legato.engine.loops.worker_leases import extend_leases, keep_leases
from legato.engine.progress_writer import with_progress
from legato.engine.reports import Report, write_flush
from legato.engine.repositories import notify, queue_leases, task_queue, tasks
from legato.engine.transport.driver import DriverStatements
from legato.engine.transport.handoff import Absorbed, LocalReports
from legato.engine.transport.wakeups import Wakeups, payloads
from legato.flow import App
from legato.observability.logs import named_runs
from legato.outages import database_failure, is_database_error, traceback_at_debug
from legato.schema import Shards

log = logging.getLogger("legato.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# The same limit as a run's input (Client(max_payload_bytes=...)).
DEFAULT_MAX_OUTPUT_BYTES = 1 << 20


class Worker(Loop):
    """Runs the tasks of ``app`` from ``queues`` of the shard keys it holds (``held``,
    every key of ``shards`` by default); at most ``concurrency`` at once."""

    name = "worker"

    def __init__(
        self,
        engine: AsyncEngine,
        app: App,
        *,
        shards: Shards,
        held: HeldShards | None = None,
        queues: tuple[str, ...] = ("default",),
        concurrency: int = 16,
        wakeups: Wakeups | None = None,
        lease: timedelta = timedelta(seconds=30),
        poll_interval: float = 1.0,
        flush_interval: float = 0.002,
        grace_period: float = 30.0,
        worker_id: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        reports: LocalReports | None = None,
        restarts: RestartPolicy | None = None,
    ) -> None:
        schema = engine_schema(engine, "Worker")
        # No channel for the base loop: the worker subscribes itself, for the payload.
        super().__init__(
            poll_interval=poll_interval, wakeups=wakeups, channel=None, restarts=restarts
        )
        self.shards = shards
        self.held: HeldShards = AllShards(shards) if held is None else held
        self._tasks_channel = notify.tasks_channel(schema)
        self._listening = False
        # (key, queue) pairs that may have claimable work, in the order they are taken.
        self._dirty: dict[tuple[int, str], None] = {}
        self._all_marked_at = -float("inf")  # when every held key was last marked dirty
        check_count("concurrency", concurrency)
        self.max_output_bytes = check_bytes("max_output_bytes", max_output_bytes)
        self.engine = engine
        # A flush that is one statement goes out on the driver path (reports.write_flush).
        self._driver = DriverStatements(engine)
        self.app = app
        self.queues = queues
        self.worker_id = worker_id or default_worker_id()
        self._claims = WorkerClaims(
            engine, app, queues, shards, self.worker_id, lease, self.once_a_poll
        )
        self.task_names = self._claims.task_names
        # What a local decision may hand this worker (legato.engine.transport.handoff): what it
        # claims, less what a limit admits through Admission.
        self.serves = frozenset((q, t) for q in queues for t in self.task_names)
        self.serves_unlimited = frozenset(
            (q, t)
            for q, t in self.serves
            if q not in app.queue_limits
            and app.tasks[t].concurrency is None
            and app.tasks[t].rate_limit is None
        )
        # A Runtime that also decides wakes its decider in memory when a report commits.
        self.reports = reports
        self._decide_channel = notify.decide_channel(schema)
        self.concurrency = concurrency
        self.lease = lease
        self.flush_interval = flush_interval
        self.grace_period = grace_period
        self._inflight: dict[uuid.UUID, InFlight] = {}
        self._reports: list[Report] = []
        self._flush_wanted = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._report_backoff = 0.0
        # Work may be queued that this worker could not take: the last claim of these
        # pairs filled every free slot, or it was woken with none free. A slot that frees
        # then wakes it.
        self._behind: set[tuple[int, str]] = set()
        self._starved = False
        # Slots promised to a claim or a local decision's hand-off still under way: the
        # two together never exceed ``concurrency``.
        self._reserved = 0
        self._settled = asyncio.Event()  # set whenever no slot is reserved
        self._settled.set()
        self.completed = 0

    # -- side tasks -------------------------------------------------------------------------

    def _check_side_tasks(self) -> None:
        """Start the flusher and the lease keeper (supervised, like the loop) on the first
        tick; pass on the failure of one that crashed too often, failing the worker."""
        if not self._background:
            self._background = [
                asyncio.create_task(
                    supervise(f"worker {name}", body, self.restarts, self._stopping),
                    name=f"legato-worker-{name}",
                )
                for name, body in (("flusher", self._flusher), ("lease keeper", self._lease_keeper))
            ]
        for task in self._background:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise error  # a LoopFailed

    # -- claiming ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Listen on the tasks channel for the keys with new work, then run the loop."""
        async with payloads(self._wakeups, self._tasks_channel, self._on_tasks_payload):
            self._listening = True
            try:
                await super().run()
            finally:
                self._listening = False

    def _on_tasks_payload(self, payload: str) -> None:
        """A queue NOTIFY: its key (every held key for an empty or unparsable payload)
        may have work."""
        if not self._listening:
            return
        named = notify.shards_of(payload, self.held.held())
        for shard in named:
            self._mark(shard)
        if named:
            self.nudge()

    def claim_soon(self, shard: int) -> None:
        """Claim from key ``shard`` now: a local decision left work there it could not
        hand over (no free slot, a limit)."""
        self._mark(shard)
        self.nudge()

    def _mark(self, shard: int) -> None:
        for queue in self.queues:
            self._dirty.setdefault((shard, queue), None)

    def _next_dirty(self, held: Sequence[int]) -> tuple[int, str] | None:
        """The first dirty pair of a held key, dropping those of keys no longer held."""
        for pair in list(self._dirty):
            del self._dirty[pair]
            if pair[0] in held:
                return pair
            self._behind.discard(pair)
        return None

    @property
    def _saturated(self) -> bool:
        return self._starved or bool(self._behind)

    async def tick(self) -> bool:
        self._check_side_tasks()
        held = self.held.held()
        now = time.monotonic()
        if now - self._all_marked_at >= self.once_a_poll:
            self._all_marked_at = now
            for shard in held:
                self._mark(shard)
        free = self._free()
        if free <= 0:
            # What woke it (a NOTIFY, a local decision's nudge) may be queued: claim as
            # soon as a slot frees, not at the next poll.
            self._starved = bool(self._dirty)
            return False
        self._starved = False
        pair = self._next_dirty(held)
        if pair is None:
            return False
        pairs = [pair, *self._spanned_with(pair, held)]
        self._reserve(free)
        try:
            claimed = await self._claims.claim([shard for shard, _ in pairs], pair[1], free)
        except BaseException:
            self._dirty.update(dict.fromkeys(pairs))  # still to take
            raise
        finally:
            self._release(free)
        self._start(claimed)
        if len(claimed) >= free:
            self._dirty.update(dict.fromkeys(pairs))  # a full claim: more may wait there
            self._behind.update(pairs)
        else:
            self._behind.difference_update(pairs)
        return bool(self._dirty)

    def _spanned_with(self, pair: tuple[int, str], held: Sequence[int]) -> list[tuple[int, str]]:
        """On one PostgreSQL (a claim spans keys), every other held key of ``pair``'s queue
        when it is unlimited, its dirty marks taken off: one claim serves them all, as the
        one queue did before keys. A claim of the dirty keys alone left the attempts
        whose NOTIFY had not arrived yet to claims of their own."""
        first, queue = pair
        if not self._claims.spans_keys(queue):
            return []
        for dirty in [dirty for dirty in self._dirty if dirty[1] == queue]:
            del self._dirty[dirty]
        return [(shard, queue) for shard in held if shard != first]

    def _free(self) -> int:
        return self.concurrency - len(self._inflight) - self._reserved

    def _reserve(self, n: int) -> None:
        self._reserved += n
        if self._reserved:
            self._settled.clear()

    def reserve(self, wanted: int) -> int:
        """Reserve up to ``wanted`` slots for a local decision's hand-off (none while the
        worker is stopping, or while work may be queued that it could not take: then the
        queued attempts go first, in the claim's order); how many were reserved."""
        if self.stopping or self._saturated:
            return 0
        taken = max(min(wanted, self._free()), 0)
        self._reserve(taken)
        return taken

    def unreserve(self, n: int) -> None:
        """Give back ``n`` slots reserved for a local decision's hand-off once it ended
        (its leased attempts hold theirs from ``accept`` on)."""
        self._release(n)
        self._wake_if_behind()

    def _release(self, n: int) -> None:
        self._reserved -= n
        if not self._reserved:
            self._settled.set()

    def _wake_if_behind(self) -> None:
        """A slot is free and work may be queued that this worker could not take: claim
        again now."""
        if self._saturated and self._free() > 0 and self._wake is not None:
            self._wake.set()

    def accept(self, claimed: list[task_queue.Claimed]) -> None:
        """Run attempts a committed local decision leased to this worker, in the slots
        reserved for them (the caller then gives the reservation back: ``_inflight``
        counts them from here)."""
        self._start(claimed)

    def _start(self, claimed: list[task_queue.Claimed]) -> None:
        hooks.attempts_claimed(claimed)
        for item in claimed:
            flight = InFlight(claimed=item, definition=self.app.tasks[item.task_name])
            self._inflight[item.task_id] = flight
            flight.task = asyncio.create_task(self._execute(flight))

    # -- running ----------------------------------------------------------------------------

    async def _execute(self, flight: InFlight) -> None:
        """Run the attempt in its slot; free the slot by its outcome."""
        ctx = with_progress(context_of(flight), self.engine, flight.claimed, lambda: flight.lost)
        stopping = self._stopping.is_set
        outcome: Outcome
        if flight.definition.transactional:
            outcome = await run_transactional(
                self.engine, flight, ctx, self.max_output_bytes, stopping
            )
        else:
            outcome = await run_attempt(self.engine, flight, ctx, self.max_output_bytes, stopping)
        if isinstance(outcome, Committed):
            self._finished([outcome.task_id], {outcome.shard})
        elif outcome is not None:
            self._reports.append(outcome)
            self._flush_wanted.set()
        elif flight.lost:
            self._forget(flight.claimed.task_id)

    async def _flusher(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self.flush_interval > 0 and self._more_may_report():
                await asyncio.sleep(self.flush_interval)
            if not await self.flush():
                # Back off while the database is away; new results keep joining the batch.
                await asyncio.sleep(self._report_backoff)
                self._flush_wanted.set()

    def _more_may_report(self) -> bool:
        """Whether waiting ``flush_interval`` may let more reports join the batch: it is
        not full, and attempts are still running. With none running the wait would
        only delay the runs' next steps (an agent loop's at low load)."""
        return len(self._reports) < min(self.concurrency, len(self._inflight))

    async def flush(self) -> bool:
        """Write buffered reports (``reports.write_flush``); keep them if the database
        fails (and say whether it worked)."""
        if not self._reports:
            return True
        batch, self._reports = self._reports, []
        no_absorbs: list[Absorbed] = []
        writing = self.reports.committing() if self.reports else contextlib.nullcontext(no_absorbs)
        try:
            with writing as absorbed:
                channel, local = self._decide_channel, self.reports
                await write_flush(self._driver, batch, self.shards, local, channel, absorbed)
        except Exception as error:
            self._reports = batch + self._reports
            if not is_database_error(error):
                self._flush_wanted.set()  # for the restarted flusher
                raise  # a bug: the flusher's supervisor restarts it, the reports kept
            self._report_backoff = min(max(self._report_backoff * 2, 0.1), 5.0)
            log.warning(
                "reporting %d results (runs %s) failed (%s); retrying in %.1fs",
                len(self._reports),
                named_runs(r.move.run_id for r in self._reports),
                database_failure(error),
                self._report_backoff,
                exc_info=traceback_at_debug(log, error),
            )
            return False
        if self._report_backoff:
            log.info("reporting works again")
            self._report_backoff = 0.0
        self._finished([report.move.task_id for report in batch], {r.shard for r in batch})
        return True

    def _finished(self, task_ids: list[uuid.UUID], shards: set[int]) -> None:
        """Free the slots of attempts whose outcome is committed (runs of keys ``shards``)."""
        for task_id in task_ids:
            self._inflight.pop(task_id, None)
        self.completed += len(task_ids)
        if self.reports is not None:
            # Decide at once, for those keys, not when the NOTIFY arrives.
            self.reports.reported(sorted(shards))
        self._wake_if_behind()

    def _forget(self, task_id: uuid.UUID) -> None:
        """Free the slot of an attempt that ends without a report (taken away, superseded)."""
        self._inflight.pop(task_id, None)
        self._wake_if_behind()

    # -- leases -----------------------------------------------------------------------------

    async def _lease_keeper(self) -> None:
        # The decider announces cancelled attempts: check leases at once rather than at
        # the next extension. ``extend_leases`` looked up at each call (tests replace it).
        channel = notify.cancel_channel(self.schema_name)
        await keep_leases(self.lease, self._wakeups, channel, lambda: self.extend_leases())

    async def extend_leases(self) -> None:
        """Extend the leases of running attempts; cancel those this worker no longer holds.

        An attempt whose task declared a heartbeat timeout and has not heartbeat within
        it is left to expire, so the sweeper times it out (``worker_attempts.alive``).
        """
        running = alive(self._inflight, time.monotonic())
        if not running:
            return
        held = await extend_leases(
            self.engine,
            self.shards,
            self.worker_id,
            self.lease,
            [(f.claimed.shard, f.claimed.queue, task_id) for task_id, f in running.items()],
        )
        for task_id, flight in running.items():
            if task_id not in held and flight.task is not None:
                flight.lost = True
                flight.task.cancel()

    # -- stopping ---------------------------------------------------------------------------

    async def on_stop(self) -> None:
        """Let in-flight tasks finish within the grace period, release the rest at once."""
        # A local decision under way may still hand attempts over: take them in first.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout=self.grace_period)
        running = [f.task for f in self._inflight.values() if f.task is not None]
        if running:
            _, pending = await asyncio.wait(running, timeout=self.grace_period)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self.flush()
        leftovers = [f.claimed for f in self._inflight.values() if not f.lost]
        if leftovers:
            by_shard: dict[int, list[task_queue.Claimed]] = {}
            for claimed in leftovers:
                by_shard.setdefault(claimed.shard, []).append(claimed)
            async with self.engine.begin() as conn:
                for shard, group in sorted(by_shard.items()):
                    await queue_leases.release(
                        conn, shard, self.worker_id, [(c.queue, c.task_id) for c in group]
                    )
                    await tasks.release_attempts(
                        conn, shard, [(c.run_id, c.task_id, c.attempt) for c in group]
                    )
                    # A released lease is an UPDATE: task_queue's insert trigger does not
                    # announce it, so this does, for its key.
                    await notify.send(conn, self._tasks_channel, str(shard))
            log.info("released %d unfinished attempts", len(leftovers))
        self._inflight.clear()
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._background = []

    @property
    def schema_name(self) -> str:
        return str(self.engine.get_execution_options()["schema_translate_map"]["legato"])
