"""The context every task function receives as its first argument."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legato.errors import NotTransactional
from legato.observability.logs import ContextAdapter, attempt_context

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

_task_log = logging.getLogger("legato.task")


class TaskCancelled(Exception):
    """Raised inside a task when its run was cancelled or its attempt was taken away."""


async def _no_heartbeat() -> None:
    return None


@dataclass(frozen=True)
class TaskContext:
    """Who is running: the run, the node, the iteration (map element) and the attempt.

    ``heartbeat()`` extends the attempt's lease; call it from long tasks more often
    than the task's heartbeat timeout. It raises ``TaskCancelled`` when the run was
    cancelled or the attempt no longer belongs to this worker.

    ``logger`` logs through ``legato.task`` with the attempt's context in every record's
    ``extra`` (``run_id``, ``workflow``, ``node``, ``iteration``, ``attempt``, ``task``).

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

    async def heartbeat(self) -> None:
        await self._heartbeat()

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
