"""Batch tasks without a database: the declaration's checks, and the batching of
attempts into body calls (by size, by wait, one output per input)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from legato import Batch, BatchContext, BatchOutputMismatch, TaskContext, batch_task
from legato.errors import TaskDefinitionError
from legato.testing import run_task

CALLS: list[list[int]] = []


@batch_task(Batch(max_size=3, max_wait=timedelta(milliseconds=20)))
async def tripled(ctx: BatchContext, items: list[int]) -> list[int]:
    CALLS.append(items)
    return [item * 3 for item in items]


@batch_task(Batch(max_size=3))
async def too_few(ctx: BatchContext, items: list[int]) -> list[int]:
    return items[1:]


def _ctx(attempt: int = 1) -> TaskContext:
    return TaskContext(
        run_id=uuid.uuid4(), task_id=uuid.uuid4(), workflow="w", node_id="n", attempt=attempt
    )


def test_an_empty_name_is_refused_as_task_refuses_it() -> None:
    async def body(ctx: BatchContext, items: list[int]) -> list[int]:
        return items

    with pytest.raises(TaskDefinitionError, match="name '' must not be empty"):
        batch_task(Batch(max_size=2), name="")(body)
    with pytest.raises(TaskDefinitionError, match=r"batch=5 must be a legato\.Batch"):
        batch_task(5)(body)  # type: ignore[arg-type]


def test_a_batch_is_declared_with_a_size_and_a_wait_in_range() -> None:
    for bad, says in (
        ({"max_size": 0}, "max_size must be an int from 1 to 1000"),
        ({"max_size": 2.5}, "max_size must be an int"),
        ({"max_size": 2, "max_wait": 1}, "max_wait must be a timedelta from 0"),
        ({"max_size": 2, "max_wait": timedelta(hours=1)}, "max_wait must be a timedelta"),
        ({"max_size": -1}, r"Batch\(max_size=-1\)"),
        ({"max_size": 10**9}, "from 1 to 1000"),
        ({"max_size": True}, r"max_size=True\)"),  # a bool is not a size
        ({"max_size": "3"}, "max_size='3'"),
        ({"max_size": float("nan")}, "max_size=nan"),
        ({"max_size": 2, "max_wait": timedelta(seconds=-1)}, "max_wait must be a timedelta"),
        ({"max_size": 2, "max_wait": timedelta.max}, "max_wait must be a timedelta"),
        ({"max_size": 2, "max_wait": float("inf")}, "max_wait=inf"),
        ({"max_size": 2, "max_wait": None}, "max_wait=None"),
    ):
        with pytest.raises(TaskDefinitionError, match=says):
            Batch(**bad)


def test_a_batch_body_takes_and_returns_lists() -> None:
    with pytest.raises(TaskDefinitionError, match="its parameter after the context must be list"):

        @batch_task(Batch(max_size=2))  # type: ignore[arg-type]
        async def single(ctx: BatchContext, item: int) -> list[int]:
            return [item]

    with pytest.raises(TaskDefinitionError, match="its return type must be list"):

        @batch_task(Batch(max_size=2))  # type: ignore[arg-type]
        async def scalar(ctx: BatchContext, items: list[int]) -> int:
            return 0

    assert tripled.param_types == (int,) and tripled.return_type is int


def test_attempts_run_together_up_to_the_size_and_after_the_wait() -> None:
    CALLS.clear()

    async def scenario() -> list[object]:
        return list(await asyncio.gather(*(tripled.invoke(_ctx(), [n]) for n in range(5))))

    assert asyncio.run(scenario()) == [0, 3, 6, 9, 12]
    assert CALLS == [[0, 1, 2], [3, 4]]  # three at once; the last two after max_wait


def test_a_wrong_number_of_outputs_fails_every_attempt_of_the_batch() -> None:
    async def scenario() -> list[object]:
        calls = (too_few.invoke(_ctx(), [n]) for n in range(3))
        return list(await asyncio.gather(*calls, return_exceptions=True))

    outcomes = asyncio.run(scenario())
    assert all(isinstance(outcome, BatchOutputMismatch) for outcome in outcomes)
    assert "returned 2 outputs for 3 inputs" in str(outcomes[0])
    assert not too_few.is_retryable(outcomes[0])  # type: ignore[arg-type]


def test_run_task_runs_a_batch_task_on_one_input() -> None:
    CALLS.clear()
    assert asyncio.run(run_task(tripled, 4)) == 12
    assert CALLS == [[4]]
