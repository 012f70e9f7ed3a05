"""The decider loop: claim runs from decide_queue, decide each under its row lock,
apply the pure decider's actions. Workers hear of new attempts from the NOTIFY of
``task_queue``'s insert trigger; the decider announces cancelled attempts itself.

In the distributed layout work is taken one shard key at a time: a batch is runs of
one key, and every statement of its decision (lock, snapshot, writes) is within that
key. On one PostgreSQL (``Shards.distributed`` False) a tick takes one batch across
its dirty keys, and locks, reads and writes it in one statement each (docs/design.md,
"The statement layout"). The loop keeps a set of
dirty keys — the key in each decide NOTIFY's payload (every held key for an empty or
unparsable one), the keys a local worker's reports touched (``decide_now``), and every
held key once per poll interval — and each tick takes from each dirty key it holds; a
take that returns a full batch leaves its key dirty.

Several runs are decided per transaction; when a batch fails, its runs are decided
again one by one, each inside a savepoint, so one bad run (a bug, a corrupted row, a
deadlock with a parent/child decision) cannot sink the batch: the others commit, and
its decide row stays, backing off exponentially per run. After ``max_failures`` in a
row the run is quarantined (``legato runs list --quarantined``) until resumed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import assert_never

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato.engine import hooks
from legato.engine.decider.backoff import exponential
from legato.engine.decider.decide import decide
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
    BufferedSignal,
    CancelChildRun,
    ConsumeSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    MarkObserved,
    ResolveTask,
    RunSnapshot,
    StartChildRun,
    TaskError,
    TaskRecord,
)
from legato.engine.loops import relay
from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import (
    decide_queue,
    decisions,
    definitions,
    notify,
    outbox,
    run_events,
    runs,
    signals,
    task_queue,
    tasks,
    timers,
)
from legato.engine.timer_semantics import timer_row
from legato.engine.transport import handoff
from legato.engine.transport.handoff import LocalHandoff
from legato.engine.transport.wakeups import Wakeups, payload_shard, payloads
from legato.flow.spec import WorkflowSpec
from legato.outages import one_line, traceback_at_debug
from legato.schema import RunStatus, Shards, TaskState

log = logging.getLogger("legato.decider")


class SpecCache:
    """Specs by (name, version): a version never changes once stored."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, int], WorkflowSpec] = {}

    async def get(self, conn: AsyncConnection, name: str, version: int) -> WorkflowSpec:
        key = (name, version)
        spec = self._specs.get(key)
        if spec is None:
            raw = await definitions.load_spec(conn, name, version)
            if raw is None:
                raise LookupError(f"workflow {name!r} version {version} is not stored")
            spec = WorkflowSpec.model_validate(raw)
            self._specs[key] = spec
        return spec


_FINISHED_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.SKIPPED, TaskState.CANCELLED}
)


