"""Workflows the fair-share tests run: one job per tenant on the fair queue ``tenants``
(keyed by tenant, weighted by the job's weight), and one on ``limited``, fair and under a
concurrency limit of 2, whose body records how many of its attempts run at once."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from legato import App, Concurrency, FairShare, Flow, Node, TaskContext, task, workflow

# The tenants of ``limited_job`` attempts in the order they started, and the most that
# ran at once: what a user of the limit and the fair share sees.
STARTED: list[str] = []
RUNNING = {"now": 0, "most": 0}


class Job(BaseModel):
    tenant: str
    n: int = 0
    weight: int = 1
    seconds: float = 0.0  # how long the body works


@task(
    queue="tenants",
    fair_share=FairShare(key=lambda job: job.tenant, weight=lambda job: job.weight),
)
async def tenant_job(ctx: TaskContext, job: Job) -> int:
    if job.seconds:
        await asyncio.sleep(job.seconds)  # the job's work
    return job.n


@task(queue="limited", fair_share=FairShare(key=lambda job: job.tenant), concurrency=Concurrency(2))
async def limited_job(ctx: TaskContext, job: Job) -> int:
    STARTED.append(job.tenant)
    RUNNING["now"] += 1
    RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    try:
        await asyncio.sleep(job.seconds)  # the job's work, while the limit counts it
    finally:
        RUNNING["now"] -= 1
    return job.n


@workflow("tenant_job")
def tenant_flow(flow: Flow[Job]) -> Node[int]:
    return flow.run(tenant_job, flow.input)


@workflow("limited_job")
def limited_flow(flow: Flow[Job]) -> Node[int]:
    return flow.run(limited_job, flow.input)


app = App(workflows=[tenant_flow, limited_flow])
