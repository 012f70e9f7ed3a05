"""More apps for ``test_deploy_check_parcel.py``: a ``parcel`` workflow as it runs
today and new versions of its code that change an output type or drop an event model.

``parcel``: ``weigh`` the order, wait for ``parcel.packed``, ``label`` the weight with
the packing, then ``post`` the label.
"""

from __future__ import annotations

from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


class Order(BaseModel):
    order_id: str


class Weight(BaseModel):
    grams: int


class Packed(BaseModel):
    by: str


class Label(BaseModel):
    code: int


class Posted(BaseModel):
    ok: bool


@task(name="weigh")
async def weigh(ctx: TaskContext, order: Order) -> Weight:
    return Weight(grams=100)


@task(name="label")
async def label(ctx: TaskContext, weight: Weight, packed: Packed) -> Label:
    return Label(code=weight.grams)


@task(name="post")
async def post(ctx: TaskContext, label: Label) -> Posted:
    return Posted(ok=True)


@workflow("parcel")
def parcel(flow: Flow[Order]) -> Node[Posted]:
    weight = flow.run(weigh, flow.input)
    packed = flow.wait_for_event("parcel.packed", Packed)
    return flow.run(post, flow.run(label, weight, packed))


current = App([parcel])


# -- (e) label returns its code as text now; post still takes a number --------------------


class TextLabel(BaseModel):
    code: str


@task(name="label")
async def label_text(ctx: TaskContext, weight: Weight, packed: Packed) -> TextLabel:
    return TextLabel(code=f"L{weight.grams}")


@workflow("parcel")
def parcel_text_label(flow: Flow[Order]) -> Node[Posted]:
    weight = flow.run(weigh, flow.input)
    packed = flow.wait_for_event("parcel.packed", Packed)
    # The incompatible change under test: the type checker sees it too.
    return flow.run(post, flow.run(label_text, weight, packed))  # type: ignore[arg-type]


output_changed = App([parcel_text_label])


# -- (f) no wait for parcel.packed any more: its event model is gone ----------------------


@task(name="label")
async def label_unpacked(ctx: TaskContext, weight: Weight) -> Label:
    return Label(code=weight.grams)


@workflow("parcel")
def parcel_unpacked(flow: Flow[Order]) -> Node[Posted]:
    return flow.run(post, flow.run(label_unpacked, flow.run(weigh, flow.input)))


event_removed = App([parcel_unpacked])
