"""Workflows the end-to-end tests run through the public API."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel

from legato import App, FailureInfo, Flow, Node, Retry, TaskContext, task, workflow
from tests.helpers import write_whole


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


# -- every node kind -----------------------------------------------------------------------

CALLS: list[str] = []


@task()
async def record(ctx: TaskContext, label: str) -> str:
    CALLS.append(label)
    return label


@workflow("sleepy")
def sleepy(flow: Flow[str]) -> Node[str]:
    first = flow.run(record, flow.input)
    nap = flow.sleep(timedelta(milliseconds=300), after=[first])
    return flow.run(record, first, after=[nap], name="after_sleep")


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"


class Account(BaseModel):
    name: str
    plan: Plan


@task()
async def upsell(ctx: TaskContext, account: Account) -> str:
    CALLS.append(f"upsell {account.name}")
    return f"upsell {account.name}"


@task()
async def welcome_pro(ctx: TaskContext, account: Account) -> str:
    CALLS.append(f"welcome {account.name}")
    return f"welcome {account.name}"


@workflow("branching")
def branching(flow: Flow[Account]) -> Node[str]:
    with flow.switch(flow.input, "plan") as sw:
        with sw.case(Plan.FREE):
            free = flow.run(upsell, flow.input)
        with sw.case(Plan.PRO):
            pro = flow.run(welcome_pro, flow.input)
    return flow.first_of(free, pro)


@task()
async def words(ctx: TaskContext, text: str) -> list[str]:
    return text.split()


@task()
async def shout(ctx: TaskContext, word: str) -> str:
    return word.upper()


@workflow("fanout")
def fanout(flow: Flow[str]) -> Node[list[str]]:
    return flow.map(shout, flow.run(words, flow.input), max_concurrency=2)


@workflow("parent")
def parent(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.child(chain, flow.input))


class Broken(Exception):
    pass


@task(retry=Retry(attempts=3, dont_retry_on=(Broken,)))
async def broken(ctx: TaskContext, value: int) -> int:
    raise Broken(f"cannot handle {value}")


HANDLED: list[FailureInfo] = []


@task()
async def compensate(ctx: TaskContext, failure: FailureInfo) -> None:
    HANDLED.append(failure)


@workflow("compensated")
def compensated(flow: Flow[int]) -> Node[int]:
    flow.on_failure(compensate)
    return flow.run(broken, flow.input)


class Approval(BaseModel):
    approved: bool


@workflow("approval")
def approval(flow: Flow[str]) -> Node[Approval]:
    return flow.wait_for_event(
        "approval", Approval, timeout=timedelta(milliseconds=300), default=Approval(approved=False)
    )


@workflow("strict_approval")
def strict_approval(flow: Flow[str]) -> Node[Approval]:
    return flow.wait_for_event("approval", Approval, timeout=timedelta(milliseconds=300))


@workflow("late_wait")
def late_wait(flow: Flow[str]) -> Node[Approval]:
    nap = flow.sleep(timedelta(milliseconds=400))
    return flow.wait_for_event("approval", Approval, after=[nap])


@task()
async def forever(ctx: TaskContext, label: str) -> str:
    CALLS.append(f"forever {label} started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CALLS.append(f"forever {label} cancelled")
        raise
    return label


@workflow("endless")
def endless(flow: Flow[str]) -> Node[str]:
    return flow.run(forever, flow.input)


app = App(
    workflows=[
        signup,
        chain,
        retrying,
        sleepy,
        branching,
        fanout,
        parent,
        compensated,
        approval,
        strict_approval,
        late_wait,
        endless,
    ]
)


# -- crash tests ---------------------------------------------------------------------------

BLOCK_DIR_ENV = "LEGATO_TEST_BLOCK_DIR"


@task(retry=Retry(attempts=3, backoff=timedelta(milliseconds=50)))
async def crashy(ctx: TaskContext, key: str) -> str:
    """Blocks forever on its first attempt in a process that has ``BLOCK_DIR_ENV`` set,
    after leaving a marker file, so a test can kill that process mid-task."""
    block_dir = os.environ.get(BLOCK_DIR_ENV)
    if block_dir and ctx.attempt == 1:
        await asyncio.to_thread(write_whole, Path(block_dir, key), str(os.getpid()))
        await asyncio.sleep(3600)
    return f"{key} done by attempt {ctx.attempt}"


@workflow("crashy")
def crashy_flow(flow: Flow[str]) -> Node[str]:
    return flow.run(crashy, flow.input)


app = App(workflows=[*app.workflows.values(), crashy_flow])


# -- timeouts ------------------------------------------------------------------------------

SLOW_CALLS: dict[str, int] = {}


@task(
    start_to_close=timedelta(milliseconds=300),
    retry=Retry(attempts=2, backoff=timedelta(milliseconds=10)),
)
async def slow_first(ctx: TaskContext, key: str) -> str:
    """Hangs past its start_to_close on the first attempt only."""
    SLOW_CALLS[key] = SLOW_CALLS.get(key, 0) + 1
    if ctx.attempt == 1:
        await asyncio.sleep(30)
    return f"{key} finished on attempt {ctx.attempt}"


@workflow("timeboxed")
def timeboxed(flow: Flow[str]) -> Node[str]:
    return flow.run(slow_first, flow.input)


app = App(workflows=[*app.workflows.values(), timeboxed])