@dataclass
class Batch:
    """The writes of a batch of decisions of runs of key ``shard`` (of any keys when None:
    one PostgreSQL), gathered so each table gets one statement (within that key, or
    spanning the batch's keys).

    The one place the decider's actions become the repositories' rows: ``add`` maps
    each action to the row it writes as it gathers it; ``write`` only settles what
    needs the whole batch (which rows this decision records as observed).
    """

    now: datetime
    shards: Shards
    shard: int | None
    queue_of: dict[uuid.UUID, str | None] = field(default_factory=dict)
    creates: list[tasks.NewTask] = field(default_factory=list)
    enqueues: list[task_queue.NewQueueRow] = field(default_factory=list)
    timers: list[timers.DueTimer] = field(default_factory=list)
    consumed: list[signals.Consumption] = field(default_factory=list)
    resolves: list[tasks.Transition] = field(default_factory=list)
    observed: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    children: list[tuple[uuid.UUID, StartChildRun]] = field(default_factory=list)
    cancel_children: list[uuid.UUID] = field(default_factory=list)
    events: list[run_events.NewEvent] = field(default_factory=list)
    finishes: list[tuple[runs.RunRow, FinishRun]] = field(default_factory=list)
    facts: list[hooks.DecisionFacts] = field(default_factory=list)  # logged after commit
    lifecycle: list[outbox.Event] = field(default_factory=list)  # webhooks, same transaction

    def enqueues_by_key(self) -> dict[int, list[task_queue.NewQueueRow]]:
        """The attempts this batch enqueues, by their runs' keys, keys ascending."""
        grouped: dict[int, list[task_queue.NewQueueRow]] = {}
        for row in self.enqueues:
            grouped.setdefault(self.shards.of_run(row.run_id), []).append(row)
        return dict(sorted(grouped.items()))

    @property
    def cancels_attempts(self) -> bool:
        return any(move.state is TaskState.CANCELLED for move in self.resolves)

    def add(self, run: runs.RunRow, last_seq: int, actions: Sequence[Action]) -> None:
        """Gather one run's actions, in the decider's order, as rows."""
        seq = last_seq
        for action in actions:
            match action:
                case CreateTask():
                    self.creates.append(
                        tasks.NewTask(
                            run_id=run.id,
                            id=action.task_id,
                            node_id=action.node_id,
                            iteration=action.iteration,
                            attempt=action.attempt,
                            kind=action.kind,
                            state=action.state,
                            task_name=action.task_name,
                            queue=action.queue,
                            input=action.input,
                            output=action.output,
                            error=action.error,
                            event_name=action.event_name,
                            created_at=self.now,
                            available_at=action.available_at,
                            finished_at=self.now if action.state in _FINISHED_STATES else None,
                            # settled by write(), once the batch's observations are in
                            observed=False,
                        )
                    )
                case EnqueueTask():
                    self.enqueues.append(
                        task_queue.NewQueueRow(
                            queue=action.queue,
                            task_id=action.task_id,
                            run_id=run.id,
                            attempt=action.attempt,
                            task_name=action.task_name,
                            priority=action.priority,
                            available_at=action.available_at,
                        )
                    )
                case ArmTimer():
                    self.timers.append(timer_row(run.id, action))
                case ConsumeSignal():
                    self.consumed.append(
                        signals.Consumption(
                            run_id=run.id, id=action.signal_id, consumed_by=action.task_id
                        )
                    )
                case ResolveTask():
                    self.resolves.append(
                        tasks.Transition(
                            run_id=run.id,
                            task_id=action.task_id,
                            attempt=action.attempt,
                            state=action.state,
                            output=action.output,
                            error=action.error,
                        )
                    )
                case MarkObserved():
                    self.observed.extend((run.id, task_id) for task_id in action.task_ids)
                case StartChildRun():
                    self.children.append((run.id, action))
                case CancelChildRun():
                    self.cancel_children.append(action.run_id)
                case AppendEvent():
                    seq += 1
                    self.events.append(
                        run_events.NewEvent(
                            run_id=run.id,
                            seq=seq,
                            type=action.type,
                            node_id=action.node_id,
                            iteration=action.iteration,
                            attempt=action.attempt,
                            data=action.data,
                        )
                    )
                case FinishRun():
                    self.finishes.append((run, action))
                case _:
                    assert_never(action)

    async def write(self, conn: AsyncConnection) -> None:
        """Apply every gathered write: the batch's rows in one statement
        (``decisions.write``), with the rare writes that need statements of their own
        (cancelled queue rows, child runs) around it. A child run lives in its parent's
        key (``child_run_id_for`` keeps the parent's key bits); a child or parent of
        another key (a run started before keys existed) is written in its own."""
        # Rows this decision creates or resolves carry their observed flag in that same
        # write; only rows finished by others (workers, timers) need the extra UPDATE.
        observed = {task_id for _, task_id in self.observed}
        resolved = {move.task_id: move for move in self.resolves}
        # The one statement's parts do not see each other's writes, so an attempt this
        # batch creates and resolves (started, then cancelled by a failure further on)
        # is inserted in its final state, and its queue row is never written.
        folded = [
            row._replace(
                state=move.state,
                output=move.output,
                error=move.error,
                finished_at=self.now,
            )
            if (move := resolved.get(row.id))
            else row
            for row in self.creates
        ]
        created = {row.id for row in self.creates}
        moves = [move for move in self.resolves if move.task_id not in created]
        # Queue rows before task rows: the order a worker's claim takes them in, so
        # they go in a statement of their own, before the moves (cancellations only).
        cancelled = [
            (move.run_id, queue, move.task_id)
            for move in moves
            if (queue := self.queue_of.get(move.task_id))
        ]
        if self.shard is None:
            held = [(self.shards.of_run(run_id), q, task_id) for run_id, q, task_id in cancelled]
            await task_queue.remove_held(conn, held)
        else:
            await task_queue.remove(conn, self.shard, [(q, t) for _, q, t in cancelled])
        writes = decisions.Writes(
            creates=[
                row._replace(observed=True) if row.id in observed else row for row in folded
            ],
            enqueues=[row for row in self.enqueues if row.task_id not in resolved],
            timers=self.timers,
            consumed=self.consumed,
            moves=[
                move._replace(observed=True) if move.task_id in observed else move
                for move in moves
            ],
            observed=[
                pair
                for pair in self.observed
                if pair[1] not in created and pair[1] not in resolved
            ],
            events=self.events,
            lifecycle=self.lifecycle,
            finishes=[
                runs.Finish(run_id=run.id, status=f.status, output=f.output, error=f.error)
                for run, f in self.finishes
            ],
        )
        if self.shard is None:
            applied = await decisions.write_held(conn, self.shards, writes, self.now)
        else:
            applied = await decisions.write(conn, self.shard, writes, self.now)
        stale = [m.task_id for m in moves if m.task_id not in applied]
        if stale:
            raise DecisionAborted(f"tasks {stale} were no longer active")
        for parent_id, child in self.children:
            await start_child(conn, self.shards.of_run(child.task_id), parent_id, child)
        for child_id in self.cancel_children:
            child_shard = self.shards.of_run(child_id)
            if await runs.request_cancel(conn, child_shard, child_id, self.now):
                await decide_queue.enqueue(conn, child_shard, [child_id], "parent cancelled")
        await complete_parents(conn, self.shards, self.finishes)


