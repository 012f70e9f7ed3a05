"""Every member of the decider's ``Action`` union is interpreted by both of its readers:
the decider loop's ``Batch`` (the rows a decision writes) and the simulator's core.
``assert_never`` makes mypy fail when one is left out; these prove each lands where it
should, and fail when the union grows without a sample here."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import get_args

from legato.engine.decider.model import (
    Action,
    AppendEvent,
    ArmTimer,
    BufferedSignal,
    CancelChildRun,
    ConsumeSignal,
    CreateTask,
    EnqueueTask,
    FinishRun,
    MarkObserved,
    ResolveTask,
    StartChildRun,
    TaskRecord,
)
from legato.engine.loops.decision_batch import Batch
from legato.engine.repositories import runs
from legato.schema import DEFAULT_SHARD_COUNT, NodeKind, RunStatus, Shards, TaskState, TimerKind

from ._flows import signup
from ._sim import T0, Sim

RUN_ID = uuid.UUID("01940000-0000-7000-8000-000000000001")
SHARDS = Shards(DEFAULT_SHARD_COUNT)
RUNNING_TASK = uuid.UUID(int=1)  # a task the snapshot holds, RUNNING
CREATED_TASK = uuid.UUID(int=2)
SIGNAL = uuid.UUID(int=3)
CHILD = uuid.UUID(int=4)

# One of each action, in an order a decision could emit them; CreateTask makes a row born
# terminal (a switch's record), so FinishRun finds nothing live once ResolveTask ran.
SAMPLES: dict[type[Action], Action] = {
    CreateTask: CreateTask(
        task_id=CREATED_TASK, node_id="switch", kind=NodeKind.SWITCH, state=TaskState.SKIPPED
    ),
    EnqueueTask: EnqueueTask(
        task_id=RUNNING_TASK, task_name="send", queue="default", attempt=1, available_at=T0
    ),
    ArmTimer: ArmTimer(
        timer_id=uuid.UUID(int=5),
        task_id=RUNNING_TASK,
        attempt=1,
        kind=TimerKind.START_TO_CLOSE,
        fire_at=T0,
    ),
    ConsumeSignal: ConsumeSignal(signal_id=SIGNAL, task_id=RUNNING_TASK),
    ResolveTask: ResolveTask(task_id=RUNNING_TASK, attempt=1, state=TaskState.COMPLETED),
    MarkObserved: MarkObserved(task_ids=(RUNNING_TASK,)),
    StartChildRun: StartChildRun(task_id=CHILD, workflow_name="child"),
    CancelChildRun: CancelChildRun(run_id=CHILD),
    AppendEvent: AppendEvent(type="task_completed", node_id="send"),
    FinishRun: FinishRun(status=RunStatus.SUCCEEDED),
}


def test_there_is_a_sample_of_every_action() -> None:
    assert set(SAMPLES) == set(get_args(Action))


# Where each action lands in the simulator's state.
SIMULATED: dict[type[Action], Callable[[Sim], bool]] = {
    CreateTask: lambda sim: sim.created == [SAMPLES[CreateTask]],
    EnqueueTask: lambda sim: sim.enqueued == {RUNNING_TASK: SAMPLES[EnqueueTask]},
    ArmTimer: lambda sim: list(sim.timers.values()) == [SAMPLES[ArmTimer]],
    ConsumeSignal: lambda sim: sim.snap.signals == (),
    ResolveTask: lambda sim: _task(sim, RUNNING_TASK).state is TaskState.COMPLETED,
    MarkObserved: lambda sim: _task(sim, RUNNING_TASK).observed,
    StartChildRun: lambda sim: sim.children == [SAMPLES[StartChildRun]],
    CancelChildRun: lambda sim: sim.cancelled_children == [CHILD],
    AppendEvent: lambda sim: SAMPLES[AppendEvent] in sim.log,
    FinishRun: lambda sim: sim.snap.status is RunStatus.SUCCEEDED,
}


def _task(sim: Sim, task_id: uuid.UUID) -> TaskRecord:
    return next(t for t in sim.snap.tasks if t.task_id == task_id)


def _sim() -> Sim:
    sim = Sim(signup.spec, run_id=RUN_ID)
    running = TaskRecord(
        task_id=RUNNING_TASK,
        node_id="send",
        kind=NodeKind.TASK,
        state=TaskState.RUNNING,
        created_at=T0,
    )
    signal = BufferedSignal(signal_id=SIGNAL, name="confirmed", created_at=T0)
    sim.snap = replace(sim.snap, tasks=(running,), signals=(signal,))
    return sim


def test_the_simulator_applies_every_action() -> None:
    assert set(SIMULATED) == set(get_args(Action))
    sim = _sim()
    sim.apply(list(SAMPLES.values()))
    assert [kind.__name__ for kind, landed in SIMULATED.items() if not landed(sim)] == []
    assert sim.log == list(SAMPLES.values())


# Which of the batch's gathered lists each action adds a row to.
GATHERED_IN: dict[type[Action], str] = {
    CreateTask: "creates",
    EnqueueTask: "enqueues",
    ArmTimer: "timers",
    ConsumeSignal: "consumed",
    ResolveTask: "resolves",
    MarkObserved: "observed",
    StartChildRun: "children",
    CancelChildRun: "cancel_children",
    AppendEvent: "events",
    FinishRun: "finishes",
}


def test_the_decider_loops_batch_gathers_every_action_as_its_row() -> None:
    assert set(GATHERED_IN) == set(get_args(Action))
    run = runs.RunRow(
        id=RUN_ID,
        workflow_name="signup",
        workflow_version=1,
        status=RunStatus.RUNNING,
        input=None,
        output=None,
        error=None,
        parent_run_id=None,
        cancel_requested=False,
        created_at=T0,
        finished_at=None,
    )
    for kind, sample in SAMPLES.items():
        batch = Batch(now=T0, shards=SHARDS, shard=SHARDS.of_run(RUN_ID))
        batch.add(run, 0, [sample])
        grown = {
            name
            for name in set(GATHERED_IN.values())
            if len(getattr(batch, name))
            != len(getattr(Batch(now=T0, shards=SHARDS, shard=SHARDS.of_run(RUN_ID)), name))
        }
        assert grown == {GATHERED_IN[kind]}, kind.__name__
