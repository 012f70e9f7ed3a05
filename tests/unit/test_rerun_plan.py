"""The rerun plan (pure): which nodes a rerun runs again, which completed rows it
reuses, the default node, and the refusals; and that the decider, given the reused
rows, schedules only the chosen node."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from legato import InvalidArgument, RerunIncompatible, UnknownNode
from legato.engine.decider import decide
from legato.engine.decider.model import CreateTask, RunSnapshot, TaskRecord, task_id_for
from legato.enums import NodeKind, RunStatus, TaskState
from legato.flow.spec import WorkflowSpec
from legato.rerun_plan import StoredAttempt, default_from_node, downstream, plan_rerun

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def spec(*nodes: dict[str, Any], tasks: tuple[str, ...] = ("a", "b", "c", "d")) -> WorkflowSpec:
    return WorkflowSpec.model_validate(
        {
            "name": "orders",
            "nodes": list(nodes),
            "output": nodes[-1]["id"],
            "tasks": {t: {"name": t} for t in tasks},
        }
    )


def node(node_id: str, task: str, *inputs: str, kind: str = "task", **more: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": kind, "task": task, "inputs": list(inputs), **more}


# fetch -> price -> store, and audit after fetch (a branch price does not lead to)
ORDERS = spec(
    node("fetch", "a", "$input"),
    node("price", "b", "fetch"),
    node("audit", "d", "fetch"),
    node("store", "c", "price", after=["audit"]),
)


def done(
    node_id: str, output: Any = None, iteration: int = 0, kind: NodeKind = NodeKind.TASK
) -> StoredAttempt:
    return StoredAttempt(node_id, iteration, 1, kind, TaskState.COMPLETED, output)


def failed(node_id: str, attempt: int = 1) -> StoredAttempt:
    return StoredAttempt(node_id, 0, attempt, NodeKind.TASK, TaskState.FAILED)


FAILED_AT_PRICE = [done("fetch", 10), done("audit", "ok"), failed("price", 1), failed("price", 2)]


def test_downstream_follows_inputs_after_and_guards() -> None:
    assert downstream(ORDERS, "price") == ("price", "store")
    assert downstream(ORDERS, "fetch") == ("fetch", "price", "audit", "store")
    assert downstream(ORDERS, "audit") == ("audit", "store")


def test_the_default_node_is_the_first_failed_one() -> None:
    assert default_from_node(ORDERS, RunStatus.FAILED, FAILED_AT_PRICE, "r") == "price"
    cancelled = [done("fetch", 1), StoredAttempt("price", 0, 1, NodeKind.TASK, TaskState.CANCELLED)]
    assert default_from_node(ORDERS, RunStatus.CANCELLED, cancelled, "r") == "price"
    assert default_from_node(ORDERS, RunStatus.CANCELLED, [done("fetch", 1)], "r") == "price"
    finished = [done("fetch"), done("price"), done("audit"), done("store")]
    with pytest.raises(InvalidArgument, match="run r succeeded with no failed node: name the node"):
        default_from_node(ORDERS, RunStatus.SUCCEEDED, finished, "r")


def test_a_plan_reuses_what_the_node_does_not_lead_to() -> None:
    plan = plan_rerun(
        ORDERS, ORDERS, RunStatus.FAILED, FAILED_AT_PRICE, from_node=None, run="r", version="v1"
    )
    assert (plan.from_node, plan.rerun, plan.reused_nodes) == (
        "price",
        ("price", "store"),
        ("fetch", "audit"),
    )
    assert [(r.node_id, r.output, r.task_name, r.queue) for r in plan.reused] == [
        ("fetch", 10, "a", "default"),
        ("audit", "ok", "d", "default"),
    ]
    from_audit = plan_rerun(
        ORDERS, ORDERS, RunStatus.FAILED, FAILED_AT_PRICE, from_node="audit", run="r", version="v1"
    )
    assert from_audit.reused_nodes == ("fetch",)  # price never completed: it runs as new


def test_map_elements_are_reused_one_by_one() -> None:
    mapped = spec(node("each", "a", "$input", kind="map"), node("sum", "b", "each"))
    attempts = [
        done("each", 1, 0, NodeKind.MAP),
        StoredAttempt("each", 1, 2, NodeKind.MAP, TaskState.COMPLETED, 2),
        StoredAttempt("each", 2, 1, NodeKind.MAP, TaskState.FAILED),
    ]
    plan = plan_rerun(
        mapped, mapped, RunStatus.FAILED, attempts, from_node="sum", run="r", version="v"
    )
    assert [(r.node_id, r.iteration, r.output) for r in plan.reused] == [
        ("each", 0, 1),
        ("each", 1, 2),
    ]


def test_an_unknown_node_names_the_known_ones() -> None:
    with pytest.raises(
        UnknownNode,
        match="workflow 'orders' v2 has no node 'charge': its nodes are 'fetch', 'price'",
    ):
        plan_rerun(
            ORDERS,
            ORDERS,
            RunStatus.FAILED,
            FAILED_AT_PRICE,
            from_node="charge",
            run="r",
            version="v2",
        )
    renamed = spec(node("fetch", "a", "$input"), node("quote", "b", "fetch"))
    with pytest.raises(UnknownNode, match=r"no node 'price' \(the first failed node of run r\)"):
        plan_rerun(
            ORDERS,
            renamed,
            RunStatus.FAILED,
            FAILED_AT_PRICE,
            from_node=None,
            run="r",
            version="v2",
        )


def test_a_version_that_defines_a_reused_node_otherwise_is_refused() -> None:
    other_task = spec(
        node("fetch", "d", "$input"),
        node("price", "b", "fetch"),
        node("audit", "d", "fetch"),
        node("store", "c", "price", after=["audit"]),
    )
    with pytest.raises(
        RerunIncompatible,
        match="node 'fetch' has task 'd' there but 'a' in the original; rerun from 'fetch'",
    ):
        plan_rerun(
            ORDERS,
            other_task,
            RunStatus.FAILED,
            FAILED_AT_PRICE,
            from_node="price",
            run="r",
            version="v2",
        )
    other_inputs = spec(
        node("fetch", "a", "$input"),
        node("price", "b", "fetch"),
        node("audit", "d", "$input"),
        node("store", "c", "price", after=["audit"]),
    )
    with pytest.raises(
        RerunIncompatible, match=r"node 'audit' depends on \('\$input'\) there but on \('fetch'\)"
    ):
        plan_rerun(
            ORDERS,
            other_inputs,
            RunStatus.FAILED,
            FAILED_AT_PRICE,
            from_node="price",
            run="r",
            version="v2",
        )
    # A node the new version adds, or one it drops, is not a reuse: no refusal.
    plan = plan_rerun(
        ORDERS,
        spec(node("fetch", "a", "$input"), node("price", "b", "fetch")),
        RunStatus.FAILED,
        FAILED_AT_PRICE,
        from_node="price",
        run="r",
        version="v2",
    )
    assert plan.reused_nodes == ("fetch",)


def test_a_stored_output_the_new_code_refuses() -> None:
    def check(task: str, output: Any) -> str | None:
        return "not a string" if task == "a" and not isinstance(output, str) else None

    with pytest.raises(
        RerunIncompatible,
        match="node 'fetch' stored an output task 'a' no longer accepts: not a string",
    ):
        plan_rerun(
            ORDERS,
            ORDERS,
            RunStatus.FAILED,
            FAILED_AT_PRICE,
            from_node="price",
            run="r",
            version="v2",
            check_output=check,
        )


def test_the_decider_schedules_only_the_chosen_node_over_the_reused_rows() -> None:
    plan = plan_rerun(
        ORDERS, ORDERS, RunStatus.FAILED, FAILED_AT_PRICE, from_node=None, run="r", version="v1"
    )
    run_id = uuid.uuid4()
    seeded = tuple(
        TaskRecord(
            task_id=task_id_for(run_id, r.node_id, r.iteration, 1),
            node_id=r.node_id,
            iteration=r.iteration,
            kind=r.kind,
            state=TaskState.COMPLETED,
            output=r.output,
            observed=True,
            created_at=NOW,
            finished_at=NOW,
        )
        for r in plan.reused
    )
    actions = decide(
        ORDERS, RunSnapshot(run_id=run_id, status=RunStatus.RUNNING, input=1, tasks=seeded), NOW
    )
    created = [a for a in actions if isinstance(a, CreateTask)]
    assert [(c.node_id, c.task_name, c.input) for c in created] == [("price", "b", [10])]
