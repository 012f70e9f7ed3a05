"""Legato: durable workflows for Python whose only infrastructure is PostgreSQL.

Write tasks and workflows with :func:`task` and :func:`workflow`, collect them in an
:class:`App`, run the loops with :class:`Runtime` (or ``legato dev`` / ``legato
decider`` / ``legato worker``), and drive runs with :class:`Client`.

Names are loaded on first use (PEP 562), so ``import legato.engine.decider`` does not
load SQLAlchemy, the client or the worker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from legato.client import Client
    from legato.context import (
        TaskCancelled,
        TaskContext,
    )
    from legato.db import create_engine
    from legato.debounce import Debounce
    from legato.deploy_check import DeployReport, Risk, VersionReport, check_deploy
    from legato.errors import (
        BatchOutputMismatch,
        ClientClosed,
        ConfigurationError,
        DatabaseUnavailable,
        FairShareKeyError,
        IncompatibleDatabase,
        InvalidArgument,
        InvalidInput,
        InvalidOutput,
        InvalidProgress,
        InvalidRunId,
        InvalidSchedule,
        InvalidSignature,
        InvalidWebhook,
        LegatoError,
        LoopFailed,
        NotTransactional,
        OutputTooLarge,
        PayloadTooLarge,
        ProgressTooLarge,
        RerunIncompatible,
        ResultTimeout,
        RunAlreadyExists,
        RunFailed,
        RunFinished,
        RunNotFound,
        RunStillRunning,
        UnknownNode,
        UnknownSchedule,
        UnknownTask,
        UnknownWorkflow,
        WebhookNotFound,
    )
    from legato.flow import (
        App,
        Batch,
        BatchContext,
        Cache,
        Concurrency,
        FailureInfo,
        FairShare,
        Flow,
        Node,
        RateLimit,
        Retry,
        SpecError,
        Switch,
        TaskDefinitionError,
        Workflow,
        WorkflowSpec,
        batch_task,
        task,
        workflow,
    )
    from legato.handle import RunHandle
    from legato.models import (
        Attempt,
        BulkResult,
        ErrorInfo,
        HistoryEvent,
        NodeFailure,
        QuarantinedRun,
        Run,
        RunDetails,
        RunFilter,
        RunPage,
    )
    from legato.progress import ProgressEntry
    from legato.runtime import (
        Roles,
        Runtime,
    )
    from legato.schema import (
        CatchUp,
        NodeKind,
        RunStatus,
        TaskState,
        uuid7,
    )
    from legato.sync import SyncClient, SyncRunHandle

# Each public name and the module that defines it: importing the package loads none
# of them, so a caller that needs one part (the pure decider, the schema's enums)
# does not pay for the rest.
_MODULE_OF: dict[str, str] = {
    "Client": "legato.client",
    "RunHandle": "legato.handle",
    "Attempt": "legato.models",
    "ErrorInfo": "legato.models",
    "HistoryEvent": "legato.models",
    "NodeFailure": "legato.models",
    "QuarantinedRun": "legato.models",
    "Run": "legato.models",
    "RunDetails": "legato.models",
    "RunPage": "legato.models",
    "RunFilter": "legato.models",
    "BulkResult": "legato.models",
    "TaskCancelled": "legato.context",
    "TaskContext": "legato.context",
    "create_engine": "legato.db",
    "check_deploy": "legato.deploy_check",
    "DeployReport": "legato.deploy_check",
    "Risk": "legato.deploy_check",
    "VersionReport": "legato.deploy_check",
    "UnknownSchedule": "legato.errors",
    "InvalidSchedule": "legato.errors",
    "ConfigurationError": "legato.errors",
    "IncompatibleDatabase": "legato.errors",
    "InvalidInput": "legato.errors",
    "InvalidRunId": "legato.errors",
    "LegatoError": "legato.errors",
    "DatabaseUnavailable": "legato.errors",
    "LoopFailed": "legato.errors",
    "PayloadTooLarge": "legato.errors",
    "ProgressTooLarge": "legato.errors",
    "InvalidProgress": "legato.errors",
    "ProgressEntry": "legato.progress",
    "RunFailed": "legato.errors",
    "RunFinished": "legato.errors",
    "RunNotFound": "legato.errors",
    "RunStillRunning": "legato.errors",
    "ResultTimeout": "legato.errors",
    "RerunIncompatible": "legato.errors",
    "UnknownNode": "legato.errors",
    "NotTransactional": "legato.errors",
    "UnknownWorkflow": "legato.errors",
    "UnknownTask": "legato.errors",
    "ClientClosed": "legato.errors",
    "RateLimit": "legato.flow",
    "Concurrency": "legato.flow",
    "Cache": "legato.flow",
    "FairShare": "legato.flow",
    "FairShareKeyError": "legato.errors",
    "Debounce": "legato.debounce",
    "App": "legato.flow",
    "FailureInfo": "legato.flow",
    "Flow": "legato.flow",
    "Node": "legato.flow",
    "Retry": "legato.flow",
    "Batch": "legato.flow",
    "BatchContext": "legato.flow",
    "batch_task": "legato.flow",
    "BatchOutputMismatch": "legato.errors",
    "SpecError": "legato.flow",
    "Switch": "legato.flow",
    "TaskDefinitionError": "legato.flow",
    "Workflow": "legato.flow",
    "WorkflowSpec": "legato.flow",
    "task": "legato.flow",
    "workflow": "legato.flow",
    "Roles": "legato.runtime",
    "Runtime": "legato.runtime",
    "CatchUp": "legato.schema",
    "NodeKind": "legato.schema",
    "RunStatus": "legato.schema",
    "TaskState": "legato.schema",
    "uuid7": "legato.schema",
    "InvalidArgument": "legato.errors",
    "InvalidOutput": "legato.errors",
    "OutputTooLarge": "legato.errors",
    "RunAlreadyExists": "legato.errors",
    "SyncClient": "legato.sync",
    "SyncRunHandle": "legato.sync",
    "InvalidSignature": "legato.errors",
    "InvalidWebhook": "legato.errors",
    "WebhookNotFound": "legato.errors",
}

__all__ = [
    "App",
    "Attempt",
    "Batch",
    "BatchContext",
    "BatchOutputMismatch",
    "BulkResult",
    "Cache",
    "CatchUp",
    "Client",
    "ClientClosed",
    "Concurrency",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Debounce",
    "DeployReport",
    "ErrorInfo",
    "FailureInfo",
    "FairShare",
    "FairShareKeyError",
    "Flow",
    "HistoryEvent",
    "IncompatibleDatabase",
    "InvalidArgument",
    "InvalidInput",
    "InvalidOutput",
    "InvalidProgress",
    "InvalidRunId",
    "InvalidSchedule",
    "InvalidSignature",
    "InvalidWebhook",
    "LegatoError",
    "LoopFailed",
    "Node",
    "NodeFailure",
    "NodeKind",
    "NotTransactional",
    "OutputTooLarge",
    "PayloadTooLarge",
    "ProgressEntry",
    "ProgressTooLarge",
    "QuarantinedRun",
    "RateLimit",
    "RerunIncompatible",
    "ResultTimeout",
    "Retry",
    "Risk",
    "Roles",
    "Run",
    "RunAlreadyExists",
    "RunDetails",
    "RunFailed",
    "RunFilter",
    "RunFinished",
    "RunHandle",
    "RunNotFound",
    "RunPage",
    "RunStatus",
    "RunStillRunning",
    "Runtime",
    "SpecError",
    "Switch",
    "SyncClient",
    "SyncRunHandle",
    "TaskCancelled",
    "TaskContext",
    "TaskDefinitionError",
    "TaskState",
    "UnknownNode",
    "UnknownSchedule",
    "UnknownTask",
    "UnknownWorkflow",
    "VersionReport",
    "WebhookNotFound",
    "Workflow",
    "WorkflowSpec",
    "batch_task",
    "check_deploy",
    "create_engine",
    "task",
    "uuid7",
    "workflow",
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
