"""The context every task function receives as its first argument."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


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
    """

    run_id: uuid.UUID
    task_id: uuid.UUID
    workflow: str
    node_id: str
    iteration: int = 0
    attempt: int = 1
    _heartbeat: Callable[[], Awaitable[None]] = field(default=_no_heartbeat, repr=False)

    async def heartbeat(self) -> None:
        await self._heartbeat()
