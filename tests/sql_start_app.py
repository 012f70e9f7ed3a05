"""A one-task workflow with a typed input, started from SQL by the tests of start_run()."""

from __future__ import annotations

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


class Order(BaseModel):
    order_id: int
    email: str


class Receipt(BaseModel):
    order_id: int
    sent_to: str


@task()
async def send_receipt(ctx: TaskContext, order: Order) -> Receipt:
    return Receipt(order_id=order.order_id, sent_to=order.email)


@workflow("receipt")
def receipt(flow: Flow[Order]) -> Node[Receipt]:
    return flow.run(send_receipt, flow.input)


app = App(workflows=[receipt])
