"""Logs, metrics, traces and ``legato stats`` on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import App, Client, Flow, Node, NodeKind, RunFailed, Runtime, workflow
from legato.cli import main
from legato.engine.loops.sampler import BacklogSampler
from legato.engine.repositories import decide_queue, stats
from legato.observability import disable_metrics, enable_metrics
from legato.runtime import Roles
from legato.schema import DEFAULT_SHARD_COUNT, Shards
from tests.integration.observed_flows import app, echo, echo_flow, refuse_flow

ROOT = Path(__file__).resolve().parents[2]
SHARDS = Shards(DEFAULT_SHARD_COUNT)


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=app) as c:
        yield c


@pytest_asyncio.fixture
async def runtime(engine: AsyncEngine) -> AsyncIterator[Runtime]:
    rt = Runtime(engine, app, poll_interval=0.2, grace_period=2.0)
    await rt.start()
    yield rt
    await rt.stop()


def _records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == level]


async def test_a_failing_task_logs_warnings_with_its_context(
    caplog: pytest.LogCaptureFixture, client: Client, runtime: Runtime
) -> None:
    caplog.set_level(logging.DEBUG, logger="legato")
    handle = await client.start(refuse_flow, 7)
    with pytest.raises(RunFailed, match="refusing 7"):
        await handle.result(timeout=30)

    failures = [
        r
        for r in _records(caplog, "legato.worker", logging.WARNING)
        if getattr(r, "run_id", None) == str(handle.run_id)
    ]
    assert [r.attempt for r in failures] == [1, 2]  # type: ignore[attr-defined]
    for record in failures:
        context = {k: getattr(record, k) for k in ("workflow", "node", "iteration", "task")}
        assert context == {"workflow": "refuse", "node": "refuse", "iteration": 0, "task": "refuse"}
        assert record.exc_info is not None
        assert "Refused: refusing 7" in record.getMessage()
    (retry,) = [
        r for r in _records(caplog, "legato.decider", logging.WARNING) if "retry" in r.getMessage()
    ]
    assert (retry.run_id, retry.attempt, retry.task) == (str(handle.run_id), 2, "refuse")  # type: ignore[attr-defined]
    (finished,) = [
        r for r in _records(caplog, "legato.decider", logging.INFO) if "finished" in r.getMessage()
    ]
    assert (finished.run_id, finished.status) == (str(handle.run_id), "FAILED")  # type: ignore[attr-defined]
    started = _records(caplog, "legato.worker", logging.DEBUG)
    assert any(r.getMessage().startswith("attempt 1 of refuse started") for r in started)


async def test_task_code_logs_through_its_context(
    caplog: pytest.LogCaptureFixture, client: Client, runtime: Runtime
) -> None:
    caplog.set_level(logging.INFO, logger="legato.task")
    handle = await client.start(echo_flow, 5)
    assert await handle.result(timeout=30) == 5
    (record,) = [r for r in caplog.records if r.name == "legato.task"]
    assert record.getMessage() == "echoing 5"
    assert (record.run_id, record.node, record.attempt) == (str(handle.run_id), "echo", 1)  # type: ignore[attr-defined]


_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """The process's OpenTelemetry SDK, exporting to memory (a provider is set once)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    return _EXPORTER


