"""What the engine's loops call at each event: one place logs it, counts it and traces it
(with the instruments of ``legato.observability``, which know nothing of the engine).

Each event is one log record whose ``extra`` carries the attempt's context
(``legato.observability.logs.CONTEXT_FIELDS``):

* worker (``legato.worker``): attempt started and completed (DEBUG), failed (WARNING);
* decider (``legato.decider``): attempt timed out or lease expired (WARNING, logged
  when the decider first sees the timed-out attempt, wherever the timeout was
  detected), retry scheduled (WARNING), run finished (INFO), decision failed (ERROR).

Decision facts are gathered while a batch is decided and published only after it
commits, so a rolled-back batch logs and counts nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ConsumeSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    RunSnapshot,
)
from legato.engine.repositories.runs import RunRow
from legato.engine.repositories.task_queue import Claimed
from legato.flow.spec import WorkflowSpec
from legato.limits import describe_exception
from legato.observability import tracing
from legato.observability.logs import attempt_context
from legato.observability.metrics import recorder

T = TypeVar("T")

worker_log = logging.getLogger("legato.worker")
decider_log = logging.getLogger("legato.decider")


def context_of(item: Claimed) -> dict[str, object]:
    return attempt_context(
        item.run_id, item.workflow_name, item.node_id, item.iteration, item.attempt, item.task_name
    )


# -- worker ------------------------------------------------------------------------------------


def attempts_claimed(claimed: Sequence[Claimed]) -> None:
    """A claim returned these attempts: count them and how long each waited."""
    metrics = recorder()
    if not metrics.enabled:
        return
    for item in claimed:
        waited = (item.started_at - item.available_at).total_seconds()
        metrics.attempt_claimed(item.task_name, item.queue, waited)


async def observed_attempt(item: Claimed, invocation: Awaitable[T]) -> T:
    """Await a task function inside its span, logging and counting how it ended.

    A cancellation (the run was cancelled, the lease lost, the worker's own
    start_to_close deadline) is re-raised unlogged: the decider logs the timeout with
    the rest, and a cancelled run is logged when it finishes."""
    context = context_of(item)
    worker_log.debug(
        "attempt %d of %s started (run %s, node %s)",
        item.attempt,
        item.task_name,
        item.run_id,
        item.node_id,
        extra=context,
    )
    began = time.monotonic()
    with tracing.attempt_span(item.task_name, item.trace_context, lambda: span_attributes(item)):
        try:
            result = await invocation
        except asyncio.CancelledError:
            raise
        except Exception as error:
            seconds = time.monotonic() - began
            worker_log.warning(
                "attempt %d of %s failed after %.3fs: %s: %s (run %s, node %s)",
                item.attempt,
                item.task_name,
                seconds,
                type(error).__qualname__,
                describe_exception(error),
                item.run_id,
                item.node_id,
                extra={**context, "error_type": type(error).__qualname__},
                exc_info=True,
            )
            recorder().attempt_failed(item.task_name, item.queue, seconds)
            raise
    seconds = time.monotonic() - began
    worker_log.debug(
        "attempt %d of %s completed in %.3fs (run %s, node %s)",
        item.attempt,
        item.task_name,
        seconds,
        item.run_id,
        item.node_id,
        extra=context,
    )
    recorder().attempt_completed(item.task_name, item.queue, seconds)
    return result


# -- decider -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptNote:
    """An attempt the decision reacted to: a timeout it saw, or a retry it scheduled."""

    node: str
    iteration: int
    attempt: int
    task: str | None
    queue: str | None
    detail: str


@dataclass(frozen=True)
class DecisionFacts:
    """What one run's decision means to an operator (pure; see :func:`decision_facts`)."""

    run_id: uuid.UUID
    workflow: str
    first: bool
    start_to_first_task: float | None
    signal_to_next_task: tuple[float, ...]
    timeouts: tuple[AttemptNote, ...]
    retries: tuple[AttemptNote, ...]
    finished: str | None
    # Why a failed run failed ("InvalidInput: ..."), for its log line.
    failure: str | None = None


def _task_of(spec: WorkflowSpec, node_id: str) -> tuple[str | None, str | None]:
    """The task a node runs and its queue (None for nodes that run no task)."""
    try:
        node = spec.node(node_id)
    except KeyError:  # the failure handler, or a node of another version
        name = spec.on_failure
    else:
        name = getattr(node, "task", None)
    task = spec.tasks.get(name) if name is not None else None
    return name, None if task is None else task.queue


