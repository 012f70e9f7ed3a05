"""The context every task function receives as its first argument."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legato.errors import NotTransactional
from legato.observability.logs import ContextAdapter, attempt_context
from legato.progress import ProgressKind, checked_entry

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

_task_log = logging.getLogger("legato.task")


class TaskCancelled(Exception):
    """Raised inside a task when its run was cancelled or its attempt was taken away."""


async def _no_heartbeat() -> None:
    return None


async def _unrecorded(kind: ProgressKind, value: object) -> None:
    """Progress of a context built outside a worker: checked, then not kept."""
    checked_entry(kind, value)


@dataclass(frozen=True)
class TaskContext:
    """Who is running: the run, the node, the iteration (map element) and the attempt.

    ``heartbeat()`` extends the attempt's lease; call it from long tasks more often
    than the task's heartbeat timeout. It raises ``TaskCancelled`` when the run was
    cancelled or the attempt no longer belongs to this worker.

    ``logger`` logs through ``legato.task`` with the attempt's context in every record's
    ``extra`` (``run_id``, ``workflow``, ``node``, ``iteration``, ``attempt``, ``task``).

    ``progress(value)`` (any JSON value) and ``stream(text)`` (a text chunk) report
    while the task runs: each entry is written durably, in the run's order, before the
    call returns, and read with ``Client.stream`` (``legato.progress`` has the bounds;
    a bad value raises ``InvalidProgress``, one past a bound ``ProgressTooLarge``, and
    nothing is written). In a context built by hand, outside a worker, they check the
    value and keep nothing.

    ``connection`` is the open transaction of a transactional task
    (``@task(transactional=True)``); other tasks raise ``NotTransactional``.
    """

    run_id: uuid.UUID
    task_id: uuid.UUID
    workflow: str
    node_id: str
    iteration: int = 0
    attempt: int = 1
    task: str | None = None
    _heartbeat: Callable[[], Awaitable[None]] = field(default=_no_heartbeat, repr=False)
    _connection: AsyncConnection | None = field(default=None, repr=False)
    _progress: Callable[[ProgressKind, object], Awaitable[None]] = field(
        default=_unrecorded, repr=False
    )

    async def heartbeat(self) -> None:
        await self._heartbeat()

    async def progress(self, value: object) -> None:
        """Report ``value`` (JSON) as this attempt's progress, durably, before returning."""
        await self._progress("progress", value)

    async def stream(self, text: str) -> None:
        """Report a chunk of text (a token of an LLM's answer, a log line), durably."""
        await self._progress("text", text)

    @property
    def connection(self) -> AsyncConnection:
        """The attempt's connection to Legato's database, inside the transaction in which
        the worker will record the attempt's completion. Write with it, never commit or
        roll it back (``begin_nested()`` savepoints are fine)."""
        if self._connection is None:
            raise NotTransactional(
                f"task {self.task!r} is not transactional, so ctx.connection does not exist: "
                "declare it with @task(transactional=True, start_to_close=...) to run it in "
                "a transaction on Legato's database"
            )
        return self._connection

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        context = attempt_context(
            self.run_id, self.workflow, self.node_id, self.iteration, self.attempt, self.task
        )
        return ContextAdapter(_task_log, context)
