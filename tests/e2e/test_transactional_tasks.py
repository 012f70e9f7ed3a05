"""Transactional tasks in one process: the body's writes commit with its completion."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateSchema

from legato import Client, RunFailed, Runtime, TaskState
from legato.engine.loops.worker import Worker
from legato.engine.repositories import transactions
from tests.e2e import txflows
from tests.helpers import eventually


async def create_ledger(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(CreateSchema(txflows.USER_SCHEMA))
        await conn.run_sync(txflows.metadata.create_all)


async def ledger_rows(engine: AsyncEngine, run_id: uuid.UUID) -> list[tuple[int, int, int]]:
    """(id, step, attempt) of the committed rows the run's attempts wrote."""
    ledger = txflows.ledger
    query = (
        select(ledger.c.id, ledger.c.step, ledger.c.attempt)
        .where(ledger.c.run_id == str(run_id))
        .order_by(ledger.c.id)
    )
    async with engine.connect() as conn:
        return [(int(i), int(s), int(a)) for i, s, a in (await conn.execute(query)).all()]


@pytest_asyncio.fixture
async def tx_client(engine: AsyncEngine) -> AsyncIterator[Client]:
    await create_ledger(engine)
    async with Client(engine, app=txflows.app) as client:
        yield client


@pytest_asyncio.fixture
async def tx_runtime(engine: AsyncEngine, tx_client: Client) -> AsyncIterator[Runtime]:
    runtime = Runtime(engine, txflows.app, poll_interval=0.2, lease=timedelta(seconds=1))
    await runtime.start()
    yield runtime
    await runtime.stop()


async def test_the_output_is_what_the_committed_body_returned(
    engine: AsyncEngine, tx_client: Client, tx_runtime: Runtime
) -> None:
    handle = await tx_client.start(txflows.book_flow, 10)
    output = await handle.result(timeout=20)
    rows = await ledger_rows(engine, handle.run_id)
    assert [(step, attempt) for _, step, attempt in rows] == [(1, 1), (2, 1)]
    assert output == rows[0][0]


async def test_a_body_that_raises_rolls_back_its_writes_and_is_retried(
    engine: AsyncEngine, tx_client: Client, tx_runtime: Runtime
) -> None:
    handle = await tx_client.start(txflows.fails_once_flow, 10)
    output = await handle.result(timeout=20)
    ((row_id, _, attempt),) = await ledger_rows(engine, handle.run_id)
    assert (output, attempt) == (row_id, 2)
    details = await tx_client.get_run(handle.run_id)
    assert sorted((t.attempt, t.state) for t in details.tasks) == [
        (1, TaskState.FAILED),
        (2, TaskState.COMPLETED),
    ]


async def test_a_superseded_attempt_commits_nothing(
    engine: AsyncEngine,
    tx_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker's lease keeper is stuck (a paused or partitioned worker): attempt 1's
    # lease expires while its body is still running, and attempt 2 takes over.
    async def stuck(self: Worker) -> None:
        return None

    monkeypatch.setattr(Worker, "extend_leases", stuck)
    gate = txflows.Gate(entered=asyncio.Event(), release=asyncio.Event())
    monkeypatch.setitem(txflows.GATES, 1, gate)
    caplog.set_level(logging.WARNING, logger="legato.worker")
    runtime = Runtime(engine, txflows.app, poll_interval=0.2, lease=timedelta(seconds=1))
    await runtime.start()
    try:
        handle = await tx_client.start(txflows.held_flow, 10)
        await asyncio.wait_for(gate.entered.wait(), timeout=20)
        output = await handle.result(timeout=30)  # attempt 2, while attempt 1 still runs
        gate.release.set()
        await eventually(lambda: "superseded" in caplog.text, "attempt 1 to be refused")
    finally:
        await runtime.stop()
    ((row_id, _, attempt),) = await ledger_rows(engine, handle.run_id)
    assert (output, attempt) == (row_id, 2)
    details = await tx_client.get_run(handle.run_id)
    assert sorted((t.attempt, t.state) for t in details.tasks) == [
        (1, TaskState.TIMED_OUT),
        (2, TaskState.COMPLETED),
    ]
    assert [e.type for e in details.history].count("task_completed") == 1


async def test_a_body_that_commits_itself_fails_without_retry(
    engine: AsyncEngine, tx_client: Client, tx_runtime: Runtime
) -> None:
    handle = await tx_client.start(txflows.commits_itself_flow, 10)
    with pytest.raises(RunFailed, match="TransactionEnded"):
        await handle.result(timeout=20)
    # What it committed itself stays: the guarantee is gone, and the error says why.
    assert [(step, attempt) for _, step, attempt in await ledger_rows(engine, handle.run_id)] == [
        (1, 1)
    ]


async def test_ctx_connection_in_a_plain_task_fails_the_attempt(
    tx_client: Client, tx_runtime: Runtime
) -> None:
    handle = await tx_client.start(txflows.not_transactional_flow, 10)
    with pytest.raises(RunFailed, match="NotTransactional"):
        await handle.result(timeout=20)


async def test_the_transaction_is_bounded_by_start_to_close(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await transactions.bound(conn, timedelta(milliseconds=1500))
        settings = [
            (await conn.execute(text(f"SHOW {name}"))).scalar_one()
            for name in (
                "statement_timeout",
                "idle_in_transaction_session_timeout",
                "plan_cache_mode",
            )
        ]
    # The body's own queries are planned as PostgreSQL does by default, not forced generic.
    assert settings == ["1500ms", "1500ms", "auto"]
    async with engine.connect() as conn:  # SET LOCAL: gone with the transaction
        assert (await conn.execute(text("SHOW statement_timeout"))).scalar_one() == "0"
        assert (await conn.execute(text("SHOW plan_cache_mode"))).scalar_one() == (
            "force_generic_plan"
        )
