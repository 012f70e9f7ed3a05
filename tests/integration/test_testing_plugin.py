"""The signup workflow tested as a user would, with legato.testing's PostgreSQL fixtures."""

from __future__ import annotations

import pytest

from examples.signup import Active, Confirmed, Signup, app, signup
from legato import App, Client, RunStatus, Runtime


@pytest.fixture
def legato_app() -> App:
    return app


async def test_signup_activates_once_confirmed(
    legato_runtime: Runtime, legato_client: Client
) -> None:
    handle = await legato_client.start(signup, Signup(email="ada@example.com"))
    await legato_client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))

    active = await handle.result(timeout=30)

    assert active == Active(user_id="ada", email="ada@example.com", confirmation="c0de")
    details = await legato_client.get_run(handle.run_id)
    assert details.run.status is RunStatus.SUCCEEDED
    assert [t.node_id for t in details.tasks] == ["create_user", "signup.confirmed", "activate"]
