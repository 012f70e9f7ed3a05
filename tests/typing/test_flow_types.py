"""Static type tests, checked by the normal mypy run (``mypy`` covers ``tests/``).

Correct wiring is pinned with ``assert_type``; miswiring carries a
``# type: ignore[code]`` that ``warn_unused_ignores`` turns into an error the
day the typing goes slack and the mistake stops being reported.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, assert_type

from pydantic import BaseModel

from legato.context import TaskContext
from legato.flow import (
    FailureInfo,
    Flow,
    Node,
    Switch,
    Task0,
    Task1,
    Task2,
    Workflow,
    task,
    workflow,
)


class Signup(BaseModel):
    email: str


class User(BaseModel):
    user_id: str


class Order(BaseModel):
    order_id: str


class Confirmed(BaseModel):
    code: str


class Active(BaseModel):
    user_id: str


@task()
async def create_user(ctx: TaskContext, signup: Signup) -> User:
    return User(user_id=signup.email)


@task()
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> Active:
    return Active(user_id=user.user_id)


@task()
async def ship(ctx: TaskContext, order: Order) -> None:
    return None


@task()
async def ping(ctx: TaskContext) -> int:
    return 1


@task()
async def ids(ctx: TaskContext, user: User) -> list[str]:
    return [user.user_id]


@task()
async def shout(ctx: TaskContext, s: str) -> str:
    return s.upper()


@task()
async def on_fail(ctx: TaskContext, failure: FailureInfo) -> None:
    return None


assert_type(create_user, Task1[Signup, User])
assert_type(activate, Task2[User, Confirmed, Active])
assert_type(ping, Task0[int])


@workflow("typed-signup")
def signup(flow: Flow[Signup]) -> Node[Active]:
    assert_type(flow.input, Node[Signup])
    user = flow.run(create_user, flow.input)
    assert_type(user, Node[User])
    confirmed = flow.wait_for_event("signup.confirmed", Confirmed, timeout=timedelta(minutes=30))
    assert_type(confirmed, Node[Confirmed])
    late = flow.wait_for_event("late", Confirmed, default=Confirmed(code="none"))
    assert_type(late, Node[Confirmed])
    pause = flow.sleep(timedelta(seconds=1), after=[user])
    assert_type(pause, Node[None])
    assert_type(flow.run(ping, after=[pause, late]), Node[int])
    names = flow.run(ids, user)
    assert_type(flow.map(shout, names, max_concurrency=2), Node[list[str]])
    sw = flow.switch(user, "user_id")
    assert_type(sw, Switch[Any])
    with sw.case("a"):
        a = flow.run(activate, user, confirmed)
    with sw.default():
        b = flow.run(activate, user, late)
    merged = flow.first_of(a, b)
    assert_type(merged, Node[Active])
    flow.on_failure(on_fail)
    return merged


assert_type(signup, Workflow[Signup, Active])


@workflow("typed-parent")
def parent(flow: Flow[Signup]) -> Node[Active]:
    child = flow.child(signup, flow.input)
    assert_type(child, Node[Active])
    return child


def _outputs(wf: Workflow[Signup, Active]) -> Active:
    return wf.parse_output({"user_id": "x"})


# -- miswiring: each line must stay a type error -------------------------------------------


def _miswired(flow: Flow[Signup], user: Node[User], order: Node[Order]) -> None:
    flow.run(ship, user)  # type: ignore[misc]
    flow.run(create_user, order)  # type: ignore[misc]
    flow.run(activate, user)  # type: ignore[call-overload]
    flow.run(ping, user)  # type: ignore[call-overload]
    flow.run(create_user, flow.input, flow.input)  # type: ignore[call-overload]
    flow.map(ship, user)  # type: ignore[arg-type]
    flow.map(activate, user)  # type: ignore[arg-type]
    flow.child(signup, order)  # type: ignore[misc]
    flow.on_failure(ship)  # type: ignore[arg-type]
    bad: Node[Order] = flow.run(create_user, flow.input)  # type: ignore[arg-type]
    del bad


def _not_a_list(flow: Flow[Signup], user: Node[User], many: Node[list[str]]) -> None:
    assert_type(flow.map(shout, many), Node[list[str]])
    flow.map(shout, user)  # type: ignore[arg-type]


def test_typed_workflows_compile() -> None:
    """The module imports (so the workflows above compile at runtime, too)."""
    assert parent.spec.nodes[0].kind == "child"
    assert signup.spec.on_failure == "on_fail"
