from __future__ import annotations

from legato import Client, RunStatus, Runtime
from tests.e2e.flows import Active, Confirmed, Signup, chain, signup


async def test_chain_of_three_tasks(runtime: Runtime, client: Client) -> None:
    handle = await client.start(chain, 4)
    assert await handle.result(timeout=20) == 11
    details = await client.get_run(handle.run_id)
    assert details.run.status is RunStatus.SUCCEEDED
    assert sorted(t.task_name or "" for t in details.tasks) == ["add_one", "add_one", "double"]
    assert all(t.state == "COMPLETED" and t.attempt == 1 for t in details.tasks)
    assert details.history[0].type == "run_started"
    assert [e.seq for e in details.history] == list(range(1, len(details.history) + 1))


async def test_signup_waits_for_the_event(runtime: Runtime, client: Client) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
    assert await handle.result(timeout=20) == Active(user_id="ada", code="c0de")
