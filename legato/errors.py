"""Every error Legato raises on purpose; each message names the problem and what to do.

docs/api.md lists them all: when each is raised and what to do about it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from legato.enums import RunStatus, TaskState


class LegatoError(Exception):
    """Base of Legato's errors."""


class ConfigurationError(LegatoError):
    """A bad database URL, schema name or option."""


class DatabaseUnavailable(LegatoError):
    """The database cannot be reached (refused, unknown host, wrong password, no such
    database); the message names the host and port and the cause. ``retryable`` is
    False when the server answered and refused (waiting will not help)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class LoopFailed(LegatoError):
    """A loop of a ``Runtime`` crashed more often in a row than its restart policy allows
    (or failed while stopping); raised by ``Runtime.stop``."""


class IncompatibleDatabase(LegatoError):
    """The server is too old, or its Legato schema is not at this package's migration head."""


class SpecError(LegatoError, ValueError):
    """A workflow that cannot be compiled; the message names the workflow and the node."""


class TaskDefinitionError(LegatoError, TypeError):
    """A task function or option that cannot be registered; the message names the function."""


class NotTransactional(LegatoError):
    """``ctx.connection`` read in a task not declared ``@task(transactional=True)``."""


class InvalidArgument(LegatoError, ValueError):
    """A Client argument of the wrong type or out of range: a name, idempotency key,
    limit, timeout or time."""


class InvalidRunId(InvalidArgument):
    """A run id that is not a UUID, or (when supplied to ``start``) not a UUIDv7 inside
    an existing partition."""


class UnknownWorkflow(LegatoError, LookupError):
    """No workflow of that name is registered or deployed."""


class UnknownTask(LegatoError, LookupError):
    """No task of that name is registered in the app (``App.task``)."""


class ClientClosed(LegatoError, RuntimeError):
    """A ``Client`` or ``SyncClient`` used after ``close()``."""


class InvalidInput(LegatoError):
    """A run input or signal payload that fails its model or is not storable JSON."""


class PayloadTooLarge(LegatoError):
    """A payload over the configured size limit."""


class OutputTooLarge(LegatoError):
    """A task returned more than the worker's ``max_output_bytes``; recorded as the
    attempt's (non-retryable) error, so ``result()`` reports it through ``RunFailed``."""


class InvalidOutput(LegatoError):
    """A task's return value, or a run's stored output, that is not storable JSON or does
    not fit the declared output type."""


class RunAlreadyExists(LegatoError):
    """``start(run_id=...)`` with the id of an existing run."""


class RunNotFound(LegatoError):
    """No run with that id."""


class RunFinished(LegatoError):
    """The run has already finished, so it cannot be signalled or cancelled."""


class ResultTimeout(LegatoError, TimeoutError):
    """``result(timeout=...)`` when the run is still running at the timeout. A
    ``TimeoutError`` too, so code catching that keeps working."""


class RunStillRunning(LegatoError):
    """``rerun`` of a run that has not finished: cancel it or wait for it first."""


class UnknownNode(LegatoError, LookupError):
    """``rerun(from_node=...)`` names a node the chosen version of the workflow lacks."""


class RerunIncompatible(LegatoError):
    """The chosen version cannot reuse the original run's outputs: the message names the
    node and why (rerun from an earlier node, or on the original version)."""


@dataclass(frozen=True)
class NodeFailure:
    """What failed a run (``RunFailed.error``): the error, and the node attempt it ended.

    ``state`` tells a failure (FAILED) from a timeout (TIMED_OUT) or a cancelled node
    (CANCELLED) without reading the message. ``node_id``, ``iteration``, ``attempt`` and
    ``state`` are None when no node failed (the output node was skipped)."""

    type: str
    message: str
    node_id: str | None
    iteration: int | None
    attempt: int | None
    state: TaskState | None
    retryable: bool
    traceback: str | None


class RunFailed(LegatoError):
    """Raised by ``Client.result`` when the run failed, timed out or was cancelled.

    ``status`` is ``RunStatus.FAILED``, ``RunStatus.TIMED_OUT`` (its workflow's
    ``execution_timeout`` passed) or ``RunStatus.CANCELLED``; ``error`` is what ended
    it (None for a cancelled run): its type and
    message, and the node, iteration, attempt and state (FAILED, TIMED_OUT, CANCELLED)
    of the attempt that ended it."""

    def __init__(
        self,
        message: str,
        *,
        run_id: uuid.UUID,
        status: RunStatus,
        error: NodeFailure | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status
        self.error = error


class InvalidSchedule(LegatoError, ValueError):
    """A schedule declaration that cannot work: a bad cron expression, an unknown time
    zone, an interval that is not positive, an input that fails the workflow's model,
    or a name another workflow's schedule already has."""


class UnknownSchedule(LegatoError, LookupError):
    """No deployed schedule of that name (``legato schedules pause|resume|trigger``)."""


class InvalidWebhook(InvalidArgument):
    """A webhook endpoint that cannot be stored: a URL that is not absolute http(s), an
    empty secret, an unknown event type."""


class WebhookNotFound(LegatoError):
    """No webhook endpoint, or no outbox delivery, with that id."""


class InvalidSignature(LegatoError):
    """``legato.webhooks.verify``: the request is not signed with the endpoint's secret,
    or its timestamp is outside the tolerance (a replayed request)."""


class InvalidProgress(LegatoError, ValueError):
    """A ``ctx.progress`` value that is not storable JSON, or a ``ctx.stream`` chunk that
    is not a string; nothing is written."""


class ProgressTooLarge(LegatoError):
    """An entry of ``ctx.progress`` / ``ctx.stream`` over the entry bound, or one that
    would take its attempt past the attempt's bound (entries or bytes); the entry is
    refused (nothing written), what was written before stays."""


class BatchOutputMismatch(LegatoError):
    """A batch task (``@batch_task``) returned something other than a list of one output
    per input: each attempt of the batch fails with it, not retried."""


class FairShareKeyError(LegatoError):
    """A ``FairShare`` key or weight function raised, or returned something that is no
    key (a non-empty printable str or an int) or no weight (an int from 1 to 1000): the
    attempt fails with it, not retried."""
