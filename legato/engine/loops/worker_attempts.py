"""One attempt the worker claimed, run to the report of its outcome: the body under its
``start_to_close``, the output checked against the size limit, and for a transactional
task the body and its completion in one transaction (``run_transactional``).

The worker (``legato.engine.loops.worker``) keeps the slots: it runs these functions in
an attempt's slot and frees the slot by what they return.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from pydantic import JsonValue
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.context import TaskCancelled, TaskContext
from legato.engine import hooks, output_cache
from legato.engine.attempts import error_of, output_error
from legato.engine.decider.model import TaskError
from legato.engine.reports import Report, apply_reports
from legato.engine.repositories import task_queue, tasks, transactions
from legato.flow import TaskDefinition
from legato.schema import TaskState

log = logging.getLogger("legato.worker")


@dataclass
class InFlight:
    """A claimed attempt in one of the worker's slots."""

    claimed: task_queue.Claimed
    definition: TaskDefinition
    task: asyncio.Task[None] | None = None
    last_heartbeat: float = field(default_factory=time.monotonic)
    # The attempt was cancelled, timed out or superseded: its slot is freed, no report.
    lost: bool = False


@dataclass(frozen=True)
class Committed:
    """A transactional attempt whose completion committed with its body's writes."""

    task_id: uuid.UUID
    shard: int


# What running an attempt comes to: a report to flush; a transactional completion
# already committed; or None, nothing to report (``InFlight.lost``: its slot is freed;
# else released because the worker stops, its slot kept for ``on_stop`` to release).
Outcome = Report | Committed | None


def context_of(flight: InFlight) -> TaskContext:
    """The ``TaskContext`` the body gets; its heartbeat raises once the attempt is lost."""
    item = flight.claimed

    async def heartbeat() -> None:
        if flight.lost:
            raise TaskCancelled(f"attempt {item.attempt} of {item.task_name!r} was cancelled")
        flight.last_heartbeat = time.monotonic()

    return TaskContext(
        run_id=item.run_id,
        task_id=item.task_id,
        workflow=item.workflow_name,
        node_id=item.node_id,
        iteration=item.iteration,
        attempt=item.attempt,
        task=item.task_name,
        _heartbeat=heartbeat,
    )


async def run_attempt(
    engine: AsyncEngine,
    flight: InFlight,
    ctx: TaskContext,
    max_output_bytes: int,
    stopping: Callable[[], bool],
) -> Report | None:
    """Run the body once; the report of its outcome, or None when there is nothing to
    report (the attempt was taken away, or is released because the worker stops)."""
    item = flight.claimed
    definition = flight.definition
    output: JsonValue = None
    cached = False
    error: TaskError | None = None
    timed_out = False
    # The worker enforces start_to_close itself; the decider's timer is the backstop.
    limit = definition.start_to_close
    deadline = asyncio.timeout(None if limit is None else limit.total_seconds())
    try:
        async with deadline:
            output, cached = await hooks.observed_attempt(
                item, output_cache.invoke(engine, definition, ctx, item.input)
            )
    except asyncio.CancelledError:
        if flight.lost:
            return None  # cancelled or timed out: nothing to report
        if stopping():
            return None  # released by on_stop so another worker takes it at once
        raise
    except TimeoutError as exc:
        if deadline.expired():
            timed_out = True
            error = TaskError(
                type="Timeout", message="the attempt did not finish within start_to_close"
            )
        else:
            error = error_of(exc, definition.is_retryable(exc))
    except Exception as exc:
        error = error_of(exc, definition.is_retryable(exc))
    if error is None:
        error = output_error(output, max_output_bytes)
        if error is not None:
            output = None
    if flight.lost:
        return None
    state = (
        TaskState.COMPLETED
        if error is None
        else TaskState.TIMED_OUT
        if timed_out
        else TaskState.FAILED
    )
    return report_of(item, state, output, error, cached=cached and error is None)


