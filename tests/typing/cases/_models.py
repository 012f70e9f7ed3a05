"""Models, tasks and a workflow the cases wire together (this file itself must check clean)."""

import enum

from pydantic import BaseModel

from legato.context import TaskContext
from legato.flow import FailureInfo, Flow, Node, task, workflow


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Signup(BaseModel):
    email: str


class User(BaseModel):
    user_id: str
    plan: Plan


class Order(BaseModel):
    order_id: str


class Confirmed(BaseModel):
    code: str


@task()
async def create_user(ctx: TaskContext, signup: Signup) -> User:
    return User(user_id=signup.email, plan=Plan.FREE)


@task()
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> User:
    return user


@task()
async def ship(ctx: TaskContext, order: Order) -> None:
    return None


@task()
async def ping(ctx: TaskContext) -> int:
    return 1


@task()
async def words(ctx: TaskContext, user: User) -> list[str]:
    return [user.user_id]


@task()
async def numbers(ctx: TaskContext) -> list[int]:
    return [1]


@task()
async def shout(ctx: TaskContext, s: str) -> str:
    return s.upper()


@task()
async def report(ctx: TaskContext, failure: FailureInfo) -> None:
    return None


@workflow("signup")
def signup(flow: Flow[Signup]) -> Node[User]:
    return flow.run(create_user, flow.input)
