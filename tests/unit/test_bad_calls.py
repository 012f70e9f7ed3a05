"""Calls of the Python API with values of the wrong kind: each is a typed ``LegatoError``
naming the value, never the ``TypeError`` or ``OverflowError`` of the code beneath."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from examples.signup import Signup, signup
from examples.signup import app as signup_app
from legato import (
    ConfigurationError,
    InvalidArgument,
    InvalidSignature,
    LegatoError,
    UnknownTask,
    UnknownWorkflow,
    create_engine,
    webhooks,
)
from legato.engine.loops.supervision import RestartPolicy
from legato.testing import Simulator

hooks: Any = webhooks  # the calls below break the annotations on purpose
BODY = b'{"id": "x"}'
STAMP = 1_700_000_000
ADA = Signup(email="ada@example.com")
HEADERS = {
    webhooks.TIMESTAMP_HEADER: str(STAMP),
    webhooks.SIGNATURE_HEADER: webhooks.sign("s", STAMP, BODY),
}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: hooks.verify("s", BODY, None),
            InvalidArgument,
            "headers=...) must be a mapping",
        ),
        (lambda: hooks.verify("s", 5, HEADERS), InvalidArgument, "not int: e.g. await request"),
        (lambda: hooks.verify(None, BODY, HEADERS), InvalidArgument, "verify(secret=...)"),
        (lambda: hooks.sign(None, STAMP, BODY), InvalidArgument, "sign(secret=...)"),
        (
            lambda: create_engine("postgresql://a@h/db", application_name=cast(str, 5)),
            ConfigurationError,
            "the session setting application_name=5 must be a string",
        ),
        (
            lambda: create_engine("postgresql://a@h/db", application_name="a\x00b"),
            ConfigurationError,
            "must be a string without NUL characters",
        ),
        (lambda: signup_app.workflow(cast(str, [])), UnknownWorkflow, "unknown workflow []"),
        (lambda: signup_app.task(cast(str, {})), UnknownTask, "unknown task {}"),
        (
            lambda: RestartPolicy(first_delay=10.0, max_delay=1.0),
            ConfigurationError,
            "first_delay=10.0) is longer than its max_delay=1.0",
        ),
        (
            lambda: Simulator(signup, ADA, now=datetime.max.replace(tzinfo=UTC)),
            InvalidArgument,
            "too close to the year 9999",
        ),
    ],
)
def test_a_call_with_the_wrong_kind_of_value_says_which(
    call: Callable[[], object], error: type[LegatoError], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_a_str_body_with_a_lone_surrogate_is_only_a_wrong_signature() -> None:
    with pytest.raises(InvalidSignature):  # it never came over the wire
        hooks.verify("s", "\ud800", HEADERS, now=STAMP)


@pytest.mark.parametrize("by", [1e15, timedelta.max, -1.0])
async def test_advancing_past_what_a_timedelta_holds_is_an_invalid_argument(by: object) -> None:
    sim = Simulator(signup, ADA)
    advance: Callable[[], Awaitable[None]] = lambda: sim.advance(by)  # type: ignore[arg-type]  # noqa: E731
    with pytest.raises(InvalidArgument, match="give a timedelta or a number of seconds"):
        await advance()
