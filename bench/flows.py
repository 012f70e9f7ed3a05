"""The workflows the benchmark runs: no-op tasks, so the figures are the engine's cost."""

from __future__ import annotations

import time
from datetime import timedelta

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


@task()
async def noop(ctx: TaskContext, value: int) -> int:
    return value


@task(transactional=True, start_to_close=timedelta(seconds=30))
async def noop_tx(ctx: TaskContext, value: int) -> int:
    """A transactional no-op: what the engine's transactional path costs by itself."""
    return value


@task()
async def ten(ctx: TaskContext, value: int) -> list[int]:
    return list(range(value, value + 10))


@task()
async def total(ctx: TaskContext, values: list[int]) -> int:
    return sum(values)


@task()
async def stamp(ctx: TaskContext, value: int) -> float:
    """The wall-clock time the task started (the wake scenario compares it across processes)."""
    return time.time()


class Go(BaseModel):
    n: int


@task()
async def stamp_go(ctx: TaskContext, first: float, go: Go) -> float:
    return time.time()


@task()
async def stamp_next(ctx: TaskContext, went: float) -> float:
    """Its start, after ``stamp_go`` (whose body returns as it starts): one step's
    latency from a finished task to the next one of its run."""
    return time.time()


@workflow("bench_one")
def one(flow: Flow[int]) -> Node[int]:
    """e2e-1: one no-op task."""
    return flow.run(noop, flow.input)


@workflow("bench_one_tx")
def one_tx(flow: Flow[int]) -> Node[int]:
    """e2e-1, transactional: one transactional no-op task."""
    return flow.run(noop_tx, flow.input)


@workflow("bench_chain3")
def chain3(flow: Flow[int]) -> Node[int]:
    """e2e-3: three no-op tasks in a chain."""
    return flow.run(noop, flow.run(noop, flow.run(noop, flow.input)))


@workflow("bench_fanout10")
def fanout10(flow: Flow[int]) -> Node[int]:
    """e2e-3: a task producing 10 items, a map over them, a join task (12 tasks)."""
    return flow.run(total, flow.map(noop, flow.run(ten, flow.input)))


@workflow("bench_wake")
def wake(flow: Flow[int]) -> Node[float]:
    """wake: stamp the first task's start; wait for ``go``; stamp the next task's start,
    then the start of the task after it."""
    first = flow.run(stamp, flow.input)
    go = flow.wait_for_event("go", Go, after=[first])
    return flow.run(stamp_next, flow.run(stamp_go, first, go))


app = App(workflows=[one, one_tx, chain3, fanout10, wake])
