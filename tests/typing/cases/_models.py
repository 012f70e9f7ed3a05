from pydantic import BaseModel

from legato.context import TaskContext
from legato.flow import task


class User(BaseModel):
    user_id: str


class Order(BaseModel):
    order_id: str


class Confirmed(BaseModel):
    code: str


@task()
async def ship(ctx: TaskContext, order: Order) -> None:
    return None


@task()
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> User:
    return user


@task()
async def shout(ctx: TaskContext, s: str) -> str:
    return s
