"""Log context, the JSON formatter, decision facts and the metrics recorder, without a database."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from legato import TaskContext
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    CreateTask,
    EnqueueTask,
    FinishRun,
    RunSnapshot,
    TaskRecord,
)
from legato.engine.hooks import decision_facts
from legato.engine.repositories.runs import RunRow
from legato.engine.repositories.stats import Backlog
from legato.observability import JsonFormatter, PrometheusRecorder, recorder
from legato.schema import NodeKind, RunStatus, TaskState
from tests.integration.observed_flows import refuse_flow

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
RUN_ID = uuid.UUID("01936f9e-1c2a-7b3d-9e4f-0a1b2c3d4e5f")


def _ctx() -> TaskContext:
    return TaskContext(
        run_id=RUN_ID,
        task_id=uuid.uuid4(),
        workflow="refuse",
        node_id="refuse",
        iteration=2,
        attempt=3,
        task="refuse",
    )


def test_task_logger_carries_the_attempt_context(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="legato.task")
    _ctx().logger.info("charged %s", "card", extra={"amount": 12})
    (record,) = caplog.records
    assert record.name == "legato.task"
    fields = {k: getattr(record, k) for k in ("run_id", "workflow", "node", "iteration")}
    assert fields == {"run_id": str(RUN_ID), "workflow": "refuse", "node": "refuse", "iteration": 2}
    assert [getattr(record, k) for k in ("attempt", "task", "amount")] == [3, "refuse", 12]


def test_json_formatter_writes_context_and_exception(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="legato.task")
    try:
        raise ValueError("no card")
    except ValueError:
        _ctx().logger.warning("charge failed", exc_info=True)
    line = json.loads(JsonFormatter().format(caplog.records[0]))
    assert line["level"] == "WARNING"
    assert line["message"] == "charge failed"
    assert line["run_id"] == str(RUN_ID)
    assert (line["node"], line["attempt"], line["task"]) == ("refuse", 3, "refuse")
    assert "ValueError: no card" in line["exception"]
    assert line["time"].endswith("+00:00")


def _run(created: datetime) -> RunRow:
    return RunRow(
        id=RUN_ID,
        workflow_name="refuse",
        workflow_version=1,
        status=RunStatus.RUNNING,
        input=1,
        output=None,
        error=None,
        parent_run_id=None,
        cancel_requested=False,
        created_at=created,
        finished_at=None,
    )


def _enqueue(attempt: int) -> EnqueueTask:
    return EnqueueTask(
        task_id=uuid.uuid4(), task_name="refuse", queue="default", attempt=attempt, available_at=NOW
    )


def test_a_first_decision_times_start_to_first_task() -> None:
    snapshot = RunSnapshot(run_id=RUN_ID, status=RunStatus.RUNNING)
    facts = decision_facts(
        refuse_flow.spec, _run(NOW - timedelta(seconds=2)), 1, snapshot, [_enqueue(1)], NOW
    )
    assert facts.first
    assert facts.start_to_first_task == 2.0
    assert (facts.timeouts, facts.retries, facts.finished) == ((), (), None)


def test_a_timeout_and_its_retry_are_noted_with_task_and_queue() -> None:
    earlier = TaskRecord(
        task_id=uuid.uuid4(),
        node_id="refuse",
        kind=NodeKind.TASK,
        state=TaskState.TIMED_OUT,
        created_at=NOW,
    )
    snapshot = RunSnapshot(run_id=RUN_ID, status=RunStatus.RUNNING, tasks=(earlier,))
    retry_at = NOW + timedelta(seconds=1)
    actions: list[Action] = [
        AppendEvent(
            type="task_timed_out",
            node_id="refuse",
            iteration=0,
            attempt=1,
            data={"error": {"type": "LeaseExpired", "message": "the worker stopped"}},
        ),
        CreateTask(
            task_id=uuid.uuid4(),
            node_id="refuse",
            attempt=2,
            kind=NodeKind.TASK,
            state=TaskState.QUEUED,
            task_name="refuse",
            queue="default",
            available_at=retry_at,
        ),
    ]
    facts = decision_facts(refuse_flow.spec, _run(NOW), 5, snapshot, actions, NOW)
    assert not facts.first
    assert facts.start_to_first_task is None
    (timeout,) = facts.timeouts
    assert (timeout.node, timeout.attempt, timeout.task, timeout.queue) == (
        "refuse",
        1,
        "refuse",
        "default",
    )
    assert timeout.detail == "the worker stopped"
    (retry,) = facts.retries
    assert (retry.attempt, retry.detail) == (2, f"available at {retry_at.isoformat()}")


def test_a_finishing_decision_names_the_status() -> None:
    snapshot = RunSnapshot(run_id=RUN_ID, status=RunStatus.RUNNING)
    actions: list[Action] = [FinishRun(status=RunStatus.FAILED)]
    facts = decision_facts(refuse_flow.spec, _run(NOW), 7, snapshot, actions, NOW)
    assert facts.finished == "FAILED"


def test_metrics_are_off_by_default() -> None:
    assert not recorder().enabled


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_prometheus_recorder_counts_and_samples_gauges() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusRecorder(registry)
    metrics.attempt_completed("echo", "default", 0.2)
    metrics.attempt_completed("echo", "default", 0.4)
    metrics.run_finished("echo", "SUCCEEDED")
    labels = {"task": "echo", "queue": "default"}
    assert _value(registry, "legato_attempts_completed_total", **labels) == 2
    assert _value(registry, "legato_attempt_duration_seconds_count", **labels) == 2
    assert _value(registry, "legato_runs_finished_total", workflow="echo", status="SUCCEEDED") == 1

    decide = Backlog("decide", 4, NOW - timedelta(seconds=3))
    metrics.backlog(decide, [Backlog("mail", 7, NOW - timedelta(seconds=9))], NOW)
    assert _value(registry, "legato_decide_queue_depth") == 4
    assert _value(registry, "legato_decide_queue_oldest_age_seconds") == 3
    assert _value(registry, "legato_task_queue_depth", queue="mail") == 7
    assert _value(registry, "legato_task_queue_oldest_age_seconds", queue="mail") == 9
    # A queue that drained reads zero, not its last depth.
    metrics.backlog(Backlog("decide", 0, None), [], NOW)
    assert _value(registry, "legato_task_queue_depth", queue="mail") == 0
    assert _value(registry, "legato_decide_queue_oldest_age_seconds") == 0


def test_attempt_spans_are_made_only_once_a_tracer_provider_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from legato.observability import tracing

    asked: list[str] = []

    def attributes() -> dict[str, object]:
        asked.append("attributes")
        return {"legato.task": "t"}

    # The API alone (its placeholder provider): no span, and its attributes never built.
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    with tracing.attempt_span("t", None, attributes) as span:
        assert span is None
    assert asked == []
    # A provider installed later is used from the next attempt on.
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    with tracing.attempt_span("t", None, attributes) as span:
        assert span is not None and span.is_recording()
    assert asked == ["attributes"]
