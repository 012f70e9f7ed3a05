"""Workflows the observability tests run (also served by ``legato dev`` in a subprocess)."""

from __future__ import annotations

from datetime import timedelta

from legato import App, Flow, Node, Retry, TaskContext, task, workflow


class Refused(Exception):
    pass


@task()
async def echo(ctx: TaskContext, value: int) -> int:
    ctx.logger.info("echoing %d", value)
    return value


@task(retry=Retry(attempts=2, backoff=timedelta(milliseconds=10), jitter=0))
async def refuse(ctx: TaskContext, value: int) -> int:
    raise Refused(f"refusing {value}")


@workflow("echo")
def echo_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(echo, flow.input)


@workflow("refuse")
def refuse_flow(flow: Flow[int]) -> Node[int]:
    return flow.run(refuse, flow.input)


app = App(workflows=[echo_flow, refuse_flow])
