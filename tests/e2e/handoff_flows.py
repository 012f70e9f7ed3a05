"""A three-step chain whose every attempt leaves one line in a tally file, for the
hand-off kill test: a line per attempt whose body ran, so the test can account for
every attempt (``tests/e2e/test_handoff_kills.py``)."""

from __future__ import annotations

import asyncio
import os
import random
from datetime import timedelta
from pathlib import Path

from legato import App, Flow, Node, Retry, TaskContext, task, workflow

TALLY_DIR_ENV = "LEGATO_TEST_TALLY_DIR"


def tally_line(ctx: TaskContext) -> str:
    return f"{ctx.run_id} {ctx.node_id} {ctx.attempt}\n"


@task(retry=Retry(attempts=5, backoff=timedelta(milliseconds=50)))
async def step(ctx: TaskContext, value: int) -> int:
    # One O_APPEND write per attempt, in a file of this process: a whole line or nothing.
    path = Path(os.environ[TALLY_DIR_ENV], f"{os.getpid()}.tally")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, tally_line(ctx).encode())
    finally:
        os.close(fd)
    await asyncio.sleep(random.uniform(0.01, 0.04))
    return value + 1


@workflow("three_steps")
def three_steps(flow: Flow[int]) -> Node[int]:
    return flow.run(step, flow.run(step, flow.run(step, flow.input)))


app = App(workflows=[three_steps])
