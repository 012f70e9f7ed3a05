"""Unit tests of the pure decider, one node kind at a time."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TypeVar, get_args

import pytest
from pydantic import BaseModel, JsonValue

from legato.context import TaskContext
from legato.engine.decider import UnknownNodeError, decide
from legato.engine.decider.decide import HANDLERS
from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
    CancelChildRun,
    ConsumeSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    ResolveTask,
    StartChildRun,
    TaskRecord,
)
from legato.flow import Flow, Node, Retry, task, workflow
from legato.flow.spec import NodeSpec
from legato.schema.enums import NodeKind, RunStatus, TaskState, TimerKind

from ._flows import branchy, fanout, parent, signup
from ._sim import T0, Sim

SIGNUP_INPUT: JsonValue = {"email": "ada@example.com"}
A = TypeVar("A")


def _of(actions: Sequence[Action], cls: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, cls)]


# -- task, event wait, join -----------------------------------------------------------


def test_signup_first_decision_schedules_task_and_wait() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    actions = sim.step()
    creates = _of(actions, CreateTask)
    assert [(c.node_id, c.state) for c in creates] == [
        ("create_user", TaskState.QUEUED),
        ("signup.confirmed", TaskState.WAITING),
    ]
    assert creates[0].input == [SIGNUP_INPUT]
    assert creates[1].event_name == "signup.confirmed"
    (enq,) = _of(actions, EnqueueTask)
    assert (enq.task_name, enq.queue, enq.available_at) == ("create_user", "default", T0)
    (timer,) = _of(actions, ArmTimer)
    assert timer.kind is TimerKind.EVENT_TIMEOUT
    assert timer.fire_at == T0 + timedelta(minutes=30)


def test_signup_join_fires_once_after_both_inputs() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.complete("create_user", {"user_id": "ada"})
    actions = sim.step()
    assert not _of(actions, CreateTask), "activate must wait for the event"
    assert [e.type for e in _of(actions, AppendEvent)] == ["task_completed"]
    sim.signal("signup.confirmed", {"code": "42"})
    actions = sim.step()
    (consume,) = _of(actions, ConsumeSignal)
    (resolve,) = _of(actions, ResolveTask)
    assert resolve.state is TaskState.COMPLETED
    assert resolve.output == {"code": "42"}
    assert consume.task_id == resolve.task_id
    (create,) = _of(actions, CreateTask)
    assert create.node_id == "activate"
    assert create.input == [{"user_id": "ada"}, {"code": "42"}]
    (enq,) = _of(actions, EnqueueTask)
    assert (enq.queue, enq.priority) == ("mail", 5)
    sim.complete("activate", {"user_id": "ada", "code": "42"})
    actions = sim.step()
    (finish,) = _of(actions, FinishRun)
    assert finish.status is RunStatus.SUCCEEDED
    assert finish.output == {"user_id": "ada", "code": "42"}
    assert signup.parse_output(finish.output).code == "42"


def test_signal_sent_before_the_wait_began_is_consumed_oldest_first() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    first = sim.signal("signup.confirmed", {"code": "first"})
    sim.signal("signup.confirmed", {"code": "second"})
    actions = sim.step()
    (consume,) = _of(actions, ConsumeSignal)
    assert consume.signal_id == first
    wait = sim.row("signup.confirmed")
    assert wait.state is TaskState.COMPLETED
    assert wait.output == {"code": "first"}
    assert not _of(actions, ArmTimer), "a wait satisfied at once needs no timeout"
    assert len(sim.snap.signals) == 1


def test_signal_for_another_event_stays_buffered() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.signal("something.else", {"x": 1})
    assert not _of(sim.step(), ConsumeSignal)
    assert len(sim.snap.signals) == 1


def test_event_timeout_without_default_fails_the_run() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.advance(1800)
    sim.time_out("signup.confirmed")
    actions = sim.step()
    (cancel,) = _of(actions, ResolveTask)
    assert cancel.state is TaskState.CANCELLED  # create_user was still queued
    (finish,) = _of(actions, FinishRun)
    assert finish.status is RunStatus.FAILED
    assert finish.error is not None
    assert finish.error.type == "TimedOut"


class Vote(BaseModel):
    yes: bool


@task()
async def tally(ctx: TaskContext, vote: Vote) -> bool:
    return vote.yes


@workflow("vote")
def vote_flow(flow: Flow[None]) -> Node[bool]:
    vote = flow.wait_for_event("vote", Vote, timeout=timedelta(hours=1), default=Vote(yes=False))
    return flow.run(tally, vote)


def test_event_timeout_with_default_yields_the_default() -> None:
    sim = Sim(vote_flow.spec)
    sim.step()
    sim.time_out("vote")
    actions = sim.step()
    (create,) = _of(actions, CreateTask)
    assert create.input == [{"yes": False}]


# -- retries and timeouts -------------------------------------------------------------


def test_failed_attempt_is_retried_with_backoff_until_the_budget_is_spent() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    for attempt in range(1, 5):
        sim.fail("create_user")
        actions = sim.step()
        (create,) = _of(actions, CreateTask)
        assert create.attempt == attempt + 1
        assert create.input == [SIGNUP_INPUT]
        base = 1.0 * 2 ** (attempt - 1)
        assert create.available_at is not None
        delay = (create.available_at - sim.now).total_seconds()
        assert base * 0.8 <= delay <= base
        assert any(e.type == "retry_scheduled" for e in _of(actions, AppendEvent))
    sim.fail("create_user")  # attempt 5 of 5
    actions = sim.step()
    assert not _of(actions, CreateTask)
    (finish,) = _of(actions, FinishRun)
    assert finish.status is RunStatus.FAILED
    assert finish.error is not None
    assert finish.error.type == "Boom"
    assert len(sim.rows("create_user")) == 5


def test_non_retryable_failure_is_not_retried() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.fail("create_user", retryable=False)
    actions = sim.step()
    assert not _of(actions, CreateTask)
    assert _of(actions, FinishRun)[0].status is RunStatus.FAILED


@task(
    retry=Retry(attempts=2),
    schedule_to_start=timedelta(seconds=10),
    start_to_close=timedelta(seconds=60),
    heartbeat=timedelta(seconds=5),
)
async def slow(ctx: TaskContext) -> int:
    return 1


@workflow("slow")
def slow_flow(flow: Flow[None]) -> Node[int]:
    return flow.run(slow)


def test_task_timeouts_arm_timers_and_a_timed_out_attempt_is_retried() -> None:
    sim = Sim(slow_flow.spec)
    actions = sim.step()
    timers = {t.kind: t for t in _of(actions, ArmTimer)}
    assert timers[TimerKind.SCHEDULE_TO_START].fire_at == T0 + timedelta(seconds=10)
    assert timers[TimerKind.START_TO_CLOSE].fire_at == T0 + timedelta(seconds=70)
    assert slow_flow.spec.tasks["slow"].timeouts.heartbeat == 5
    sim.time_out("slow")
    actions = sim.step()
    (create,) = _of(actions, CreateTask)
    assert create.attempt == 2
    sim.time_out("slow")
    assert _of(sim.step(), FinishRun)[0].status is RunStatus.FAILED


# -- switch, skip, first_of -------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "taken", "skipped"),
    [("pro", "welcome_pro", "upsell"), ("free", "upsell", "welcome_pro")],
)
def test_switch_runs_one_branch_and_skips_the_other(plan: str, taken: str, skipped: str) -> None:
    sim = Sim(branchy.spec, {"user_id": "ada"})
    sim.step()
    sim.complete("load_account", {"user_id": "ada", "plan": plan})
    actions = sim.step()
    switch = sim.row("switch-load_account")
    assert switch.kind is NodeKind.SWITCH
    assert switch.state is TaskState.COMPLETED
    assert sim.row(skipped).state is TaskState.SKIPPED
    assert sim.row(taken).state is TaskState.QUEUED
    assert {c.node_id for c in _of(actions, CreateTask)} == {"switch-load_account", taken, skipped}
    sim.complete(taken, f"{taken}!")
    actions = sim.step()
    assert sim.row("first_of").kind is NodeKind.JOIN
    assert _of(actions, FinishRun)[0].output == f"{taken}!"
    assert len(sim.rows(skipped)) == 1


def test_switch_without_matching_case_skips_every_branch_and_first_of() -> None:
    sim = Sim(branchy.spec, {"user_id": "ada"})
    sim.step()
    sim.complete("load_account", {"user_id": "ada", "plan": "enterprise"})
    actions = sim.step()
    assert sim.row("switch-load_account").output is None
    assert sim.row("first_of").state is TaskState.SKIPPED
    (finish,) = _of(actions, FinishRun)
    assert finish.status is RunStatus.FAILED  # the output node was skipped
    assert finish.error is not None
    assert finish.error.type == "OutputSkipped"


# -- map -----------------------------------------------------------------------------------


def test_map_respects_max_concurrency_and_collects_in_order() -> None:
    sim = Sim(fanout.spec, {"user_id": "ada"})
    sim.step()
    sim.complete("emails", ["a", "bb", "ccc"])
    actions = sim.step()
    mapped = [c for c in _of(actions, CreateTask) if c.node_id == "map-send"]
    assert [(c.iteration, c.kind, c.input) for c in mapped] == [(0, NodeKind.MAP, ["a"])]
    assert sim.row("sleep").state is TaskState.WAITING
    sim.fail("map-send", 0)
    retry = _of(sim.step(), CreateTask)
    assert [(c.iteration, c.attempt) for c in retry] == [(0, 2)]
    sim.complete("map-send", 1, iteration=0)
    assert [c.iteration for c in _of(sim.step(), CreateTask)] == [1]
    sim.complete("map-send", 2, iteration=1)
    sim.complete("sleep")
    assert [c.iteration for c in _of(sim.step(), CreateTask)] == [2]
    sim.complete("map-send", 3, iteration=2)
    (finish,) = _of(sim.step(), FinishRun)
    assert finish.output == [1, 2, 3]


def test_empty_map_completes_with_an_empty_list() -> None:
    sim = Sim(fanout.spec, {"user_id": "ada"})
    sim.step()
    sim.complete("emails", [])
    sim.step()
    sim.complete("sleep")
    (finish,) = _of(sim.step(), FinishRun)
    assert finish.output == []


def test_sleep_arms_a_timer_for_its_duration() -> None:
    sim = Sim(fanout.spec, {"user_id": "ada"})
    sim.step()
    sim.advance(5)
    sim.complete("emails", [])
    actions = sim.step()
    (timer,) = _of(actions, ArmTimer)
    assert timer.kind is TimerKind.SLEEP
    assert timer.fire_at == sim.now + timedelta(seconds=10)


# -- child, failure handler, cancellation -------------------------------------------------


def test_child_workflow_starts_a_child_run_and_completes_with_its_output() -> None:
    sim = Sim(parent.spec, SIGNUP_INPUT)
    actions = sim.step()
    (start,) = _of(actions, StartChildRun)
    row = sim.row("child-signup")
    assert start.task_id == row.task_id
    assert start.workflow_name == "signup"
    assert start.input == SIGNUP_INPUT
    assert row.state is TaskState.WAITING
    assert row.task_id.version == 7
    sim.complete("child-signup", {"user_id": "ada", "code": "1"})
    assert _of(sim.step(), FinishRun)[0].status is RunStatus.SUCCEEDED


def test_failure_handler_receives_the_error_then_the_run_fails() -> None:
    sim = Sim(parent.spec, SIGNUP_INPUT)
    sim.step()
    sim.fail("child-signup", type="ChildFailed")
    actions = sim.step()
    (create,) = _of(actions, CreateTask)
    assert create.kind is NodeKind.HANDLER
    assert create.task_name == "compensate"
    assert isinstance(create.input, list)
    info = create.input[0]
    assert isinstance(info, dict)
    assert (info["node_id"], info["error_type"]) == ("child-signup", "ChildFailed")
    assert not _of(actions, FinishRun)
    sim.complete("$on_failure")
    (finish,) = _of(sim.step(), FinishRun)
    assert finish.status is RunStatus.FAILED
    assert finish.error is not None
    assert finish.error.type == "ChildFailed"


def test_cancellation_cancels_live_work_and_children_then_finishes_once() -> None:
    sim = Sim(parent.spec, SIGNUP_INPUT)
    sim.step()
    sim.cancel()
    actions = sim.step()
    (resolve,) = _of(actions, ResolveTask)
    assert resolve.state is TaskState.CANCELLED
    assert _of(actions, CancelChildRun)[0].run_id == resolve.task_id
    assert _of(actions, FinishRun)[0].status is RunStatus.CANCELLED
    assert sim.step() == []


def test_finished_run_gets_no_new_work() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.cancel()
    sim.step()
    sim.signal("signup.confirmed", {"code": "x"})
    assert sim.step() == []


# -- contract checks -------------------------------------------------------------------------


def test_unknown_node_in_snapshot_is_an_error() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    bogus = TaskRecord(
        task_id=uuid.uuid4(),
        node_id="nope",
        kind=NodeKind.TASK,
        state=TaskState.QUEUED,
        created_at=T0,
    )
    snap = replace(sim.snap, tasks=(bogus,))
    with pytest.raises(UnknownNodeError, match="'nope'"):
        decide(signup.spec, snap, T0)


def test_terminal_rows_are_recorded_once() -> None:
    sim = Sim(signup.spec, SIGNUP_INPUT)
    sim.step()
    sim.complete("create_user", {"user_id": "a"})
    first = sim.step()
    assert [e.type for e in _of(first, AppendEvent)] == ["task_completed"]
    assert sim.row("create_user").observed


def test_every_node_kind_has_a_handler() -> None:
    # Adding a node spec without its decider handler must fail here, not in a run.
    (union, *_) = get_args(NodeSpec)
    spec_kinds = {cls.model_fields["kind"].default for cls in get_args(union)}
    assert spec_kinds == set(HANDLERS)
    assert all(isinstance(h.row_kind, NodeKind) for h in HANDLERS.values())
