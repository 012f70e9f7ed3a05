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
    shards = Shards(DEFAULT_SHARD_COUNT)
    given = Runtime(engine, app, roles=EVERY_ROLE, restarts=patient)
    given._build_loops(shards)  # what start() does once it has read the keys
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
    assert given.shard_leases
    assert all(lease.restarts is patient for lease in given.shard_leases)
    default = Runtime(engine, app, roles=EVERY_ROLE)
    default._build_loops(shards)
    assert default.loops
    assert all(loop.restarts == RestartPolicy() for loop in default.loops)
