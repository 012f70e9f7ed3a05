"""The fair key and weight the decider writes on a fair queue's ``task_queue`` rows.

A queue is fair when a task of the deciding process's app on it declares ``FairShare``.
Every row enqueued to a fair queue gets a key, so the fair claim sees it: the attempt's
own (``FairShare.of`` its parsed input), ``UNKEYED`` ('') for a task of the queue
without fair share, and ``UNKEYED`` too for an attempt whose key cannot be computed —
the worker then fails that attempt with ``FairShareKeyError`` when it parses the input
(``TaskDefinition.invoke``), in its history, and the decider's loop goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pydantic import JsonValue

from legato.engine.decider.model import EnqueueTask
from legato.engine.repositories.tasks import NewTask
from legato.errors import FairShareKeyError
from legato.flow.fair_share import UNKEYED
from legato.flow.tasks import TaskArgumentsError, TaskDefinition

log = logging.getLogger("legato.decider")


class FairKeys:
    """The fair queues of an app's tasks, and the key of each attempt enqueued to one."""

    def __init__(self, tasks: Mapping[str, TaskDefinition]) -> None:
        self._tasks = dict(tasks)
        self.queues = frozenset(t.queue for t in tasks.values() if t.fair_share is not None)

    def of(self, task_name: str, queue: str, args: JsonValue) -> tuple[str | None, int | None]:
        """The (fair_key, fair_weight) of an attempt of ``task_name`` enqueued to
        ``queue`` with JSON ``args``: (None, None) off a fair queue."""
        if queue not in self.queues:
            return None, None
        definition = self._tasks.get(task_name)
        if definition is None or definition.fair_share is None:
            return UNKEYED, 1
        try:
            return definition.fair_share.of(task_name, definition.parse_args(args))
        except (FairShareKeyError, TaskArgumentsError) as error:
            log.warning("%s: enqueued without a key, its attempt fails when it runs", error)
            return UNKEYED, 1


def row_key(
    fair: FairKeys | None, action: EnqueueTask, creates: Sequence[NewTask]
) -> tuple[str | None, int | None]:
    """The (fair_key, fair_weight) of the ``task_queue`` row a decision batch writes for
    ``action``: its input is that of the task row the batch created for the attempt just
    before (``creates``, searched from the newest)."""
    if fair is None or action.queue not in fair.queues:
        return None, None
    args = next((row.input for row in reversed(creates) if row.id == action.task_id), None)
    return fair.of(action.task_name, action.queue, args)
