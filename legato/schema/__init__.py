"""The single typed schema source: Core tables, enums, column types and persisted values.

Names are loaded on first use (PEP 562): the enums and values do not need SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from legato.schema.enums import (
        CatchUp,
        NodeKind,
        RunStatus,
        TaskState,
        TimerKind,
    )
    from legato.schema.shards import DEFAULT_SHARD_COUNT, Shards
    from legato.schema.tables import (
        SCHEMA_PLACEHOLDER,
        ConcurrencySlots,
        DecideQueue,
        IdempotencyKeys,
        Installation,
        Outbox,
        RateBuckets,
        RunEvents,
        Runs,
        Schedules,
        SchemaVersion,
        ShardOwners,
        Signals,
        TaskCache,
        TaskQueue,
        Tasks,
        Timers,
        WebhookEndpoints,
        WorkflowDefinitions,
        metadata,
    )
    from legato.schema.types import (
        is_uuid7,
        strip_nul,
        uuid7,
        uuid7_bound,
        uuid7_time_ms,
    )
    from legato.schema.values import TaskError

# Each public name and the module that defines it: importing the package loads none
# of them, so a caller that needs one part (the pure decider, the schema's enums)
# does not pay for the rest.
_MODULE_OF: dict[str, str] = {
    "CatchUp": "legato.schema.enums",
    "NodeKind": "legato.schema.enums",
    "RunStatus": "legato.schema.enums",
    "TaskState": "legato.schema.enums",
    "TimerKind": "legato.schema.enums",
    "TaskCache": "legato.schema.tables",
    "Installation": "legato.schema.tables",
    "ShardOwners": "legato.schema.tables",
    "Shards": "legato.schema.shards",
    "DEFAULT_SHARD_COUNT": "legato.schema.shards",
    "RateBuckets": "legato.schema.tables",
    "ConcurrencySlots": "legato.schema.tables",
    "Schedules": "legato.schema.tables",
    "SCHEMA_PLACEHOLDER": "legato.schema.tables",
    "DecideQueue": "legato.schema.tables",
    "IdempotencyKeys": "legato.schema.tables",
    "Outbox": "legato.schema.tables",
    "WebhookEndpoints": "legato.schema.tables",
    "RunEvents": "legato.schema.tables",
    "Runs": "legato.schema.tables",
    "SchemaVersion": "legato.schema.tables",
    "Signals": "legato.schema.tables",
    "TaskQueue": "legato.schema.tables",
    "Tasks": "legato.schema.tables",
    "Timers": "legato.schema.tables",
    "WorkflowDefinitions": "legato.schema.tables",
    "metadata": "legato.schema.tables",
    "is_uuid7": "legato.schema.types",
    "strip_nul": "legato.schema.types",
    "uuid7": "legato.schema.types",
    "uuid7_bound": "legato.schema.types",
    "uuid7_time_ms": "legato.schema.types",
    "TaskError": "legato.schema.values",
}

__all__ = [
    "DEFAULT_SHARD_COUNT",
    "SCHEMA_PLACEHOLDER",
    "CatchUp",
    "ConcurrencySlots",
    "DecideQueue",
    "IdempotencyKeys",
    "Installation",
    "NodeKind",
    "Outbox",
    "RateBuckets",
    "RunEvents",
    "RunStatus",
    "Runs",
    "Schedules",
    "SchemaVersion",
    "ShardOwners",
    "Shards",
    "Signals",
    "TaskCache",
    "TaskError",
    "TaskQueue",
    "TaskState",
    "Tasks",
    "TimerKind",
    "Timers",
    "WebhookEndpoints",
    "WorkflowDefinitions",
    "is_uuid7",
    "metadata",
    "strip_nul",
    "uuid7",
    "uuid7_bound",
    "uuid7_time_ms",
]


# Hidden from type checkers: a module ``__getattr__`` would make every misspelt name
# ``Any`` instead of an error; they see the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
