"""Workflows shared by the unit tests (module level, so annotations resolve)."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel

from legato.context import TaskContext
from legato.flow import FailureInfo, Flow, Node, Retry, task, workflow


class Signup(BaseModel):
    email: str


class User(BaseModel):
    user_id: str


class Confirmed(BaseModel):
    code: str


class Active(BaseModel):
    user_id: str
    code: str


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"


class Account(BaseModel):
    user_id: str
    plan: Plan


@task(retry=Retry(attempts=5, backoff=timedelta(seconds=1)))
async def create_user(ctx: TaskContext, signup: Signup) -> User:
    return User(user_id=signup.email.split("@")[0])


@task(queue="mail", priority=5)
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> Active:
    return Active(user_id=user.user_id, code=confirmed.code)


@workflow("signup")
def signup(flow: Flow[Signup]) -> Node[Active]:
    user = flow.run(create_user, flow.input)
    confirmed = flow.wait_for_event("signup.confirmed", Confirmed, timeout=timedelta(minutes=30))
    return flow.run(activate, user, confirmed)


@task()
async def load_account(ctx: TaskContext, user: User) -> Account:
    return Account(user_id=user.user_id, plan=Plan.PRO)


@task()
async def upsell(ctx: TaskContext, account: Account) -> str:
    return f"upsell {account.user_id}"


@task()
async def welcome_pro(ctx: TaskContext, account: Account) -> str:
    return f"welcome pro {account.user_id}"


@task()
async def emails(ctx: TaskContext, user: User) -> list[str]:
    return [f"{user.user_id}@a", f"{user.user_id}@b"]


@task(retry=Retry(attempts=2))
async def send(ctx: TaskContext, address: str) -> int:
    return len(address)


@task(retry=Retry(attempts=1))
async def compensate(ctx: TaskContext, failure: FailureInfo) -> None:
    return None


@workflow("branchy")
def branchy(flow: Flow[User]) -> Node[str]:
    account = flow.run(load_account, flow.input)
    with flow.switch(account, "plan") as sw:
        with sw.case(Plan.FREE):
            a = flow.run(upsell, account)
        with sw.case(Plan.PRO):
            b = flow.run(welcome_pro, account)
    return flow.first_of(a, b)


@workflow("fanout")
def fanout(flow: Flow[User]) -> Node[list[int]]:
    addresses = flow.run(emails, flow.input)
    flow.sleep(timedelta(seconds=10), after=[addresses])
    return flow.map(send, addresses, max_concurrency=1)


@workflow("parent")
def parent(flow: Flow[Signup]) -> Node[Active]:
    flow.on_failure(compensate)
    return flow.child(signup, flow.input)
