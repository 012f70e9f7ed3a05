"""The first-decision input check of runs started from SQL (pure: no database)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from legato.engine.decider.model import AppendEvent, FinishRun, RunSnapshot, TaskRecord
from legato.engine.input_check import InputChecks
from legato.engine.repositories.runs import RunRow
from legato.schema import NodeKind, RunStatus, TaskState, uuid7
from tests.sql_start_app import receipt

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN = RunRow(
    id=uuid7(),
    workflow_name="receipt",
    workflow_version=1,
    status=RunStatus.RUNNING,
    input={"order_id": "seven"},
    output=None,
    error=None,
    parent_run_id=None,
    cancel_requested=False,
    created_at=NOW,
    finished_at=None,
    input_unchecked=True,
)


def _snapshot(run: RunRow, tasks: tuple[TaskRecord, ...] = ()) -> RunSnapshot:
    return RunSnapshot(
        run_id=run.id,
        status=run.status,
        input=run.input,
        cancel_requested=False,
        timed_out=False,
        tasks=tasks,
        signals=(),
    )


def test_a_bad_input_fails_the_run_naming_each_field() -> None:
    actions = InputChecks({"receipt": receipt}).failure(RUN, 1, _snapshot(RUN))
    assert actions is not None
    event, finish = actions
    assert isinstance(event, AppendEvent) and isinstance(finish, FinishRun)
    assert event.type == "run_failed"
    assert event.data == {
        "error": finish.error.model_dump(mode="json") if finish.error else None,
        "fields": ["order_id", "email"],
    }
    assert finish.status is RunStatus.FAILED
    assert finish.error is not None
    assert finish.error.type == "InvalidInput"
    assert not finish.error.retryable
    assert "field 'order_id': Input should be a valid integer" in finish.error.message
    assert "field 'email': Field required" in finish.error.message


def test_only_the_first_decision_of_a_run_started_from_sql_is_checked() -> None:
    checks = InputChecks({"receipt": receipt})
    good = replace(RUN, input={"order_id": 7, "email": "a@b.c"})
    assert checks.failure(good, 1, _snapshot(good)) is None
    from_client = replace(RUN, input_unchecked=False)
    assert checks.failure(from_client, 1, _snapshot(from_client)) is None
    # Decided before (history past run_started, or attempts exist): never failed later.
    assert checks.failure(RUN, 3, _snapshot(RUN)) is None
    task = TaskRecord(
        task_id=uuid7(),
        node_id="send_receipt",
        iteration=0,
        attempt=1,
        kind=NodeKind.TASK,
        state=TaskState.QUEUED,
        output=None,
        error=None,
        observed=True,
        created_at=NOW,
        finished_at=None,
    )
    assert checks.failure(RUN, 1, _snapshot(RUN, (task,))) is None


def test_a_decider_without_the_model_decides_as_given_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checks = InputChecks({})
    with caplog.at_level(logging.WARNING, logger="legato.decider"):
        assert checks.failure(RUN, 1, _snapshot(RUN)) is None
        assert checks.failure(replace(RUN, id=uuid7()), 1, _snapshot(RUN)) is None
    warnings = [r.getMessage() for r in caplog.records if "started from SQL" in r.getMessage()]
    assert len(warnings) == 1
    assert "no workflow 'receipt'" in warnings[0]
