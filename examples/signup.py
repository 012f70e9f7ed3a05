"""The signup workflow of the README: create the user, wait for the confirmation, activate.

```
legato dev --app examples.signup:app          # runs every loop on an embedded PostgreSQL
legato runs start signup --input '{"email": "ada@example.com"}'
legato runs signal RUN_ID signup.confirmed --payload '{"code": "c0de"}'
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from legato import App, Flow, Node, Retry, TaskContext, task, workflow


class Signup(BaseModel):
    email: str


class User(BaseModel):
    user_id: str
    email: str


class Confirmed(BaseModel):
    code: str


class Active(BaseModel):
    user_id: str
    email: str
    confirmation: str


@task(retry=Retry(attempts=5, backoff=timedelta(seconds=1)))
async def create_user(ctx: TaskContext, signup: Signup) -> User:
    """Create the account (here: derive an id from the address)."""
    return User(user_id=signup.email.split("@")[0], email=signup.email)


@task()
async def activate(ctx: TaskContext, user: User, confirmed: Confirmed) -> Active:
    """Activate the account once the address is confirmed."""
    return Active(user_id=user.user_id, email=user.email, confirmation=confirmed.code)


@workflow("signup")
def signup(flow: Flow[Signup]) -> Node[Active]:
    user = flow.run(create_user, flow.input)
    confirmed = flow.wait_for_event("signup.confirmed", Confirmed, timeout=timedelta(minutes=30))
    return flow.run(activate, user, confirmed)


app = App(workflows=[signup])
