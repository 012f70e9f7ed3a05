"""The single typed schema source: Core tables, enums and column types."""

from legato.schema.enums import CatchUp, NodeKind, RunStatus, TaskState, TimerKind
from legato.schema.tables import (
    SCHEMA_PLACEHOLDER,
    DecideQueue,
    IdempotencyKeys,
    Outbox,
    RunEvents,
    Runs,
    Schedules,
    SchemaVersion,
    Signals,
    TaskQueue,
    Tasks,
    Timers,
    WorkflowDefinitions,
    metadata,
)
from legato.schema.types import is_uuid7, strip_nul, uuid7, uuid7_bound, uuid7_time_ms

__all__ = [
    "SCHEMA_PLACEHOLDER",
    "CatchUp",
    "DecideQueue",
    "IdempotencyKeys",
    "NodeKind",
    "Outbox",
    "RunEvents",
    "RunStatus",
    "Runs",
    "Schedules",
    "SchemaVersion",
    "Signals",
    "TaskQueue",
    "TaskState",
    "Tasks",
    "TimerKind",
    "Timers",
    "WorkflowDefinitions",
    "is_uuid7",
    "metadata",
    "strip_nul",
    "uuid7",
    "uuid7_bound",
    "uuid7_time_ms",
]
