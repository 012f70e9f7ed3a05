"""Every node kind end to end, through the public API, on a real PostgreSQL."""

from __future__ import annotations

import functools
import time
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, RunFailed, RunStatus, Runtime, TaskState
from tests.e2e import flows
from tests.e2e.flows import Account, Approval, Plan
from tests.helpers import eventually


async def test_sleep_delays_the_next_task(runtime: Runtime, client: Client) -> None:
    began = time.monotonic()
    handle = await client.start(flows.sleepy, "nap")
    assert await handle.result(timeout=20) == "nap"
    assert time.monotonic() - began >= 0.3
    details = await client.get_run(handle.run_id)
    sleeps = [t for t in details.tasks if t.kind == "SLEEP"]
    assert len(sleeps) == 1 and sleeps[0].state is TaskState.COMPLETED


async def test_switch_runs_one_branch_and_skips_the_other(runtime: Runtime, client: Client) -> None:
    flows.CALLS.clear()
    handle = await client.start(flows.branching, Account(name="ada", plan=Plan.PRO))
    assert await handle.result(timeout=20) == "welcome ada"
    assert flows.CALLS == ["welcome ada"]
    details = await client.get_run(handle.run_id)
    states = {t.node_id: t.state for t in details.tasks if t.kind == "TASK"}
    assert states == {"welcome_pro": TaskState.COMPLETED, "upsell": TaskState.SKIPPED}


async def test_free_plan_takes_the_other_branch(runtime: Runtime, client: Client) -> None:
    flows.CALLS.clear()
    handle = await client.start(flows.branching, Account(name="bo", plan=Plan.FREE))
    assert await handle.result(timeout=20) == "upsell bo"
    assert flows.CALLS == ["upsell bo"]


async def test_map_fans_out_and_collects_in_order(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.fanout, "one two three four five")
    assert await handle.result(timeout=20) == ["ONE", "TWO", "THREE", "FOUR", "FIVE"]
    details = await client.get_run(handle.run_id)
    elements = sorted(t.iteration for t in details.tasks if t.task_name == "shout")
    assert elements == [0, 1, 2, 3, 4]


async def test_child_workflow_completes_the_parent_node(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.parent, 4)
    assert await handle.result(timeout=20) == 22  # chain(4) = 11, doubled
    details = await client.get_run(handle.run_id)
    (child_node,) = [t for t in details.tasks if t.kind == "CHILD"]
    child = await client.get_run(child_node.task_id)
    assert child.run.parent_run_id == handle.run_id
    assert child.run.status is RunStatus.SUCCEEDED and child.run.output == 11


async def test_permanent_failure_fails_the_run_and_runs_the_handler(
    runtime: Runtime, client: Client
) -> None:
    flows.HANDLED.clear()
    handle = await client.start(flows.compensated, 7)
    with pytest.raises(RunFailed, match="Broken: cannot handle 7"):
        await handle.result(timeout=20)
    details = await client.get_run(handle.run_id)
    (attempt,) = [t for t in details.tasks if t.task_name == "broken"]
    assert attempt.state is TaskState.FAILED and attempt.attempt == 1  # not retryable
    assert attempt.error is not None and attempt.error.type == "Broken"
    assert len(flows.HANDLED) == 1 and "cannot handle 7" in flows.HANDLED[0].message


async def test_retries_with_backoff_until_success(runtime: Runtime, client: Client) -> None:
    flows.FLAKY_CALLS.clear()
    handle = await client.start(flows.retrying, "k1")
    assert await handle.result(timeout=20) == "k1 ok after 3 calls"
    details = await client.get_run(handle.run_id)
    attempts = sorted((t.attempt, t.state) for t in details.tasks)
    assert attempts == [(1, TaskState.FAILED), (2, TaskState.FAILED), (3, TaskState.COMPLETED)]
    failed = [t for t in details.tasks if t.state is TaskState.FAILED]
    assert all(t.error is not None and "failure" in t.error.message for t in failed)
    retried = [e for e in details.history if "retry" in e.type]
    assert len(retried) == 2


