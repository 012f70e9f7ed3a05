"""The run timeout as pure decider logic: the deadline timer, then cancel-and-TIMED_OUT."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from legato import RunStatus, SpecError
from legato.context import TaskContext
from legato.engine.decider.model import (
    AppendEvent,
    ArmTimer,
    FinishRun,
    ResolveTask,
    timer_id_for,
)
from legato.flow import Flow, Node, task, workflow
from legato.schema.enums import TaskState, TimerKind
from legato.testing import Simulator

from ._sim import T0, Sim


class Order(BaseModel):
    id: str


class Paid(BaseModel):
    amount: int


@task()
async def charge(ctx: TaskContext, order: Order) -> Paid:
    return Paid(amount=1)


@workflow("timeout.order", execution_timeout=timedelta(minutes=5))
def timed(flow: Flow[Order]) -> Node[Paid]:
    paid = flow.run(charge, flow.input)
    flow.wait_for_event("never", Paid, after=[paid])
    return paid


@workflow("timeout.untimed")
def untimed(flow: Flow[Order]) -> Node[Paid]:
    return flow.run(charge, flow.input)


def test_first_decision_arms_the_run_deadline_and_later_ones_do_not() -> None:
    sim = Sim(timed.spec, {"id": "o1"})
    first = sim.step()
    (deadline,) = [a for a in first if isinstance(a, ArmTimer)]
    assert deadline.kind is TimerKind.RUN_TIMEOUT
    assert deadline.fire_at == T0 + timedelta(minutes=5)
    assert deadline.task_id == sim.snap.run_id
    assert deadline.timer_id == timer_id_for(sim.snap.run_id, TimerKind.RUN_TIMEOUT)
    sim.complete("charge", {"amount": 1})
    assert not [a for a in sim.step() if isinstance(a, ArmTimer)]


def test_no_deadline_without_execution_timeout() -> None:
    sim = Sim(untimed.spec, {"id": "o1"})
    assert not [a for a in sim.step() if isinstance(a, ArmTimer)]


def test_timed_out_run_cancels_live_work_and_finishes_timed_out() -> None:
    sim = Sim(timed.spec, {"id": "o1"})
    sim.step()
    sim.complete("charge", {"amount": 1})
    sim.step()  # now waiting for "never"
    sim.run_timed_out()
    actions = sim.step()
    (cancel,) = [a for a in actions if isinstance(a, ResolveTask)]
    assert cancel.state is TaskState.CANCELLED
    (finish,) = [a for a in actions if isinstance(a, FinishRun)]
    assert finish.status is RunStatus.TIMED_OUT
    assert finish.error is not None and finish.error.type == "RunTimedOut"
    assert "timeout.order" in finish.error.message and "300s" in finish.error.message
    assert [a.type for a in actions if isinstance(a, AppendEvent)][-1] == "run_timed_out"
    assert sim.step() == []  # nothing more once finished


def test_cancel_request_wins_over_a_timeout() -> None:
    sim = Sim(timed.spec, {"id": "o1"})
    sim.step()
    sim.cancel()
    sim.run_timed_out()
    (finish,) = [a for a in sim.step() if isinstance(a, FinishRun)]
    assert finish.status is RunStatus.CANCELLED


async def test_simulator_times_the_run_out_at_its_deadline() -> None:
    sim = Simulator(timed, Order(id="o1"))
    await sim.settle()
    assert sim.waiting_for() == ["never"]
    await sim.advance(timedelta(minutes=4))
    assert not sim.status.finished
    await sim.advance(timedelta(minutes=1))
    assert sim.status is RunStatus.TIMED_OUT
    assert sim.task("never").state is TaskState.CANCELLED


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1), 30])
def test_execution_timeout_must_be_a_positive_timedelta(bad: object) -> None:
    with pytest.raises(SpecError, match=r"execution_timeout must be a positive timedelta"):
        workflow("timeout.bad", execution_timeout=bad)  # type: ignore[arg-type]


def test_spec_hash_is_unchanged_without_execution_timeout() -> None:
    dumped = untimed.spec.model_dump(mode="json")
    assert dumped["execution_timeout"] is None
    assert "execution_timeout" not in untimed.spec.canonical_json()
    assert "execution_timeout" in timed.spec.canonical_json()