async def _wait_for(check: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110  # the exporter has no event to wait on
            await asyncio.sleep(0.05)


def _attempt_span(spans: InMemorySpanExporter, run_id: uuid.UUID) -> ReadableSpan | None:
    """The first finished attempt span of run ``run_id``, if one was exported yet."""
    for span in spans.get_finished_spans():
        if span.attributes and span.attributes.get("legato.run_id") == str(run_id):
            return span
    return None


async def test_attempt_span_joins_the_trace_that_started_the_run(
    spans: InMemorySpanExporter, client: Client, runtime: Runtime
) -> None:
    with trace.get_tracer("test").start_as_current_span("POST /orders") as request:
        handle = await client.start(echo_flow, 3)
    assert await handle.result(timeout=30) == 3

    await _wait_for(lambda: _attempt_span(spans, handle.run_id) is not None)
    span = _attempt_span(spans, handle.run_id)
    assert span is not None and span.parent is not None
    assert span.name == "legato.attempt echo"
    assert span.context is not None
    assert span.context.trace_id == request.get_span_context().trace_id
    assert span.parent.span_id == request.get_span_context().span_id
    assert span.attributes is not None
    assert (span.attributes["legato.node"], span.attributes["legato.attempt"]) == ("echo", 1)
    assert any(s.name == "legato.decide" for s in spans.get_finished_spans())


@workflow("echo_then_child")
def echo_then_child(flow: Flow[int]) -> Node[int]:
    return flow.child(echo_flow, flow.run(echo, flow.input))


async def test_a_child_runs_attempts_continue_the_parents_trace(
    spans: InMemorySpanExporter, engine: AsyncEngine
) -> None:
    parent_app = App([echo_then_child])
    async with (
        Client(engine, app=parent_app) as client,
        Runtime(engine, parent_app, poll_interval=0.2),
    ):
        with trace.get_tracer("test").start_as_current_span("POST /orders") as request:
            handle = await client.start(echo_then_child, 4)
        assert await handle.result(timeout=30) == 4
        details = await client.get_run(handle.run_id)
    (child_id,) = [t.task_id for t in details.tasks if t.kind is NodeKind.CHILD]

    await _wait_for(lambda: _attempt_span(spans, handle.run_id) is not None)
    await _wait_for(lambda: _attempt_span(spans, child_id) is not None)
    parent, child = _attempt_span(spans, handle.run_id), _attempt_span(spans, child_id)
    assert parent is not None and parent.context is not None
    assert child is not None and child.context is not None and child.parent is not None
    trace_id = request.get_span_context().trace_id
    assert parent.context.trace_id == child.context.trace_id == trace_id
    assert child.parent.span_id == request.get_span_context().span_id


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_dev_serves_metrics_that_move_with_runs(database_url: str, client: Client) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATO_")}
    env |= {"LEGATO_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    dev = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "legato",
        "dev",
        "--app",
        "tests.integration.observed_flows:app",
        "--poll-interval",
        "0.2",
        "--metrics-port",
        str(port),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(30):
            while b"deployed refuse" not in (line := await dev.stdout.readline()):
                assert line, (await dev.communicate())[1].decode()  # it exited: say why
        before = await asyncio.to_thread(_scrape, port)
        finished = ("legato_runs_finished_total", (("status", "SUCCEEDED"), ("workflow", "echo")))
        assert finished not in before
        handles = [await client.start("echo", n) for n in range(3)]
        for handle in handles:
            await handle.result(timeout=30)
        completed = ("legato_attempts_completed_total", (("queue", "default"), ("task", "echo")))

        async def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            async with asyncio.timeout(20):
                while True:  # the decider's INFO line and the counter follow the commit
                    after = await asyncio.to_thread(_scrape, port)
                    if after.get(finished) == 3 and after.get(completed) == 3:
                        return after
                    await asyncio.sleep(0.1)

        after = await scraped()
        assert after[("legato_runs_started_total", (("workflow", "echo"),))] == 3
        assert after[("legato_decisions_total", ())] >= 6
        assert ("legato_decide_queue_depth", ()) in after  # sampled at start
    finally:
        if dev.returncode is None:
            dev.terminate()
        _, err = await asyncio.wait_for(dev.communicate(), 30)
    assert dev.returncode == 0, err.decode()


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """Metrics enabled in this process for one test, into a registry of its own."""
    registry = CollectorRegistry()
    assert enable_metrics(registry).registry is registry
    yield registry
    disable_metrics()


def _task_gauges(registry: CollectorRegistry, queue: str) -> tuple[float | None, float | None]:
    labels = {"queue": queue}
    return (
        registry.get_sample_value("legato_task_queue_depth", labels),
        registry.get_sample_value("legato_task_queue_oldest_age_seconds", labels),
    )


async def test_a_fresh_apps_queues_report_zero_from_the_first_sample(
    engine: AsyncEngine, registry: CollectorRegistry
) -> None:
    async with Runtime(engine, app, queues=("mail",), poll_interval=0.2):
        # "default" is the queue of the app's tasks; "mail" one the worker serves.
        await _wait_for(lambda: _task_gauges(registry, "mail") != (None, None))
        assert _task_gauges(registry, "default") == (0, 0)
        assert _task_gauges(registry, "mail") == (0, 0)
        assert registry.get_sample_value("legato_decide_queue_depth") == 0


async def _task_backlog(engine: AsyncEngine) -> list[stats.Backlog]:
    async with engine.connect() as conn:
        return await stats.task_backlog(conn)


async def test_a_drained_queue_reports_zero(
    engine: AsyncEngine, client: Client, registry: CollectorRegistry
) -> None:
    handles = [await client.start(echo_flow, n) for n in range(3)]
    sampler = BacklogSampler(engine)  # knows no queue: only what it has sampled
    # Deciders only: the attempts they enqueue wait, ready, for a worker.
    async with Runtime(engine, app, roles=Roles(worker=False, timer=False), poll_interval=0.2):
        async with asyncio.timeout(20):
            while [b.depth for b in await _task_backlog(engine)] != [3]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    await sampler.tick()
    depth, age = _task_gauges(registry, "default")
    assert depth == 3 and age is not None and age >= 0

    async with Runtime(engine, app, poll_interval=0.2):
        for handle in handles:
            await handle.result(timeout=30)
    await sampler.tick()
    assert _task_gauges(registry, "default") == (0, 0)


async def test_stats_json_reports_a_backlog(
    database_url: str, engine: AsyncEngine, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(3):
        await client.start(echo_flow, n)
    # Deciders only: the attempts they enqueue wait for a worker that never comes.
    deciders = Runtime(engine, app, roles=Roles(worker=False, timer=False), poll_interval=0.2)
    await deciders.start()
    try:

        async def backlog() -> list[stats.Backlog]:
            async with engine.connect() as conn:
                return await stats.task_backlog(conn)

        async with asyncio.timeout(20):
            while [b.depth for b in await backlog()] != [3]:  # noqa: ASYNC110  # in the db
                await asyncio.sleep(0.05)
    finally:
        await deciders.stop()

    parked = await client.start(echo_flow, 99)  # parked as the decider does after N failures
    async with engine.begin() as conn:
        await decide_queue.record_failure(
            conn, SHARDS.of_run(parked.run_id), parked.run_id, 10, "KeyError: 'x'", None
        )

    capsys.readouterr()
    rc = await asyncio.to_thread(main, ["stats", "--json", "--database-url", database_url])
    out = capsys.readouterr().out
    assert rc == 0
    figures = json.loads(out)
    assert figures["quarantined_runs"] == 1
    (queue,) = figures["task_queues"]
    assert (queue["queue"], queue["depth"]) == ("default", 3)
    assert queue["oldest_age_seconds"] >= 0
    assert figures["decide_queue"]["depth"] == 0
    assert figures["runs"]["running"] == 4
    assert figures["runs"]["created_in_window"]["running"] == 4
    assert figures["leases"] == []
    assert {"application_name": "legato stats", "total": 1, "active": 1} in [
        {k: v for k, v in c.items() if k != "idle_in_transaction"} for c in figures["connections"]
    ]

    rc = await asyncio.to_thread(main, ["stats", "--database-url", database_url])
    text = capsys.readouterr().out
    assert rc == 0
    assert "default  3" in text
    assert "quarantined runs: 1" in text
    assert _label_lines(text) == _label_lines(_documented_stats())


def _documented_stats() -> str:
    """The output of ``legato stats`` that docs/operations.md shows."""
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page[page.index("### `legato stats`") :]
    example = section[section.index("$ legato stats\n") + len("$ legato stats\n") :]
    return example[: example.index("```")]


def _label_lines(text: str) -> list[str]:
    """A stats report's own lines, not the tables' rows, with every figure as N."""
    return [
        re.sub(r"\d+(\.\d+)?", "N", line)
        for line in text.splitlines()
        if line and not line.startswith(" ")
    ]


async def test_a_bad_log_format_is_one_line(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEGATO_LOG_FORMAT", "xml")
    rc = await asyncio.to_thread(main, ["stats", "--database-url", database_url])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err == ["legato: error: LEGATO_LOG_FORMAT='xml': expected text or json"]
