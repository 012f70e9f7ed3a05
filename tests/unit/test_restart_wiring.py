"""A Runtime's restart policy reaches every loop through the loop's constructor."""

from __future__ import annotations

import logging

import pytest

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


def test_the_timer_loop_polls_at_the_runtimes_interval_or_its_own_if_shorter() -> None:
    """``--poll-interval`` below the timer loop's 0.5 s fires timers closer to their time;
    above it, timers still fire within 0.5 s (the lease sweeper polls at the given one)."""
    shards = Shards(DEFAULT_SHARD_COUNT)
    polls = {}
    for given in (0.1, 30.0):
        runtime = Runtime(engine, app, roles=EVERY_ROLE, poll_interval=given)
        runtime._build_loops(shards)
        polls[given] = {type(loop).__name__: loop.poll_interval for loop in runtime.loops}
    assert polls[0.1]["TimerLoop"] == 0.1
    assert polls[30.0]["TimerLoop"] == 0.5
    assert polls[30.0]["LeaseSweeper"] == 30.0


def test_a_worker_given_a_queue_no_task_uses_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="legato"):
        Runtime(engine, app, roles=EVERY_ROLE, queues=("mails",))
    assert "no task of this app uses queue 'mails'" in caplog.text
    assert "queues the app's tasks use: default" in caplog.text
