"""An order pipeline: fan-out with ``map``, a ``switch``, a flaky task retried with
backoff, and a ``sleep``.

```
legato dev --app examples.orders:app
legato runs start orders --input '{"order_id": "o-1", "express": false,
    "lines": [{"sku": "tea", "quantity": 2}, {"sku": "cup", "quantity": 1}]}'
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from legato import App, Flow, Node, Retry, TaskContext, task, workflow


class Line(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    order_id: str
    lines: list[Line]
    express: bool = False


class Reserved(BaseModel):
    sku: str
    quantity: int
    unit_price_cents: int


class Invoice(BaseModel):
    order_id: str
    total_cents: int
    shipping: str


class Charge(BaseModel):
    order_id: str
    amount_cents: int
    attempts: int


class Shipment(BaseModel):
    order_id: str
    carrier: str


class Receipt(BaseModel):
    order_id: str
    amount_cents: int
    carrier: str
    charge_attempts: int


PRICES = {"tea": 450, "cup": 1200, "pot": 3500}


class PaymentGatewayBusy(Exception):
    """A transient error: the retry policy tries again."""


@task()
async def order_lines(ctx: TaskContext, order: Order) -> list[Line]:
    return order.lines


@task(retry=Retry(attempts=3, backoff=timedelta(milliseconds=200)))
async def reserve(ctx: TaskContext, line: Line) -> Reserved:
    """One map element per order line: reserve the stock and price it."""
    return Reserved(
        sku=line.sku, quantity=line.quantity, unit_price_cents=PRICES.get(line.sku, 999)
    )


@task()
async def invoice(ctx: TaskContext, order: Order, reserved: list[Reserved]) -> Invoice:
    total = sum(r.quantity * r.unit_price_cents for r in reserved)
    return Invoice(
        order_id=order.order_id,
        total_cents=total,
        shipping="express" if order.express else "standard",
    )


@task(
    retry=Retry(
        attempts=5,
        backoff=timedelta(milliseconds=200),
        multiplier=2.0,
        max_backoff=timedelta(seconds=2),
    )
)
async def charge(ctx: TaskContext, bill: Invoice) -> Charge:
    """Fails on its first two attempts, then succeeds: watch the backoff in the history."""
    if ctx.attempt <= 2:
        raise PaymentGatewayBusy(f"gateway busy (attempt {ctx.attempt})")
    return Charge(order_id=bill.order_id, amount_cents=bill.total_cents, attempts=ctx.attempt)


@task()
async def ship_express(ctx: TaskContext, paid: Charge) -> Shipment:
    return Shipment(order_id=paid.order_id, carrier="courier")


@task()
async def ship_standard(ctx: TaskContext, paid: Charge) -> Shipment:
    return Shipment(order_id=paid.order_id, carrier="post")


@task()
async def receipt(ctx: TaskContext, paid: Charge, shipment: Shipment) -> Receipt:
    return Receipt(
        order_id=paid.order_id,
        amount_cents=paid.amount_cents,
        carrier=shipment.carrier,
        charge_attempts=paid.attempts,
    )


@workflow("orders")
def orders(flow: Flow[Order]) -> Node[Receipt]:
    lines = flow.run(order_lines, flow.input)
    reserved = flow.map(reserve, lines, max_concurrency=4)
    bill = flow.run(invoice, flow.input, reserved)
    paid = flow.run(charge, bill)
    with flow.switch(bill, "shipping") as shipping:
        with shipping.case("express"):
            express = flow.run(ship_express, paid)
        with shipping.default():
            # Standard orders wait for the next pickup (short, so the demo stays quick).
            pickup = flow.sleep(timedelta(seconds=1), after=[paid])
            standard = flow.run(ship_standard, paid, after=[pickup])
    shipment = flow.first_of(express, standard)
    return flow.run(receipt, paid, shipment)


app = App(workflows=[orders])
