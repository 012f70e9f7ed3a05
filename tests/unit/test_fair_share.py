"""``FairShare``: declarations refused with a typed error naming the value, and the pure
key and weight rules the decider and the worker share."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, JsonValue

from legato import FairShare, FairShareKeyError, TaskContext, TaskDefinitionError, task
from legato.engine.decider.model import EnqueueTask
from legato.engine.fair_keys import FairKeys, row_key
from legato.engine.repositories.tasks import NewTask
from legato.flow.fair_share import UNKEYED, key_text, weight_problem
from legato.schema import NodeKind, TaskState


class Order(BaseModel):
    tenant: str
    plan: str = "free"


def test_a_key_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TaskDefinitionError, match=r"FairShare\(key='tenant'\): key must be"):
        FairShare(key="tenant")  # type: ignore[arg-type]


@pytest.mark.parametrize("weight", [0, -1, 1001, 1.5, True, "3"])
def test_a_weight_outside_1_to_1000_is_refused(weight: object) -> None:
    with pytest.raises(TaskDefinitionError, match=rf"FairShare\(weight={weight!r}\)"):
        FairShare(key=lambda order: order.tenant, weight=weight)  # type: ignore[arg-type]


def test_a_key_that_cannot_take_the_inputs_is_refused_at_the_declaration() -> None:
    with pytest.raises(TaskDefinitionError, match=r"FairShare\(key=.*cannot take the task's 1"):

        @task(fair_share=FairShare(key=lambda order, extra: order.tenant))
        async def charge(ctx: TaskContext, order: Order) -> None: ...


def test_a_weight_function_that_cannot_take_the_inputs_is_refused() -> None:
    with pytest.raises(TaskDefinitionError, match=r"FairShare\(weight=.*cannot take"):

        @task(fair_share=FairShare(key=lambda order: order.tenant, weight=lambda: 2))
        async def charge(ctx: TaskContext, order: Order) -> None: ...


def test_fair_share_must_be_a_fair_share() -> None:
    with pytest.raises(
        TaskDefinitionError, match=r"fair_share='tenant' must be a legato.FairShare"
    ):

        @task(fair_share="tenant")  # type: ignore[arg-type]
        async def charge(ctx: TaskContext, order: Order) -> None: ...


def test_keys_are_non_empty_printable_strings_or_ints() -> None:
    assert key_text("acme") == "acme"
    assert key_text(42) == "42"
    for bad in ("", " acme", "a\nb", "x" * 201, None, True, 1.5, b"acme"):
        assert key_text(bad) is None, bad
    assert weight_problem(3) is None
    assert weight_problem(0) is not None


def test_the_key_and_weight_of_an_attempt_come_from_its_inputs() -> None:
    share = FairShare(
        key=lambda order: order.tenant, weight=lambda order: 3 if order.plan == "gold" else 1
    )
    assert share.of("charge", [Order(tenant="acme", plan="gold")]) == ("acme", 3)
    assert share.of("charge", [Order(tenant="zed")]) == ("zed", 1)
    with pytest.raises(FairShareKeyError, match=r"task 'charge': FairShare key '' is no key"):
        share.of("charge", [Order(tenant="")])
    with pytest.raises(FairShareKeyError, match="key function raised AttributeError"):
        share.of("charge", [object()])
    with pytest.raises(FairShareKeyError, match="FairShare weight 0 must be an int"):
        FairShare(key=lambda order: order.tenant, weight=lambda order: 0).of(
            "charge", [Order(tenant="a")]
        )


@task(queue="tenants", fair_share=FairShare(key=lambda order: order.tenant, weight=2))
async def charge(ctx: TaskContext, order: Order) -> None: ...


@task(queue="tenants")
async def audit(ctx: TaskContext, order: Order) -> None: ...


@task(queue="plain")
async def mail(ctx: TaskContext, order: Order) -> None: ...


def _enqueue(task_name: str, queue: str, task_id: uuid.UUID) -> EnqueueTask:
    return EnqueueTask(
        task_id=task_id, task_name=task_name, queue=queue, attempt=1, available_at=_NOW
    )


_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _created(task_id: uuid.UUID, args: JsonValue) -> NewTask:
    return NewTask(
        run_id=uuid.uuid4(),
        id=task_id,
        node_id="n",
        iteration=0,
        attempt=1,
        kind=NodeKind.TASK,
        state=TaskState.QUEUED,
        task_name="charge",
        queue="tenants",
        input=args,
        output=None,
        error=None,
        event_name=None,
        created_at=_NOW,
        available_at=_NOW,
        finished_at=None,
        observed=False,
    )


def test_every_row_of_a_fair_queue_gets_a_key_and_no_other_row_does() -> None:
    fair = FairKeys({t.name: t for t in (charge, audit, mail)})
    assert fair.queues == {"tenants"}
    order: JsonValue = [{"tenant": "acme", "plan": "free"}]
    ids = [uuid.uuid4() for _ in range(4)]
    creates = [_created(ids[0], order), _created(ids[1], [{"tenant": ""}])]
    assert row_key(fair, _enqueue("charge", "tenants", ids[0]), creates) == ("acme", 2)
    # A key that cannot be computed: unkeyed, and the worker fails the attempt.
    assert row_key(fair, _enqueue("charge", "tenants", ids[1]), creates) == (UNKEYED, 1)
    # A task without fair share on a fair queue shares the unkeyed turn.
    assert row_key(fair, _enqueue("audit", "tenants", ids[2]), creates) == (UNKEYED, 1)
    assert row_key(fair, _enqueue("mail", "plain", ids[3]), creates) == (None, None)
    assert row_key(None, _enqueue("charge", "tenants", ids[0]), creates) == (None, None)
