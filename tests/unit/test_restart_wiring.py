"""A Runtime's restart policy reaches every loop through the loop's constructor."""

from __future__ import annotations

from legato import App, Flow, Node, Runtime, TaskContext, create_engine, task, workflow
from legato.engine.loops.supervision import RestartPolicy
from legato.engine.loops.timers import TimerLoop
from legato.runtime import Roles
from legato.schema import DEFAULT_SHARD_COUNT, Shards

engine = create_engine("postgresql://app@localhost/app")  # never connected to
EVERY_ROLE = Roles(decider=True, worker=True, timer=True, relay=True)


@task()
async def echo(ctx: TaskContext, n: int) -> int:
    return n


@workflow("restarts.echo")
def echoed(flow: Flow[int]) -> Node[int]:
    return flow.run(echo, flow.input)


app = App([echoed])


def test_a_loop_is_built_with_its_restart_policy() -> None:
    patient = RestartPolicy(max_restarts=50)
    shards = Shards(DEFAULT_SHARD_COUNT)
    assert TimerLoop(engine, shards=shards, restarts=patient).restarts is patient
    assert TimerLoop(engine, shards=shards).restarts == RestartPolicy()


def test_the_runtime_gives_every_loop_its_restart_policy() -> None:
    patient = RestartPolicy(max_restarts=50)
    given = Runtime(engine, app, roles=EVERY_ROLE, restarts=patient)
    assert {type(loop).__name__ for loop in given.loops} >= {
        "DeciderLoop",
        "MaintenanceLoop",
        "ScheduleLoop",
        "Worker",
        "TimerLoop",
        "LeaseSweeper",
        "RelayLoop",
    }
    assert all(loop.restarts is patient for loop in given.loops)
    default = Runtime(engine, app, roles=EVERY_ROLE)
    assert all(loop.restarts == RestartPolicy() for loop in default.loops)
