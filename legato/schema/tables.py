"""The typed schema: every Legato table as SQLAlchemy Core, one class per table.

Each class is a namespace of typed ``Column`` objects bound to one ``Table``
(``Runs.status`` *is* ``Runs.table.c.status``), so a query built from
``select(Runs.status)`` is typed ``RunStatus`` and a misspelt column is a mypy
error rather than a runtime surprise. Tables live in the placeholder schema
``legato``; the real schema name is chosen per engine with
``schema_translate_map`` (``legato.db.create_engine``).

What Core cannot express (partitioned parents, partitions, storage parameters,
functions, triggers) is emitted as raw DDL by the migrations; the partial
indexes are declared here too so the drift test can compare them.

The declarations: ``columns.py`` (the ``MetaData``, the column helpers and
``TableColumns``), ``run_tables.py`` (a run's rows and its queues) and
``installation_tables.py`` (webhooks and the outbox, schedules, limits, the cache,
the installation and its shard owners). Import the tables from here: importing this
module declares every table in ``metadata``.
"""

from __future__ import annotations

from legato.schema.columns import (
    ERROR_JSON,
    SCHEMA_PLACEHOLDER,
    TableColumns,
    enum_check,
    metadata,
)
from legato.schema.installation_tables import (
    ConcurrencySlots,
    ConcurrencySlotsColumns,
    DeciderSleep,
    DeciderSleepColumns,
    Installation,
    InstallationColumns,
    Outbox,
    OutboxColumns,
    RateBuckets,
    RateBucketsColumns,
    Schedules,
    SchedulesColumns,
    SchemaVersion,
    SchemaVersionColumns,
    ShardOwners,
    ShardOwnersColumns,
    TaskCache,
    TaskCacheColumns,
    WebhookEndpoints,
    WebhookEndpointsColumns,
)
from legato.schema.run_tables import (
    Debounces,
    DebouncesColumns,
    DecideQueue,
    DecideQueueColumns,
    IdempotencyKeys,
    IdempotencyKeysColumns,
    RunEvents,
    RunEventsColumns,
    RunProgress,
    RunProgressColumns,
    Runs,
    RunsColumns,
    Signals,
    SignalsColumns,
    TaskQueue,
    TaskQueueColumns,
    Tasks,
    TasksColumns,
    Timers,
    TimersColumns,
    WorkflowDefinitions,
    WorkflowDefinitionsColumns,
)

__all__ = [
    "ERROR_JSON",
    "SCHEMA_PLACEHOLDER",
    "ConcurrencySlots",
    "ConcurrencySlotsColumns",
    "Debounces",
    "DebouncesColumns",
    "DecideQueue",
    "DecideQueueColumns",
    "DeciderSleep",
    "DeciderSleepColumns",
    "IdempotencyKeys",
    "IdempotencyKeysColumns",
    "Installation",
    "InstallationColumns",
    "Outbox",
    "OutboxColumns",
    "RateBuckets",
    "RateBucketsColumns",
    "RunEvents",
    "RunEventsColumns",
    "RunProgress",
    "RunProgressColumns",
    "Runs",
    "RunsColumns",
    "Schedules",
    "SchedulesColumns",
    "SchemaVersion",
    "SchemaVersionColumns",
    "ShardOwners",
    "ShardOwnersColumns",
    "Signals",
    "SignalsColumns",
    "TableColumns",
    "TaskCache",
    "TaskCacheColumns",
    "TaskQueue",
    "TaskQueueColumns",
    "Tasks",
    "TasksColumns",
    "Timers",
    "TimersColumns",
    "WebhookEndpoints",
    "WebhookEndpointsColumns",
    "WorkflowDefinitions",
    "WorkflowDefinitionsColumns",
    "enum_check",
    "metadata",
]
