"""What a decision and the node handlers share: node statuses, the latest row of a
node's iteration, and the errors a snapshot that does not fit its spec raises."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from pydantic import JsonValue

from legato.engine.decider.model import TaskError
from legato.schema.enums import NodeKind, TaskState


class DeciderError(Exception):
    """The snapshot does not fit the spec (a bug or a corrupted run), never user data."""


class UnknownNodeError(DeciderError):
    """A task row names a node the run's workflow version does not have."""


class Status(enum.Enum):
    PENDING = "pending"  # not started: waiting for dependencies
    LIVE = "live"  # work in flight (an attempt, a wait, a retry, map elements)
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


# A node's status in this decision, with its output when DONE.
Outcome = tuple[Status, JsonValue]


@dataclass(frozen=True)
class Row:
    task_id: uuid.UUID
    node_id: str
    iteration: int
    attempt: int
    kind: NodeKind
    state: TaskState
    output: JsonValue = None
    error: TaskError | None = None
