"""legato.testing as a user writes it: the signup workflow in memory, and one task alone."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from pydantic import BaseModel

from examples.signup import Active, Confirmed, Signup, User, activate, create_user, signup
from legato import (
    Flow,
    InvalidInput,
    InvalidOutput,
    Node,
    Retry,
    RunFailed,
    RunStatus,
    TaskCancelled,
    TaskContext,
)
from legato import task as legato_task
from legato import workflow as legato_workflow
from legato.schema import TaskState
from legato.testing import SimulationError, Simulator, run_task, task_context

ADA = Signup(email="ada@example.com")


async def test_signup_activates_once_confirmed() -> None:
    sim = Simulator(signup, ADA)
    await sim.settle()
    assert sim.task("create_user").state is TaskState.COMPLETED
    assert sim.waiting_for() == ["signup.confirmed"]
    with pytest.raises(SimulationError, match="still running"):
        sim.result()

    await sim.signal("signup.confirmed", Confirmed(code="c0de"))

    assert sim.status is RunStatus.SUCCEEDED
    assert sim.result() == Active(user_id="ada", email="ada@example.com", confirmation="c0de")


async def test_signup_fails_when_no_confirmation_comes_within_30_minutes() -> None:
    sim = Simulator(signup, ADA)
    start = sim.now
    await sim.advance(timedelta(minutes=29, seconds=59))
    assert sim.status is RunStatus.RUNNING

    await sim.advance(timedelta(seconds=1))  # the 30-minute event timeout, instantly

    assert sim.now - start == timedelta(minutes=30)
    assert sim.task("signup.confirmed").state is TaskState.TIMED_OUT
    with pytest.raises(RunFailed, match="Timeout: no matching event"):
        sim.result()


async def test_a_failed_attempt_is_retried_after_its_backoff_on_the_fake_clock() -> None:
    sim = Simulator(signup, ADA, run_tasks=False)
    await sim.settle()
    assert sim.running() == ["create_user"]

    await sim.fail("create_user", ConnectionError("smtp down"))
    assert sim.attempts("create_user") == 2
    assert sim.task("create_user").state is TaskState.QUEUED  # waiting out 1 s of backoff
    await sim.advance(1)
    assert sim.task("create_user").state is TaskState.RUNNING

    await sim.complete("create_user", User(user_id="ada", email="ada@example.com"))
    await sim.signal("signup.confirmed", {"code": "c0de"})
    await sim.complete(
        "activate", Active(user_id="ada", email="ada@example.com", confirmation="c0de")
    )
    assert sim.result().confirmation == "c0de"


async def test_bad_signals_and_calls_are_refused_with_what_to_do() -> None:
    sim = Simulator(signup, ADA)
    await sim.settle()
    with pytest.raises(InvalidInput, match=r"signup\.confirmed"):
        await sim.signal("signup.unknown", {})
    with pytest.raises(InvalidInput, match="code"):
        await sim.signal("signup.confirmed", {"kode": 1})
    with pytest.raises(SimulationError, match="not a running task"):
        await sim.complete("create_user", None)
    with pytest.raises(InvalidInput, match="email"):
        Simulator(signup, {"mail": "x"})
    await sim.cancel()
    assert sim.status is RunStatus.CANCELLED
    with pytest.raises(SimulationError, match="already CANCELLED"):
        await sim.signal("signup.confirmed", Confirmed(code="late"))


class Nap(BaseModel):
    seconds: int


@legato_task(start_to_close=timedelta(seconds=10), retry=Retry(attempts=1))
async def slow(ctx: TaskContext, nap: Nap) -> Nap:
    return nap


@legato_workflow("napper")
def napper(flow: Flow[Nap]) -> Node[Nap]:
    nap = flow.sleep(timedelta(hours=6))
    return flow.run(slow, flow.input, after=[nap])


async def test_sleeps_and_task_timeouts_follow_the_fake_clock() -> None:
    sim = Simulator(napper, Nap(seconds=1), run_tasks=False)
    await sim.advance(timedelta(hours=5, minutes=59))
    assert sim.running() == []
    await sim.advance(timedelta(minutes=1))
    assert sim.running() == ["slow"]  # the six-hour sleep is over
    await sim.advance(timedelta(seconds=10))
    assert sim.task("slow").state is TaskState.TIMED_OUT
    assert sim.status is RunStatus.FAILED


async def test_run_task_round_trips_arguments_and_result() -> None:
    user = await run_task(create_user, ADA)
    assert user == User(user_id="ada", email="ada@example.com")
    active = await run_task(activate, User(user_id="ada", email="a@x.io"), Confirmed(code="1"))
    assert active.confirmation == "1"
    with pytest.raises(InvalidInput, match="create_user"):
        await run_task(create_user, cast(Signup, {"mail": "x"}))


@legato_task()
async def not_a_number(ctx: TaskContext, n: int) -> float:
    return float("nan")


@legato_task()
async def wrong_type(ctx: TaskContext, n: int) -> User:
    return "ada"  # type: ignore[return-value]  # what mypy would catch


async def test_run_task_refuses_the_outputs_a_worker_fails_the_attempt_for() -> None:
    with pytest.raises(InvalidOutput, match="not storable JSON: \\$ is nan"):
        await run_task(not_a_number, 1)
    with pytest.raises(InvalidOutput, match="returned str 'ada', which is not its declared"):
        await run_task(wrong_type, 1)


@legato_task()
async def long_job(ctx: TaskContext, n: int) -> int:
    await ctx.heartbeat()
    return n + ctx.attempt


async def test_run_task_with_a_cancelled_or_later_attempt_context() -> None:
    assert await run_task(long_job, 1, ctx=task_context(attempt=3)) == 4
    with pytest.raises(TaskCancelled):
        await run_task(long_job, 1, ctx=task_context(cancelled=True))


async def test_the_in_memory_examples_of_docs_testing_md_pass() -> None:
    doc = Path(__file__).parents[2] / "docs" / "testing.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    in_memory = [b for b in blocks if "legato.testing import" in b]
    assert len(in_memory) == 2
    namespace: dict[str, object] = {"__name__": "testing_doc"}
    exec(compile("\n".join([*in_memory, blocks[1]]), str(doc), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 4
    for test in tests:
        await test()  # type: ignore[operator]