class DecisionAborted(Exception):
    """A fenced write of a decision matched nothing: the snapshot was wrong."""


async def decide_runs(
    conn: AsyncConnection,
    shards: Shards,
    keys: Sequence[int],
    run_ids: Sequence[uuid.UUID],
    specs: SpecCache,
    now: datetime,
) -> Batch:
    """Lock, load, decide and apply a batch of runs of ``keys``, in the caller's
    transaction. In the distributed layout ``keys`` is one key and every statement is
    within it; on one PostgreSQL the lock, the snapshot and the writes each span the
    batch's keys in one statement."""
    if shards.distributed:
        (shard,) = keys
        locked = await runs.lock_many(conn, shard, run_ids)
    else:
        locked = await runs.lock_many_held(conn, keys, run_ids)
    running = [(run, seq) for run, seq in locked if run.status is RunStatus.RUNNING]
    ids = [run.id for run, _ in running]
    if not ids:
        loaded = {}
    elif shards.distributed:
        loaded = await tasks.snapshots(conn, keys[0], ids)
    else:
        loaded = await tasks.snapshots_held(conn, keys, ids)
    batch = Batch(
        now=now,
        shards=shards,
        shard=keys[0] if shards.distributed else None,
        queue_of={row.task_id: row.queue for rows, _ in loaded.values() for row in rows},
    )
    for run, last_seq in running:
        spec = await specs.get(conn, run.workflow_name, run.workflow_version)
        snapshot = RunSnapshot(
            run_id=run.id,
            status=run.status,
            input=run.input,
            cancel_requested=run.cancel_requested,
            timed_out=run.timed_out,
            tasks=tuple(map(_record, loaded[run.id][0])),
            signals=tuple(map(_buffered, loaded[run.id][1])),
        )
        actions = decide(spec, snapshot, now)
        batch.add(run, last_seq, actions)
        batch.facts.append(hooks.decision_facts(spec, run, last_seq, snapshot, actions, now))
        batch.lifecycle += relay.lifecycle_events(run.id, batch.facts[-1].first, actions)
    await batch.write(conn)
    return batch


def _record(row: tasks.TaskRow) -> TaskRecord:
    return TaskRecord(
        task_id=row.task_id,
        node_id=row.node_id,
        iteration=row.iteration,
        attempt=row.attempt,
        kind=row.kind,
        state=row.state,
        output=row.output,
        error=row.error,
        observed=row.observed,
        created_at=row.created_at,
        finished_at=row.finished_at,
        cached=row.cached,
    )


def _buffered(row: signals.PendingSignal) -> BufferedSignal:
    return BufferedSignal(
        signal_id=row.signal_id, name=row.name, payload=row.payload, created_at=row.created_at
    )


async def start_child(
    conn: AsyncConnection, shard: int, parent_id: uuid.UUID, action: StartChildRun
) -> None:
    """Start a child run of key ``shard`` (its parent's) inside the parent's decision (its
    id is the CHILD task's id), in the parent's trace."""
    version = await definitions.deployed_version(conn, action.workflow_name)
    if version is None:
        raise LookupError(
            f"child workflow {action.workflow_name!r} is not deployed (legato deploy --app ...)"
        )
    await runs.start_runs(
        conn,
        shard,
        [
            runs.NewRun(
                run_id=action.task_id,
                workflow_name=action.workflow_name,
                workflow_version=version,
                input=action.input,
                parent_run_id=parent_id,
            )
        ],
        "child started",
        children=True,
    )


