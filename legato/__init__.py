"""Legato: durable workflows for Python whose only infrastructure is PostgreSQL.

Write tasks and workflows with :func:`task` and :func:`workflow`, collect them in an
:class:`App`, run the loops with :class:`Runtime` (or ``legato dev`` / ``legato
decider`` / ``legato worker``), and drive runs with :class:`Client`.
"""

from legato.client import Client, RunDetails, RunHandle, RunPage
from legato.context import TaskCancelled, TaskContext
from legato.db import create_engine
from legato.errors import (
    ConfigurationError,
    IncompatibleDatabase,
    InvalidArgument,
    InvalidInput,
    InvalidOutput,
    InvalidRunId,
    LegatoError,
    OutputTooLarge,
    PayloadTooLarge,
    RunAlreadyExists,
    RunFailed,
    RunFinished,
    RunNotFound,
    UnknownWorkflow,
)
from legato.flow import (
    App,
    Cache,
    Concurrency,
    FailureInfo,
    Flow,
    Node,
    RateLimit,
    Retry,
    SpecError,
    Switch,
    TaskDefinitionError,
    Workflow,
    WorkflowSpec,
    task,
    workflow,
)
from legato.runtime import Roles, Runtime
from legato.schema import RunStatus, TaskState, uuid7
from legato.sync import SyncClient, SyncRunHandle

__all__ = [
    "App",
    "Cache",
    "Client",
    "Concurrency",
    "ConfigurationError",
    "FailureInfo",
    "Flow",
    "IncompatibleDatabase",
    "InvalidArgument",
    "InvalidInput",
    "InvalidOutput",
    "InvalidRunId",
    "LegatoError",
    "Node",
    "OutputTooLarge",
    "PayloadTooLarge",
    "RateLimit",
    "Retry",
    "Roles",
    "RunAlreadyExists",
    "RunDetails",
    "RunFailed",
    "RunFinished",
    "RunHandle",
    "RunNotFound",
    "RunPage",
    "RunStatus",
    "Runtime",
    "SpecError",
    "Switch",
    "SyncClient",
    "SyncRunHandle",
    "TaskCancelled",
    "TaskContext",
    "TaskDefinitionError",
    "TaskState",
    "UnknownWorkflow",
    "Workflow",
    "WorkflowSpec",
    "create_engine",
    "task",
    "uuid7",
    "workflow",
]
