"""A decision batch: the runs of one shard key (of the keys a process holds, on one
PostgreSQL) locked, loaded and decided in the caller's transaction, each run's actions
interpreted into the repository rows they write (``Batch.add``: the one interpreter of
the ``Action`` union, exhaustive), and the whole batch written in one statement
(``Batch.write``); a child's start and a finished child's parent are statements of
their own (``legato.engine.loops.child_runs``).

The decider loop (``legato.engine.loops.decider``) runs a batch per take, and again one
run at a time when a batch fails.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine import fair_keys, hooks
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
    TaskRecord,
)
from legato.engine.input_check import InputChecks
from legato.engine.loops import relay
from legato.engine.loops.child_runs import complete_parents, start_child
from legato.engine.repositories import (
    decide_queue,
    decisions,
    definitions,
    outbox,
    queue_leases,
    run_events,
    runs,
    signals,
    task_queue,
    tasks,
    timers,
)
from legato.engine.repositories.decider_take import Taken
from legato.engine.timer_semantics import timer_row
from legato.engine.transport.handoff import DecisionLeases
from legato.flow.spec import WorkflowSpec
from legato.schema import RunStatus, Shards, TaskState
from legato.schema.types import strip_nul

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
    fair: fair_keys.FairKeys | None = None  # the app's fair queues, whose rows get keys
    # The decision's hand-off to its process's worker: what it takes of the enqueued
    # attempts is written leased to it (none without a local worker).
    handing: DecisionLeases | None = None
    runs_of: dict[uuid.UUID, runs.RunRow] = field(default_factory=dict)
    # The transaction holds other batches' writes too (decided one by one): it waits.
    shares_transaction: bool = False

    def by_key(
        self, rows: Sequence[task_queue.NewQueueRow]
    ) -> dict[int, list[task_queue.NewQueueRow]]:
        """Enqueued attempts by their runs' keys, keys ascending."""
        grouped: dict[int, list[task_queue.NewQueueRow]] = {}
        for row in rows:
            grouped.setdefault(self.shards.of_run(row.run_id), []).append(row)
        return dict(sorted(grouped.items()))

    @property
    def cancels_attempts(self) -> bool:
        return any(move.state is TaskState.CANCELLED for move in self.resolves)

    def add(self, run: runs.RunRow, last_seq: int, actions: Sequence[Action]) -> None:
        """Gather one run's actions, in the decider's order, as rows."""
        self.runs_of[run.id] = run
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
                    key, weight = fair_keys.row_key(self.fair, action, self.creates)
                    self.enqueues.append(
                        task_queue.NewQueueRow(
                            queue=action.queue,
                            task_id=action.task_id,
                            run_id=run.id,
                            attempt=action.attempt,
                            task_name=action.task_name,
                            priority=action.priority,
                            available_at=action.available_at,
                            fair_key=key,
                            fair_weight=weight,
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
            await queue_leases.remove_held(conn, held)
        else:
            await queue_leases.remove(conn, self.shard, [(q, t) for _, q, t in cancelled])
        enqueued = [row for row in self.enqueues if row.task_id not in resolved]
        # By key only for a hand-off, which reserves and records per key.
        enqueues = self.by_key(enqueued) if self.handing is not None else {}
        handed = self._choose(enqueues, folded)
        owner = None if self.handing is None else self.handing.owner
        creates = [row._replace(observed=True) if row.id in observed else row for row in folded]
        writes = decisions.Writes(
            creates=[
                _handed_task(row, self.now, owner) if row.id in handed else row for row in creates
            ],
            enqueues=[
                row._replace(lease_owner=owner) if row.task_id in handed else row
                for row in enqueued
            ],
            timers=self.timers,
            consumed=self.consumed,
            moves=[
                move._replace(observed=True) if move.task_id in observed else move for move in moves
            ],
            observed=[
                pair for pair in self.observed if pair[1] not in created and pair[1] not in resolved
            ],
            events=self.events,
            lifecycle=self.lifecycle,
            finishes=[
                runs.Finish(run_id=run.id, status=f.status, output=f.output, error=f.error)
                for run, f in self.finishes
            ],
            handed_lease=None if self.handing is None else self.handing.lease,
            waits_for_flush=waits_for_flush(
                bool(self.finishes),
                bool(handed),
                any(row.task_id not in handed for row in enqueued),
                self.shares_transaction,
            ),
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
        # Last: a write that failed above hands nothing over.
        if self.handing is not None:
            for shard, rows in enqueues.items():
                claimed = [
                    self._claimed(shard, row, handed[row.task_id])
                    for row in rows
                    if row.task_id in handed
                ]
                await self.handing.written(conn, shard, rows, claimed, self.now)

    def _choose(
        self,
        enqueues: dict[int, list[task_queue.NewQueueRow]],
        creates: Sequence[tasks.NewTask],
    ) -> dict[uuid.UUID, tasks.NewTask]:
        """The attempts handed to the local worker, by task id, with the rows that
        create them: of those this batch creates queued (every enqueued attempt is)."""
        if self.handing is None:
            return {}
        queued = {row.id: row for row in creates if row.state is TaskState.QUEUED}
        handed: dict[uuid.UUID, tasks.NewTask] = {}
        for shard, rows in enqueues.items():
            chosen = self.handing.choose(shard, [r for r in rows if r.task_id in queued], self.now)
            handed.update((row.task_id, queued[row.task_id]) for row in chosen)
        return handed

    def _claimed(
        self, shard: int, row: task_queue.NewQueueRow, task: tasks.NewTask
    ) -> task_queue.Claimed:
        """What the worker runs of an attempt written leased to it: what its claim reads."""
        run = self.runs_of[row.run_id]
        return task_queue.Claimed(
            shard=shard,
            queue=row.queue,
            task_id=row.task_id,
            run_id=row.run_id,
            attempt=row.attempt,
            task_name=row.task_name,
            node_id=task.node_id,
            iteration=task.iteration,
            input=strip_nul(task.input),  # as stored, so as a claim would read it
            workflow_name=run.workflow_name,
            available_at=row.available_at,
            started_at=self.now,
            trace_context=run.trace_context,
        )


def waits_for_flush(finishes: bool, hands_over: bool, queues: bool, shared: bool) -> bool:
    """Whether a batch's commit waits for its WAL to reach disk: unless it ``queues``
    attempts for a worker's claim, and neither ``finishes`` a run (its client returns
    the result at once) nor ``hands_over`` attempts to this process's worker (which runs
    them at once, without a claim of its own), nor is ``shared`` with other batches'
    writes (decided one by one: the setting is the transaction's).

    A decision is derived from durable inputs (starts, signals, reports), so one a crash
    took with its WAL not yet on disk is made again from them. No one acts on a queued
    attempt before a worker's claim, a commit that waits for its flush and so carries
    this WAL to disk too (WAL is written in order), and the claim follows within a
    NOTIFY's delay: one flush serves both. A decision that only opens a wait or arms a
    timer waits: nothing commits after it soon, and PostgreSQL's WAL writer would flush
    it later, in the way of whatever commit is then on a user's path
    (docs/design.md, "A decision commits without waiting for its flush")."""
    return finishes or hands_over or not queues or shared


def _handed_task(row: tasks.NewTask, now: datetime, owner: str | None) -> tasks.NewTask:
    """An attempt born started: RUNNING since the decision's clock, held by ``owner``."""
    return row._replace(state=TaskState.RUNNING, started_at=now, lease_owner=owner)


class DecisionAborted(Exception):
    """A fenced write of a decision matched nothing: the snapshot was wrong."""


async def decide_runs(
    conn: AsyncConnection,
    shards: Shards,
    keys: Sequence[int],
    run_ids: Sequence[uuid.UUID],
    specs: SpecCache,
    now: datetime,
    inputs: InputChecks | None = None,
    fair: fair_keys.FairKeys | None = None,
    handing: DecisionLeases | None = None,
) -> Batch:
    """Lock, load, decide and apply a batch of runs of ``keys`` the caller took, in its
    transaction (:func:`lock_and_load`, then :func:`decide_taken`), beside the other
    batches the caller decides in it (``shares_transaction``)."""
    taken = await lock_and_load(conn, shards, keys, run_ids)
    return await decide_taken(
        conn, shards, keys, taken, specs, now, inputs, fair, handing, shares_transaction=True
    )


async def lock_and_load(
    conn: AsyncConnection, shards: Shards, keys: Sequence[int], run_ids: Sequence[uuid.UUID]
) -> Taken:
    """Lock the taken runs ``run_ids`` of ``keys`` and read their attempts and signals:
    two statements (a single-node decider's take does both in its own call,
    ``decider_take.take_and_load``). In the distributed layout ``keys`` is one key and
    both are within it; on one PostgreSQL each spans the batch's keys."""
    if shards.distributed:
        (shard,) = keys
        locked = await runs.lock_many(conn, shard, run_ids)
    else:
        locked = await runs.lock_many_held(conn, keys, run_ids)
    ids = [run.id for run, _ in locked if run.status is RunStatus.RUNNING]
    if not ids:
        loaded = {}
    elif shards.distributed:
        loaded = await tasks.snapshots(conn, keys[0], ids)
    else:
        loaded = await tasks.snapshots_held(conn, keys, ids)
    return Taken(locked=locked, loaded=loaded)


async def decide_taken(
    conn: AsyncConnection,
    shards: Shards,
    keys: Sequence[int],
    taken: Taken,
    specs: SpecCache,
    now: datetime,
    inputs: InputChecks | None = None,
    fair: fair_keys.FairKeys | None = None,
    handing: DecisionLeases | None = None,
    *,
    shares_transaction: bool = False,
) -> Batch:
    """Decide and apply a batch of locked and loaded runs of ``keys``, in the caller's
    transaction, handing what the process's own worker takes of the new attempts to it
    (``handing``). In the distributed layout the batch is of one key and every write is
    within it; on one PostgreSQL the writes span the batch's keys in one statement. A
    run started from SQL whose input does not fit its model (``inputs``) fails instead
    of being decided."""
    running = [(run, seq) for run, seq in taken.locked if run.status is RunStatus.RUNNING]
    loaded = taken.loaded
    batch = Batch(
        now=now,
        shards=shards,
        shard=keys[0] if shards.distributed else None,
        queue_of={row.task_id: row.queue for rows, _ in loaded.values() for row in rows},
        fair=fair,
        handing=handing,
        shares_transaction=shares_transaction,
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
        failed = inputs.failure(run, last_seq, snapshot) if inputs is not None else None
        actions = decide(spec, snapshot, now) if failed is None else failed
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