async def run_transactional(
    engine: AsyncEngine,
    flight: InFlight,
    ctx: TaskContext,
    max_output_bytes: int,
    stopping: Callable[[], bool],
) -> Outcome:
    """Run a transactional task's body in a transaction on Legato's database and apply
    its completion in that transaction, so the body's writes and the completion commit
    once, together, or not at all.

    A body that fails has its writes rolled back and its failure reported as usual
    (retried per its policy). A completion whose fence matches nothing — the lease
    expired and the attempt was timed out, maybe retried elsewhere — rolls the whole
    transaction back. A completion or commit that fails is reported as a failure of
    the attempt; its fence makes that harmless if the commit did happen.
    """
    item = flight.claimed
    definition = flight.definition
    assert definition.start_to_close is not None  # @task requires it
    try:
        async with engine.connect() as conn, conn.begin() as transaction:
            await transactions.bound(conn, definition.start_to_close)
            body_ctx = replace(ctx, _connection=conn)
            report = await run_attempt(engine, flight, body_ctx, max_output_bytes, stopping)
            if report is None or report.move.state != TaskState.COMPLETED:
                await transaction.rollback()
                return report
            if not transaction.is_active:
                return report_of(item, TaskState.FAILED, None, _ENDED_BY_TASK)
            if not await apply_reports(conn, [report], "task finished"):
                raise _Superseded
    except _Superseded:
        log.warning(
            "attempt %d of %r was superseded (its lease expired) before it committed: "
            "its writes were rolled back",
            item.attempt,
            item.task_name,
            extra=hooks.context_of(item),
        )
        flight.lost = True
        return None
    except Exception as exc:
        if flight.lost:
            return None
        error = error_of(exc, definition.is_retryable(exc))
        # The body's own failures are logged where they happen; this is the
        # completion or the commit failing after the body returned.
        log.warning(
            "attempt %d of %r could not commit its transaction: %s: %s",
            item.attempt,
            item.task_name,
            error.type,
            error.message,
            extra={**hooks.context_of(item), "error_type": error.type},
        )
        return report_of(item, TaskState.FAILED, None, error)
    return Committed(item.task_id, item.shard)


class _Superseded(Exception):
    """A transactional completion's fence matched nothing: roll the transaction back."""


_ENDED_BY_TASK = TaskError(
    type="TransactionEnded",
    message="the transactional task committed or rolled back ctx.connection's transaction "
    "itself, so its completion cannot be applied with its writes: never call commit() or "
    "rollback() on ctx.connection (use begin_nested() for a savepoint)",
    retryable=False,
)


def report_of(
    item: task_queue.Claimed,
    state: TaskState,
    output: JsonValue,
    error: TaskError | None,
    *,
    cached: bool = False,
) -> Report:
    """The report moving a claimed attempt out of RUNNING, with its queue row; ``cached``
    when the output cache served the output."""
    return Report(
        tasks.Transition(
            run_id=item.run_id,
            task_id=item.task_id,
            attempt=item.attempt,
            state=state,
            output=output,
            error=error,
            from_states=(TaskState.RUNNING,),
            cached=cached,
        ),
        shard=item.shard,
        queue_key=(item.queue, item.task_id),
    )


def alive(inflight: Mapping[uuid.UUID, InFlight], now: float) -> dict[uuid.UUID, InFlight]:
    """The attempts whose leases to extend: running, not lost, and (for a task that
    declared a heartbeat timeout) heartbeat within it; an overdue one is left to
    expire, so the sweeper times it out."""
    return {
        task_id: flight
        for task_id, flight in inflight.items()
        if not flight.lost
        and flight.task is not None
        and not flight.task.done()
        and not _heartbeat_overdue(flight, now)
    }


def _heartbeat_overdue(flight: InFlight, now: float) -> bool:
    definition = flight.definition
    if definition.heartbeat is None:
        return False
    return now - flight.last_heartbeat > definition.heartbeat.total_seconds()
