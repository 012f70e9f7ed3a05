"""Workflows the end-to-end tests run through the public API."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from legato import App, Flow, Node, Retry, TaskContext, task, workflow


class Signup(BaseModel):
    email: str


class User(BaseModel):
    user_id: str


class Confirmed(BaseModel):
    code: str


class Active(BaseModel):
    user_id: str
    code: str


@task()
async def create_user(ctx: TaskContext, signup: Signup) -> User:
    return User(user_id=signup.email.split("@")[0])


@task()
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> Active:
    return Active(user_id=user.user_id, code=confirmed.code)


@workflow("signup")
def signup(flow: Flow[Signup]) -> Node[Active]:
    user = flow.run(create_user, flow.input)
    confirmed = flow.wait_for_event("signup.confirmed", Confirmed, timeout=timedelta(minutes=30))
    return flow.run(activate, user, confirmed)


@task()
async def double(ctx: TaskContext, value: int) -> int:
    return value * 2


@task()
async def add_one(ctx: TaskContext, value: int) -> int:
    return value + 1


@workflow("chain")
def chain(flow: Flow[int]) -> Node[int]:
    return flow.run(add_one, flow.run(double, flow.run(add_one, flow.input)))


FLAKY_CALLS: dict[str, int] = {}


class Flaky(Exception):
    pass


@task(retry=Retry(attempts=4, backoff=timedelta(milliseconds=50), max_backoff=timedelta(seconds=1)))
async def flaky(ctx: TaskContext, key: str) -> str:
    FLAKY_CALLS[key] = FLAKY_CALLS.get(key, 0) + 1
    if FLAKY_CALLS[key] <= 2:
        raise Flaky(f"failure {FLAKY_CALLS[key]} of {key}")
    return f"{key} ok after {FLAKY_CALLS[key]} calls"


@workflow("retrying")
def retrying(flow: Flow[str]) -> Node[str]:
    return flow.run(flaky, flow.input)


app = App(workflows=[signup, chain, retrying])