async def complete_parents(
    conn: AsyncConnection, shards: Shards, finishes: Sequence[tuple[runs.RunRow, FinishRun]]
) -> None:
    """A finished child's result completes its parent's CHILD task, like a worker's report
    (in the parent's key: the child's, but for a child started before keys existed)."""
    reports: list[Report] = []
    for run, action in finishes:
        if run.parent_run_id is None:
            continue
        if action.status is RunStatus.SUCCEEDED:
            state, output, error = TaskState.COMPLETED, action.output, None
        else:
            state, output = TaskState.FAILED, None
            error = action.error or TaskError(
                type="ChildRunCancelled",
                message=f"child run {run.id} was {action.status.value}",
                retryable=False,
            )
        move = tasks.Transition(
            run_id=run.parent_run_id,
            task_id=run.id,
            attempt=None,
            state=state,
            output=output,
            error=error,
        )
        reports.append(Report(move, shards.of_run(run.parent_run_id)))
    await apply_reports(conn, shards, reports, "child finished")


def decision_retry_delay(failures: int, base: timedelta, cap: timedelta) -> timedelta:
    """How long a run waits after its ``failures``-th failed decision in a row: ``base``
    doubled per failure, at most ``cap``."""
    return exponential(base, failures, cap)


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
        restarts: RestartPolicy | None = None,
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
        self.decided = 0
        self.takes = 0  # decide_queue takes sent (one per key and tick it was dirty)
        # A sibling loop in this process, woken when this one finds more than one run
        # waiting in a key: under load two batches of the key overlap, while a lone run
        # (a signal) wakes one loop only and nothing competes with its decision.
        self.helper = helper
        self.handoff = handoff  # a Runtime that also runs a worker leases attempts to it
        self._decide_channel = notify.decide_channel(schema)
        self._listening = False
        # Keys that may have runs to decide, in the order they are taken.
        self._dirty: dict[int, None] = {}
        self._all_marked_at = -float("inf")  # when every held key was last marked dirty

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
        """One take per dirty held key (distributed layout, each key's batch in its own
        transaction), or one take over every dirty held key (one PostgreSQL); True when a
        take came back full (its keys stay dirty) or a key was marked meanwhile."""
        keys = self._due_keys()
        if not keys:
            return False
        if not self.shards.distributed:
            if await self._decide(keys):
                self._dirty.update(dict.fromkeys(keys))
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
    ) -> dict[uuid.UUID, int]:
        """The layout's take: of the one key ``keys`` holds (distributed), or across them."""
        self.takes += 1
        if self.shards.distributed:
            (shard,) = keys
            return await decide_queue.take(conn, shard, limit, run_ids)
        return await decide_queue.take_held(conn, keys, self.shards.count, limit, run_ids)

    def _keys_of(self, run_ids: Iterable[uuid.UUID]) -> list[int]:
        return sorted({self.shards.of_run(run_id) for run_id in run_ids})

    async def _decide(self, keys: Sequence[int]) -> bool:
        """Take and decide one batch of ``keys``; True when the take was full."""
        began = time.time_ns()
        claimed: list[uuid.UUID] = []
        try:
            async with handoff.decision(self.handoff) as local, self.engine.begin() as conn:
                claimed = list(await self._take(conn, keys, self.batch_size))
                if not claimed:
                    return False
                # Read after the take, whose ``available_at <= now()`` used the server's
                # clock at the transaction's start: a clock read before it could stamp a
                # run taken at its start time with an earlier time.
                now = datetime.now(UTC)
                if len(claimed) >= self.batch_size and self.helper is not None:
                    self.helper.decide_now(keys)  # more may wait in these keys
                batch = await decide_runs(
                    conn, self.shards, self._keys_of(claimed), claimed, self.specs, now
                )
                for shard, rows in batch.enqueues_by_key().items():
                    await local.lease(conn, shard, rows, now)
                await self._announce(conn, batch.cancels_attempts)
            self.decided += len(claimed)
            hooks.decisions_committed(batch.facts, began)
        except Exception:
            if not claimed:
                raise
            # One bad run must not sink the batch: the batch rolled back, so decide the
            # same runs one by one, each in its own savepoint.
            hooks.decision_batch_failed(len(claimed), began)
            await self._one_by_one(keys, claimed)
        return len(claimed) >= self.batch_size

    async def _one_by_one(self, keys: Sequence[int], run_ids: Sequence[uuid.UUID]) -> None:
        began = time.time_ns()
        facts: list[hooks.DecisionFacts] = []
        async with handoff.decision(self.handoff) as local, self.engine.begin() as conn:
            cancels = False
            taken = await self._take(conn, keys, len(run_ids), run_ids)
            now = datetime.now(UTC)  # after the take, as in ``_decide``
            for run_id, failed_before in taken.items():
                shard = self.shards.of_run(run_id)
                try:
                    async with conn.begin_nested():
                        batch = await decide_runs(
                            conn, self.shards, [shard], [run_id], self.specs, now
                        )
                        await local.lease(conn, shard, batch.enqueues, now)
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
