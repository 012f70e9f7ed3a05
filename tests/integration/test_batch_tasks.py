"""Batch tasks: a worker hands up to ``max_size`` attempts of a batch task to one body
call and each attempt gets its own output, keeps its own retries and history; a wrong
number of outputs fails each attempt with ``BatchOutputMismatch``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFailed, Runtime
from tests import batch_app
from tests.batch_app import Doubled, Number, app, double_flow, flaky_flow, short_flow


@pytest.fixture(autouse=True)
def _no_calls() -> Iterator[None]:
    batch_app.CALLS.clear()
    yield
    batch_app.CALLS.clear()


async def test_queued_attempts_share_body_calls_and_each_gets_its_own_output(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client:
        # Queued before any worker runs: the worker finds all five at once.
        handles = [await client.start(double_flow, Number(n=n)) for n in range(5)]
        async with Runtime(engine, app, poll_interval=0.1):
            results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
        assert results == [Doubled(n=n * 2, attempt=1) for n in range(5)]
        sizes = [len(call) for call in batch_app.CALLS]
        assert sum(sizes) == 5 and max(sizes) <= 3
        assert max(sizes) > 1  # batched, not one call per attempt
        assert sorted(n for call in batch_app.CALLS for n in call) == list(range(5))
        for n, handle in enumerate(handles):
            details = await client.get_run(handle.run_id)
            completed = [e for e in details.history if e.type == "task_completed"]
            assert [e.data for e in completed] == [{"output": {"n": n * 2, "attempt": 1}}]
            entries = [e.value async for e in client.stream(handle.run_id)]
            assert entries == [{"doubling": n}]


async def test_a_failed_batch_retries_each_attempt_on_its_own_policy(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client:
        handles = [await client.start(flaky_flow, Number(n=n)) for n in range(3)]
        async with Runtime(engine, app, poll_interval=0.1):
            results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
        assert results == [Doubled(n=n * 2, attempt=2) for n in range(3)]
        for handle in handles:
            attempts = (await client.get_run(handle.run_id)).tasks
            assert [(a.attempt, a.state.value) for a in attempts] == [
                (1, "FAILED"),
                (2, "COMPLETED"),
            ]
            assert attempts[0].error is not None
            assert attempts[0].error.type == "ConnectionError"


async def test_a_wrong_number_of_outputs_fails_each_attempt_without_retry(
    engine: AsyncEngine,
) -> None:
    async with Client(engine, app=app) as client:
        handles = [await client.start(short_flow, Number(n=n)) for n in range(2)]
        async with Runtime(engine, app, poll_interval=0.1):
            for handle in handles:
                with pytest.raises(RunFailed) as failed:
                    await handle.result(timeout=30)
                assert failed.value.error is not None
                assert failed.value.error.type == "BatchOutputMismatch"
                assert "inputs: return a list of one output per input" in (
                    failed.value.error.message
                )
        for handle in handles:
            attempts = (await client.get_run(handle.run_id)).tasks
            assert [a.attempt for a in attempts] == [1]  # not retried
