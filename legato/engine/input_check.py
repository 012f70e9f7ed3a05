"""The first decision of a run started from SQL checks its input against the workflow's
model: SQL cannot run pydantic, so ``start_run_v1()`` stores the JSON as given and marks
the run (``runs.input_unchecked``), and the decider, which holds the app, validates it
before deciding anything. A bad input fails the run with an ``InvalidInput`` error
naming each field, in its history (``run_failed``), on the run (``runs.error``, which
the dashboard and ``legato runs show`` display) and in the decider's log.

The model is the deciding process's app's workflow of that name, as ``Client.start``
by name validates with the client's app's. A decider whose app lacks the workflow
decides the run as given and warns once per workflow: a task still parses its input.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from legato.engine.decider.model import Action, AppendEvent, FinishRun, RunSnapshot
from legato.engine.repositories.runs import RunRow
from legato.flow.definition import InputValidationError, WorkflowDefinition
from legato.schema import RunStatus
from legato.schema.values import TaskError

log = logging.getLogger("legato.decider")

INVALID_INPUT = "InvalidInput"  # the error type, named after legato.errors.InvalidInput


class InputChecks:
    """The input models of the workflows a decider's app declares, by name."""

    def __init__(self, workflows: Mapping[str, WorkflowDefinition]) -> None:
        self._workflows = dict(workflows)
        self._warned: set[str] = set()

    def failure(self, run: RunRow, last_seq: int, snapshot: RunSnapshot) -> list[Action] | None:
        """The actions that fail ``run`` for its input, when this is the first decision
        of a run started from SQL and the input does not fit; None otherwise (decide it)."""
        if not run.input_unchecked or last_seq > 1 or snapshot.tasks:
            return None
        definition = self._workflows.get(run.workflow_name)
        if definition is None:
            if run.workflow_name not in self._warned:
                self._warned.add(run.workflow_name)
                log.warning(
                    "run %s of %s was started from SQL, but this decider's app has no "
                    "workflow %r to check its input against: deciding it as given "
                    "(run the decider with the app that declares it)",
                    run.id,
                    run.workflow_name,
                    run.workflow_name,
                    extra={"run_id": str(run.id), "workflow": run.workflow_name},
                )
            return None
        try:
            definition.validate_input(run.input)
        except InputValidationError as error:
            return invalid_input_actions(run.workflow_name, error.problems)
        except RecursionError:
            return invalid_input_actions(run.workflow_name, (("(input)", "nested too deeply"),))
        return None


def invalid_input_actions(workflow: str, problems: tuple[tuple[str, str], ...]) -> list[Action]:
    """Fail a run whose input does not fit: its ``run_failed`` event (with the fields)
    and its finish, with an ``InvalidInput`` error naming each field; pure."""
    listed = "; ".join(f"field {field!r}: {why}" for field, why in problems) or "it does not fit"
    error = TaskError(
        type=INVALID_INPUT,
        message=(
            f"input of workflow {workflow!r} (started from SQL) is invalid: {listed}; "
            "fix the JSON passed to start_run_v1() and start the run again"
        ),
        retryable=False,
    )
    return [
        AppendEvent(
            type="run_failed",
            data={
                "error": error.model_dump(mode="json"),
                "fields": [field for field, _ in problems],
            },
        ),
        FinishRun(status=RunStatus.FAILED, error=error),
    ]
