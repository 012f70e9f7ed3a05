"""@task(transactional=True): its limits are checked when the task is defined."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from legato import NotTransactional, TaskContext, TaskDefinitionError, task


async def _body(ctx: TaskContext, n: int) -> int:
    return n


def test_a_transactional_task_needs_start_to_close() -> None:
    with pytest.raises(TaskDefinitionError, match=r"_body: transactional=True needs start_to"):
        task(transactional=True)(_body)


def test_transactional_must_be_a_bool() -> None:
    with pytest.raises(TaskDefinitionError, match=r"transactional='yes' must be True or False"):
        task(transactional="yes", start_to_close=timedelta(seconds=5))(_body)  # type: ignore[arg-type]


def test_the_option_is_recorded() -> None:
    bounded = task(transactional=True, start_to_close=timedelta(seconds=5))(_body)
    assert bounded.transactional and not task()(_body).transactional


def test_ctx_connection_outside_a_transactional_task_names_the_fix() -> None:
    run_id, task_id = uuid.uuid4(), uuid.uuid4()
    ctx = TaskContext(run_id=run_id, task_id=task_id, workflow="w", node_id="n", task="t")
    with pytest.raises(NotTransactional, match=r"'t' is not transactional.*transactional=True"):
        _ = ctx.connection