def decision_facts(
    spec: WorkflowSpec,
    run: RunRow,
    last_seq: int,
    snapshot: RunSnapshot,
    actions: Sequence[Action],
    now: datetime,
) -> DecisionFacts:
    """Read one decision's actions for the logs and metrics (pure)."""
    enqueued = any(isinstance(a, EnqueueTask) for a in actions)
    # Only `run_started` is in the history and nothing was created: the first decision.
    first = last_seq <= 1 and not snapshot.tasks
    arrived = {s.signal_id: s.created_at for s in snapshot.signals}
    waits = tuple(
        (now - arrived[a.signal_id]).total_seconds()
        for a in actions
        if isinstance(a, ConsumeSignal) and a.signal_id in arrived
    )
    timeouts: list[AttemptNote] = []
    retries: list[AttemptNote] = []
    finished: str | None = None
    failure: str | None = None
    for action in actions:
        if isinstance(action, AppendEvent) and action.type == "task_timed_out":
            task, queue = _task_of(spec, action.node_id or "")
            if task is None:
                continue  # an event wait's timeout is the workflow's own branch, not a fault
            error = action.data.get("error") if isinstance(action.data, dict) else None
            detail = error.get("message") if isinstance(error, dict) else None
            timeouts.append(
                AttemptNote(
                    action.node_id or "",
                    action.iteration or 0,
                    action.attempt or 0,
                    task,
                    queue,
                    str(detail or "timed out"),
                )
            )
        elif isinstance(action, CreateTask) and action.task_name is not None and action.attempt > 1:
            when = "now" if action.available_at is None else action.available_at.isoformat()
            retries.append(
                AttemptNote(
                    action.node_id,
                    action.iteration,
                    action.attempt,
                    action.task_name,
                    action.queue,
                    f"available at {when}",
                )
            )
        elif isinstance(action, FinishRun):
            finished = action.status.value
            if action.error is not None:
                failure = f"{action.error.type}: {action.error.message}"
    return DecisionFacts(
        run_id=run.id,
        workflow=run.workflow_name,
        first=first,
        start_to_first_task=(now - run.created_at).total_seconds() if first and enqueued else None,
        signal_to_next_task=waits if enqueued else (),
        timeouts=tuple(timeouts),
        retries=tuple(retries),
        finished=finished,
        failure=failure,
    )


def decisions_committed(facts: Sequence[DecisionFacts], started_ns: int) -> None:
    """A decision batch that started at ``started_ns`` (``time.time_ns()``) committed."""
    metrics = recorder()
    metrics.decisions(len(facts), (time.time_ns() - started_ns) / 1e9)
    tracing.decision_span(len(facts), started_ns)
    for fact in facts:
        if fact.first:
            metrics.run_started(fact.workflow)
        if fact.start_to_first_task is not None:
            metrics.start_to_first_task(fact.start_to_first_task)
        for wait in fact.signal_to_next_task:
            metrics.signal_to_next_task(wait)
        for note in fact.timeouts:
            metrics.attempt_timed_out(note.task, note.queue)
            decider_log.warning(
                "attempt %d of %s timed out: %s (run %s, node %s)",
                note.attempt,
                note.task or note.node,
                note.detail,
                fact.run_id,
                note.node,
                extra=_context(fact, note),
            )
        for note in fact.retries:
            decider_log.warning(
                "retry scheduled: attempt %d of %s, %s (run %s, node %s)",
                note.attempt,
                note.task or note.node,
                note.detail,
                fact.run_id,
                note.node,
                extra=_context(fact, note),
            )
        if fact.finished is not None:
            metrics.run_finished(fact.workflow, fact.finished)
            decider_log.info(
                "run %s of %s finished: %s%s",
                fact.run_id,
                fact.workflow,
                fact.finished,
                "" if fact.failure is None else f" ({fact.failure})",
                extra={
                    "run_id": str(fact.run_id),
                    "workflow": fact.workflow,
                    "status": fact.finished,
                },
            )


def _context(fact: DecisionFacts, note: AttemptNote) -> dict[str, object]:
    return attempt_context(
        fact.run_id, fact.workflow, note.node, note.iteration, note.attempt, note.task
    )


def decision_failed() -> None:
    """Deciding one run raised; the decider backs it off or quarantines it, and logs it."""
    recorder().decision_failed()


def decision_batch_failed(runs: int, started_ns: int) -> None:
    """A whole batch rolled back; its runs are decided again one by one."""
    tracing.decision_span(runs, started_ns, failed=True)
    if runs > 1:
        decider_log.info("deciding %d runs together failed; retrying one by one", runs)


def span_attributes(item: Claimed) -> dict[str, Any]:
    """The attributes of an attempt's span (``tracing.attempt_span``)."""
    return {
        "legato.run_id": str(item.run_id),
        "legato.workflow": item.workflow_name,
        "legato.node": item.node_id,
        "legato.iteration": item.iteration,
        "legato.attempt": item.attempt,
        "legato.task": item.task_name,
        "legato.queue": item.queue,
    }
