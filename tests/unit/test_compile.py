"""Compiling workflows to specs: shape, canonical JSON, hashing, versions, errors."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from datetime import timedelta

import pytest
from pydantic import BaseModel

from legato import UnknownTask, UnknownWorkflow
from legato.context import TaskContext
from legato.flow import (
    App,
    Flow,
    Node,
    SpecError,
    TaskDefinitionError,
    WorkflowSpec,
    resolve_version,
    task,
    workflow,
)
from legato.flow.spec import TaskNodeSpec, TaskSpec

from ._flows import Account, User, branchy, create_user, fanout, load_account, parent, signup


def test_spec_lists_nodes_in_build_order_with_task_options() -> None:
    spec = signup.spec
    assert [n.id for n in spec.nodes] == ["create_user", "signup.confirmed", "activate"]
    assert spec.output == "activate"
    assert spec.tasks["create_user"].retry.attempts == 5
    assert spec.tasks["activate"].queue == "mail"
    node = spec.nodes[2]
    assert isinstance(node, TaskNodeSpec)
    assert node.inputs == ("create_user", "signup.confirmed")


def test_canonical_json_round_trips_and_hash_is_stable() -> None:
    for wf in (signup, branchy, fanout, parent):
        again = WorkflowSpec.model_validate_json(wf.spec.canonical_json())
        assert again == wf.spec
        assert again.spec_hash == wf.spec_hash
    assert len({w.spec_hash for w in (signup, branchy, fanout, parent)}) == 4


def test_same_spec_same_version_changed_spec_next_version() -> None:
    first = resolve_version({}, signup.spec_hash)
    assert (first.version, first.is_new) == (1, True)
    same = resolve_version({1: signup.spec_hash}, signup.spec_hash)
    assert (same.version, same.is_new) == (1, False)

    @workflow("signup")
    def changed(flow: Flow[BaseModel]) -> Node[User]:
        return flow.run(load_account_user, flow.input)

    assert changed.spec_hash != signup.spec_hash
    nxt = resolve_version({1: signup.spec_hash, 2: "x"}, changed.spec_hash)
    assert (nxt.version, nxt.is_new) == (3, True)
    old = resolve_version({1: signup.spec_hash, 2: changed.spec_hash}, signup.spec_hash)
    assert (old.version, old.is_new) == (1, False)


@task()
async def load_account_user(ctx: TaskContext, m: BaseModel) -> User:
    return User(user_id="x")


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(SpecError, match="duplicate node name 'x'"):

        @workflow("dup")
        def dup(flow: Flow[User]) -> Node[Account]:
            flow.run(load_account, flow.input, name="x")
            return flow.run(load_account, flow.input, name="x")


def test_auto_names_are_made_unique() -> None:
    @workflow("twice")
    def twice(flow: Flow[User]) -> Node[Account]:
        flow.run(load_account, flow.input)
        return flow.run(load_account, flow.input)

    assert [n.id for n in twice.spec.nodes] == ["load_account", "load_account-2"]


def test_switch_on_missing_field_names_the_node() -> None:
    with pytest.raises(SpecError, match=r"'load_account'\.tier.*no field 'tier'"):

        @workflow("bad-switch")
        def bad(flow: Flow[User]) -> Node[Account]:
            account = flow.run(load_account, flow.input)
            flow.switch(account, "tier")  # type: ignore[attr-defined]
            return account


def test_empty_workflow_is_rejected() -> None:
    with pytest.raises(SpecError, match="'empty' is empty"):

        @workflow("empty")
        def empty(flow: Flow[User]) -> Node[User]:
            return flow.input


def _spec_json(nodes: list[dict[str, object]], tasks: Mapping[str, object] | None = None) -> str:
    import json

    return json.dumps(
        {
            "name": "hand",
            "nodes": nodes,
            "output": nodes[-1]["id"] if nodes else "x",
            "tasks": tasks or {},
        }
    )


def test_cycle_is_rejected_naming_the_nodes() -> None:
    t = {"t": TaskSpec(name="t").model_dump(mode="json")}
    nodes: list[dict[str, object]] = [
        {"kind": "task", "id": "a", "task": "t", "inputs": ["b"]},
        {"kind": "task", "id": "b", "task": "t", "inputs": ["a"]},
    ]
    with pytest.raises(ValueError, match="cycle through node 'a': a -> b -> a"):
        WorkflowSpec.model_validate_json(_spec_json(nodes, t))


def test_unknown_task_and_unknown_input_are_rejected() -> None:
    with pytest.raises(ValueError, match="node 'a' uses unknown task 'ghost'"):
        WorkflowSpec.model_validate_json(_spec_json([{"kind": "task", "id": "a", "task": "ghost"}]))
    t = {"t": TaskSpec(name="t").model_dump(mode="json")}
    with pytest.raises(ValueError, match="node 'a' depends on unknown node 'zz'"):
        WorkflowSpec.model_validate_json(
            _spec_json([{"kind": "task", "id": "a", "task": "t", "inputs": ["zz"]}], t)
        )


def test_node_of_another_flow_is_rejected() -> None:
    holder: list[Node[User]] = []

    @workflow("one")
    def one(flow: Flow[User]) -> Node[Account]:
        holder.append(flow.input)
        return flow.run(load_account, flow.input)

    with pytest.raises(SpecError, match="not a node of this flow"):

        @workflow("two")
        def two(flow: Flow[User]) -> Node[Account]:
            return flow.run(load_account, holder[0])


def test_untyped_task_parameter_is_rejected_naming_the_function() -> None:
    with pytest.raises(TaskDefinitionError, match=r"untyped.*parameter 'x' needs a type"):

        @task()
        async def untyped(ctx: TaskContext, x) -> int:  # type: ignore[no-untyped-def]
            return 1


def test_unserialisable_return_type_is_rejected() -> None:
    with pytest.raises(TaskDefinitionError, match=r"bad_return.*return type.*cannot be serialised"):

        @task()
        async def bad_return(ctx: TaskContext) -> socket.socket:
            raise NotImplementedError


def test_sync_function_is_rejected() -> None:
    def sync(ctx: TaskContext) -> int:
        return 1

    with pytest.raises(TaskDefinitionError, match="must be an async function"):
        task()(sync)  # type: ignore[arg-type]


def test_app_collects_workflows_children_and_tasks() -> None:
    app = App(workflows=[parent, branchy])
    assert set(app.workflows) == {"parent", "signup", "branchy"}
    assert app.tasks["create_user"] is create_user
    assert app.workflow("signup") is signup
    with pytest.raises(UnknownWorkflow, match="unknown workflow 'nope'; known: "):
        app.workflow("nope")
    with pytest.raises(UnknownTask, match=r"unknown task 'nope'; known: .*'create_user'"):
        app.task("nope")
    # Both stay LookupErrors for code that caught those before.
    assert issubclass(UnknownWorkflow, LookupError) and issubclass(UnknownTask, LookupError)


def test_app_rejects_two_tasks_with_one_name() -> None:
    @task(name="load_account")
    async def impostor(ctx: TaskContext, u: User) -> Account:
        raise NotImplementedError

    @workflow("impostor")
    def wf(flow: Flow[User]) -> Node[Account]:
        return flow.run(impostor, flow.input)

    with pytest.raises(SpecError, match="two different tasks are named 'load_account'"):
        App(workflows=[branchy, wf])


def test_event_wait_records_timeout_default_and_schema() -> None:
    node = signup.spec.node("signup.confirmed")
    assert node.kind == "event"
    assert signup.spec.event_names() == frozenset({"signup.confirmed"})
    (schema,) = signup.spec.event_schemas("signup.confirmed")
    assert schema["required"] == ["code"]
    assert timedelta(seconds=1800).total_seconds() == 1800
