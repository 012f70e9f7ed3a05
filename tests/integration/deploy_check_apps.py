"""The apps of ``test_deploy_check.py``: a ``shipment`` workflow as it runs today
(``current``) and four new versions of its code, each an ``--app`` for the CLI.

``shipment``: ``reserve`` the order, wait for ``shipment.approved``, ``ship`` the
reservation with the approval (queue ``shipping``), then ``notify`` with the order.
"""

from __future__ import annotations

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


class Order(BaseModel):
    order_id: str
    amount: int


class Reservation(BaseModel):
    order_id: str
    slot: int


class Approval(BaseModel):
    by: str


class Shipped(BaseModel):
    order_id: str
    carrier: str


class Notice(BaseModel):
    sent: bool


@task()
async def reserve(ctx: TaskContext, order: Order) -> Reservation:
    return Reservation(order_id=order.order_id, slot=1)


@task(queue="shipping")
async def ship(ctx: TaskContext, reservation: Reservation, approval: Approval) -> Shipped:
    return Shipped(order_id=reservation.order_id, carrier="post")


@task()
async def notify(ctx: TaskContext, order: Order) -> Notice:
    return Notice(sent=True)


@workflow("shipment")
def shipment(flow: Flow[Order]) -> Node[Shipped]:
    reservation = flow.run(reserve, flow.input)
    approval = flow.wait_for_event("shipment.approved", Approval)
    shipped = flow.run(ship, reservation, approval)
    flow.run(notify, flow.input, after=[shipped])
    return shipped


current = App([shipment])


# -- (a) a task removed: shipping is done by `dispatch` now -------------------------------


@task(name="dispatch", queue="shipping")
async def dispatch(ctx: TaskContext, reservation: Reservation, approval: Approval) -> Shipped:
    return Shipped(order_id=reservation.order_id, carrier="van")


@workflow("shipment")
def shipment_without_ship(flow: Flow[Order]) -> Node[Shipped]:
    reservation = flow.run(reserve, flow.input)
    approval = flow.wait_for_event("shipment.approved", Approval)
    shipped = flow.run(dispatch, reservation, approval)
    flow.run(notify, flow.input, after=[shipped])
    return shipped


removed = App([shipment_without_ship])


# -- (b) notify's input gained a required field ---------------------------------------------


class PriorityOrder(BaseModel):
    order_id: str
    amount: int
    priority: int


@task(name="reserve")
async def reserve_by_priority(ctx: TaskContext, order: PriorityOrder) -> Reservation:
    return Reservation(order_id=order.order_id, slot=order.priority)


@task(name="notify")
async def notify_by_priority(ctx: TaskContext, order: PriorityOrder) -> Notice:
    return Notice(sent=order.priority > 0)


@workflow("shipment")
def shipment_by_priority(flow: Flow[PriorityOrder]) -> Node[Shipped]:
    reservation = flow.run(reserve_by_priority, flow.input)
    approval = flow.wait_for_event("shipment.approved", Approval)
    shipped = flow.run(ship, reservation, approval)
    flow.run(notify_by_priority, flow.input, after=[shipped])
    return shipped


required_field = App([shipment_by_priority])


# -- (c) ship moved to another queue ---------------------------------------------------------


@task(name="ship", queue="shipping-eu")
async def ship_eu(ctx: TaskContext, reservation: Reservation, approval: Approval) -> Shipped:
    return Shipped(order_id=reservation.order_id, carrier="eu-post")


@workflow("shipment")
def shipment_eu(flow: Flow[Order]) -> Node[Shipped]:
    reservation = flow.run(reserve, flow.input)
    approval = flow.wait_for_event("shipment.approved", Approval)
    shipped = flow.run(ship_eu, reservation, approval)
    flow.run(notify, flow.input, after=[shipped])
    return shipped


moved = App([shipment_eu])


# -- (d) compatible: new optional fields, a new default ---------------------------------------


class TrackedOrder(BaseModel):
    order_id: str
    amount: int
    note: str | None = None


class SignedApproval(BaseModel):
    by: str
    signature: str = ""


class TrackedShipment(BaseModel):
    order_id: str
    carrier: str
    tracking: str | None = None


@task(name="ship", queue="shipping")
async def ship_tracked(
    ctx: TaskContext, reservation: Reservation, approval: SignedApproval
) -> TrackedShipment:
    return TrackedShipment(order_id=reservation.order_id, carrier="post", tracking="T1")


@task(name="reserve")
async def reserve_tracked(ctx: TaskContext, order: TrackedOrder) -> Reservation:
    return Reservation(order_id=order.order_id, slot=1)


@task(name="notify")
async def notify_tracked(ctx: TaskContext, order: TrackedOrder) -> Notice:
    return Notice(sent=True)


@workflow("shipment")
def shipment_tracked(flow: Flow[TrackedOrder]) -> Node[TrackedShipment]:
    reservation = flow.run(reserve_tracked, flow.input)
    approval = flow.wait_for_event("shipment.approved", SignedApproval)
    shipped = flow.run(ship_tracked, reservation, approval)
    flow.run(notify_tracked, flow.input, after=[shipped])
    return shipped


compatible = App([shipment_tracked])
