"""Correct wiring of every node kind, pinned with assert_type: this file must check clean."""

from datetime import timedelta
from typing import assert_type

from _models import (
    Confirmed,
    Plan,
    Signup,
    User,
    activate,
    create_user,
    ping,
    report,
    shout,
    signup,
    words,
)
from pydantic import JsonValue

from legato.client import Client, RunHandle
from legato.flow import Flow, Node, Switch, Task0, Task1, Task2, Workflow, workflow

assert_type(create_user, Task1[Signup, User])
assert_type(activate, Task2[User, Confirmed, User])
assert_type(ping, Task0[int])
assert_type(signup, Workflow[Signup, User])


@workflow("everything")
def everything(flow: Flow[Signup]) -> Node[User]:
    assert_type(flow.input, Node[Signup])
    user = flow.run(create_user, flow.input, name="create")
    assert_type(user, Node[User])
    confirmed = flow.wait_for_event("confirmed", Confirmed, timeout=timedelta(minutes=30))
    assert_type(confirmed, Node[Confirmed])
    late = flow.wait_for_event("late", Confirmed, default=Confirmed(code="none"))
    assert_type(late, Node[Confirmed])
    pause = flow.sleep(timedelta(seconds=1), after=[user])
    assert_type(pause, Node[None])
    assert_type(flow.run(ping, after=[pause, late]), Node[int])
    assert_type(flow.map(shout, flow.run(words, user), max_concurrency=2), Node[list[str]])
    assert_type(flow.child(signup, flow.input), Node[User])
    by_selector = flow.switch(user, lambda u: u.plan)
    assert_type(by_selector, Switch[Plan])
    flow.switch(user, "plan")
    assert_type(flow.switch(flow.run(ping)), Switch[int])
    with by_selector.case(Plan.PRO):
        a = flow.run(activate, user, confirmed)
    with by_selector.default():
        b = flow.run(activate, user, late)
    merged = flow.first_of(a, b)
    assert_type(merged, Node[User])
    flow.on_failure(report)
    return merged


async def start(client: Client) -> None:
    assert_type(await client.start(everything, Signup(email="a@b.c")), RunHandle[User])
    by_name = await client.start("everything", {"email": "a@b.c"})
    assert_type(by_name, RunHandle[JsonValue])