async def test_event_timeout_yields_the_default(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.approval, "x")
    assert await handle.result(timeout=20) == Approval(approved=False)


async def test_event_timeout_without_default_fails(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.strict_approval, "x")
    with pytest.raises(RunFailed):
        await handle.result(timeout=20)


async def test_signal_before_the_wait_is_buffered(runtime: Runtime, client: Client) -> None:
    handle = await client.start(flows.late_wait, "x")
    await client.signal(handle.run_id, "approval", Approval(approved=True))
    assert await handle.result(timeout=20) == Approval(approved=True)


async def test_emit_reaches_every_waiting_run(runtime: Runtime, client: Client) -> None:
    first = await client.start(flows.signup, flows.Signup(email="a@x"))
    second = await client.start(flows.signup, flows.Signup(email="b@x"))
    for handle in (first, second):
        await eventually(
            functools.partial(_waiting_for_event, client, handle.run_id),
            "the run to wait for its event",
        )
    delivered = await client.emit("signup.confirmed", flows.Confirmed(code="all"))
    assert sorted(delivered) == sorted([first.run_id, second.run_id])
    assert (await first.result(timeout=20)).code == "all"
    assert (await second.result(timeout=20)).user_id == "b"
    assert await client.emit("signup.confirmed", flows.Confirmed(code="late")) == []


async def _waiting_for_event(client: Client, run_id: uuid.UUID) -> bool:
    details = await client.get_run(run_id)
    return any(t.kind == "EVENT" and t.state is TaskState.WAITING for t in details.tasks)


async def test_cancel_interrupts_running_work(runtime: Runtime, client: Client) -> None:
    flows.CALLS.clear()
    handle = await client.start(flows.endless, "c1")
    await eventually(lambda: "forever c1 started" in flows.CALLS, "the endless task to start")
    await client.cancel(handle.run_id)
    with pytest.raises(RunFailed, match="cancelled"):
        await handle.result(timeout=20)
    details = await client.get_run(handle.run_id)
    assert details.run.status is RunStatus.CANCELLED
    assert [t.state for t in details.tasks] == [TaskState.CANCELLED]
    # Well before the next lease extension (every 10 s): the decider announced it.
    await eventually(
        lambda: "forever c1 cancelled" in flows.CALLS, "the task to be cancelled", timeout=5
    )


async def test_start_to_close_times_out_the_attempt_and_retries(
    runtime: Runtime, client: Client
) -> None:
    handle = await client.start(flows.timeboxed, "t1")
    assert await handle.result(timeout=20) == "t1 finished on attempt 2"
    details = await client.get_run(handle.run_id)
    attempts = sorted((t.attempt, t.state) for t in details.tasks)
    assert attempts == [(1, TaskState.TIMED_OUT), (2, TaskState.COMPLETED)]
    (first,) = [t for t in details.tasks if t.attempt == 1]
    assert first.error is not None
    assert first.error.type == "Timeout"


async def test_emitting_twice_before_the_decider_runs_delivers_once(
    engine: AsyncEngine, client: Client
) -> None:
    runtime = Runtime(engine, flows.app, poll_interval=0.1)
    await runtime.start()
    handle = await client.start(flows.signup, flows.Signup(email="c@x"))
    await eventually(
        functools.partial(_waiting_for_event, client, handle.run_id),
        "the run to wait for its event",
    )
    await runtime.stop()  # no decider: the signal stays buffered
    assert await client.emit("signup.confirmed", flows.Confirmed(code="one")) == [handle.run_id]
    assert await client.emit("signup.confirmed", flows.Confirmed(code="two")) == []
    runtime = Runtime(engine, flows.app, poll_interval=0.1)
    await runtime.start()
    try:
        assert (await handle.result(timeout=20)).code == "one"
    finally:
        await runtime.stop()
