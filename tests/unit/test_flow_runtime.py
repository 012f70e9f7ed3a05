"""What the runtime calls on workflows and tasks: validation, invoke, retry classification."""

from __future__ import annotations

import uuid

import pytest

from legato.context import TaskCancelled, TaskContext
from legato.flow import (
    InputValidationError,
    Retry,
    TaskArgumentsError,
    UnknownEventError,
    task,
)

from ._flows import Active, activate, signup

CTX = TaskContext(run_id=uuid.uuid4(), task_id=uuid.uuid4(), workflow="signup", node_id="activate")


async def test_invoke_validates_json_args_and_serialises_the_result() -> None:
    out = await activate.invoke(CTX, [{"user_id": "ada"}, {"code": "7"}])
    assert out == {"user_id": "ada", "code": "7"}
    assert (activate.name, activate.queue, activate.priority) == ("activate", "mail", 5)


async def test_invoke_rejects_bad_arguments() -> None:
    with pytest.raises(TaskArgumentsError, match="'activate' takes 2 argument"):
        await activate.invoke(CTX, [{"user_id": "ada"}])
    with pytest.raises(TaskArgumentsError, match="invalid arguments"):
        await activate.invoke(CTX, [{"user_id": 1}, {"code": "7"}])


def test_validate_input_and_parse_output() -> None:
    assert signup.validate_input({"email": "a@b"}) == {"email": "a@b"}
    with pytest.raises(InputValidationError, match="workflow 'signup': invalid input"):
        signup.validate_input({"mail": "a@b"})
    out = signup.parse_output({"user_id": "a", "code": "c"})
    assert isinstance(out, Active)
    assert signup.input_type.__name__ == "Signup"  # type: ignore[attr-defined]


def test_validate_event_rejects_unknown_events_and_bad_payloads() -> None:
    assert signup.validate_event("signup.confirmed", {"code": "1"}) == {"code": "1"}
    with pytest.raises(UnknownEventError, match="no wait for event 'nope'"):
        signup.validate_event("nope", {})
    with pytest.raises(
        InputValidationError, match=r"invalid payload for event 'signup\.confirmed'"
    ):
        signup.validate_event("signup.confirmed", {"code": None})


class Transient(Exception):
    pass


class Fatal(Transient):
    pass


@task(retry=Retry(retry_on=(Transient,), dont_retry_on=(Fatal,)))
async def picky(ctx: TaskContext) -> None:
    return None


def test_is_retryable_follows_the_policy() -> None:
    assert picky.is_retryable(Transient())
    assert not picky.is_retryable(Fatal())
    assert not picky.is_retryable(ValueError())
    assert not picky.is_retryable(TaskCancelled())
    assert activate.is_retryable(RuntimeError())
