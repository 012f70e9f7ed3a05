"""Property tests: random DAGs, random orders of completions, failures, signals and timers.

Checked at every step (see ``_sim.Sim``): the decider is deterministic and
idempotent, no (node, iteration) has two live attempts, no attempt is created
twice, the run finishes at most once and never with live work. Checked here:
a node starts only once all its inputs completed and receives exactly their
outputs (joins fire once, after all inputs), skipped nodes never run, a
guarded node runs only on its case, map concurrency stays bounded, retries
stay within budget and their delays within the policy, and every run finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from legato.engine.decider import base_delay
from legato.engine.decider.model import Action, CreateTask, FinishRun, TaskRecord
from legato.flow.spec import (
    INPUT_NODE_ID,
    CaseSpec,
    ChildNodeSpec,
    EventNodeSpec,
    FirstOfNodeSpec,
    GuardSpec,
    MapNodeSpec,
    NodeSpec,
    RetrySpec,
    SleepNodeSpec,
    SwitchNodeSpec,
    TaskNodeSpec,
    TaskSpec,
    WorkflowSpec,
)
from legato.schema.enums import NodeKind, RunStatus, TaskState

from ._sim import Sim

EVENTS = ("e1", "e2")
KINDS = ("task", "task", "list", "sleep", "event", "switch", "first_of", "map", "child")


@st.composite
def specs(draw: st.DrawFn) -> WorkflowSpec:
    """A random valid spec: tasks 'obj' output {"v": 0|1}, task 'lst' outputs a list."""
    retry = RetrySpec(
        attempts=draw(st.integers(1, 3)),
        initial_interval=draw(st.sampled_from([0.0, 1.0, 5.0])),
        jitter=draw(st.sampled_from([0.0, 0.5])),
    )
    tasks = {"obj": TaskSpec(name="obj", retry=retry), "lst": TaskSpec(name="lst", retry=retry)}
    nodes: list[NodeSpec] = []
    objs: list[str] = [INPUT_NODE_ID]  # nodes whose output is {"v": ...}
    lists: list[str] = []
    values: list[str] = [INPUT_NODE_ID]  # anything usable as an input
    switches: list[SwitchNodeSpec] = []
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(KINDS))
        node_id = f"n{i}"
        guard = None
        use_guard = draw(st.booleans())
        if switches and use_guard:
            sw = draw(st.sampled_from(switches))
            labels = [c.label for c in sw.cases] + (["default"] if sw.has_default else [])
            guard = GuardSpec(switch=sw.id, case=draw(st.sampled_from(labels)))
        after = tuple(draw(st.lists(st.sampled_from(values), max_size=2, unique=True)))
        after = tuple(a for a in after if a != INPUT_NODE_ID)
        node: NodeSpec
        if kind in ("task", "list"):
            inputs = tuple(draw(st.lists(st.sampled_from(values), max_size=3)))
            node = TaskNodeSpec(
                id=node_id,
                task="obj" if kind == "task" else "lst",
                inputs=inputs,
                after=after,
                guard=guard,
            )
            (objs if kind == "task" else lists).append(node_id)
        elif kind == "sleep":
            node = SleepNodeSpec(
                id=node_id, seconds=draw(st.sampled_from([0, 5])), after=after, guard=guard
            )
        elif kind == "event":
            node = EventNodeSpec(
                id=node_id,
                event=draw(st.sampled_from(EVENTS)),
                timeout=draw(st.sampled_from([None, 60.0])),
                has_default=draw(st.booleans()),
                default={"v": 1},
                after=after,
                guard=guard,
            )
            objs.append(node_id)
        elif kind == "switch":
            sw = SwitchNodeSpec(
                id=node_id,
                field="v",
                inputs=(draw(st.sampled_from(objs)),),
                cases=(CaseSpec(label="zero", value=0), CaseSpec(label="one", value=1))[
                    : draw(st.integers(1, 2))
                ],
                has_default=draw(st.booleans()),
                guard=guard,
            )
            switches.append(sw)
            nodes.append(sw)
            continue
        elif kind == "first_of":
            inputs = tuple(draw(st.lists(st.sampled_from(objs), min_size=1, max_size=3)))
            node = FirstOfNodeSpec(id=node_id, inputs=inputs, guard=guard)
            objs.append(node_id)
        elif kind == "map":
            if not lists:
                continue
            node = MapNodeSpec(
                id=node_id,
                task="obj",
                inputs=(draw(st.sampled_from(lists)),),
                max_concurrency=draw(st.sampled_from([None, 1, 2])),
                after=after,
                guard=guard,
            )
        else:
            node = ChildNodeSpec(
                id=node_id,
                workflow="kid",
                inputs=(draw(st.sampled_from(values)),),
                after=after,
                guard=guard,
            )
            objs.append(node_id)
        nodes.append(node)
        values.append(node_id)
    if not nodes:
        nodes.append(TaskNodeSpec(id="only", task="obj"))
    on_failure = None
    if draw(st.booleans()):
        tasks["handler"] = TaskSpec(name="handler", retry=retry)
        on_failure = "handler"
    return WorkflowSpec(
        name="random", nodes=tuple(nodes), output=nodes[-1].id, tasks=tasks, on_failure=on_failure
    )


@dataclass
class Oracle:
    """Independent reading of node outputs from the rows (not the decider's code)."""

    spec: WorkflowSpec
    sim: Sim

    def latest(self, node_id: str, iteration: int = 0) -> TaskRecord | None:
        rows = [t for t in self.sim.snap.tasks if t.node_id == node_id and t.iteration == iteration]
        return max(rows, key=lambda t: t.attempt) if rows else None

    def resolved(self, node_id: str) -> tuple[bool, JsonValue]:
        if node_id == INPUT_NODE_ID:
            return True, self.sim.snap.input
        node = self.spec.node(node_id)
        if isinstance(node, MapNodeSpec):
            ok, items = self.resolved(node.inputs[0])
            if not ok or not isinstance(items, list):
                return False, None
            rows = [self.latest(node_id, i) for i in range(len(items))]
            if all(r is not None and r.state is TaskState.COMPLETED for r in rows):
                return True, [r.output for r in rows if r is not None]
            return False, None
        if isinstance(node, SleepNodeSpec):
            row = self.latest(node_id)
            return (row is not None and row.state is TaskState.COMPLETED), None
        row = self.latest(node_id)
        if row is None:
            return False, None
        if row.state is TaskState.COMPLETED:
            return True, row.output
        if (
            isinstance(node, EventNodeSpec)
            and row.state is TaskState.TIMED_OUT
            and node.has_default
        ):
            return True, node.default
        return False, None


def _output_for(spec: WorkflowSpec, row: TaskRecord, data: st.DataObject) -> JsonValue:
    if row.kind is NodeKind.CHILD:
        return {"v": data.draw(st.integers(0, 2))}
    node = spec.node(row.node_id) if row.node_id != "$on_failure" else None
    if isinstance(node, TaskNodeSpec) and node.task == "lst":
        return list(range(data.draw(st.integers(0, 3))))
    return {"v": data.draw(st.integers(0, 2))}


@given(spec=specs(), data=st.data())
def test_random_runs_keep_the_invariants(spec: WorkflowSpec, data: st.DataObject) -> None:
    sim = Sim(spec, {"v": data.draw(st.integers(0, 2))})
    oracle = Oracle(spec, sim)
    signals_left = 4
    for _ in range(400):
        before = sim.now
        actions = sim.step()
        _check_step(spec, sim, oracle, actions, before)
        if sim.snap.status.finished:
            break
        live = sim.live()
        assert live, "the run is stuck: nothing live and not finished"
        choice = data.draw(st.integers(0, len(live) + 1))
        if choice == len(live) + 1 and data.draw(st.integers(0, 20)) == 0:
            sim.cancel()
            continue
        if choice == len(live) and signals_left:
            signals_left -= 1
            sim.signal(data.draw(st.sampled_from(EVENTS)), {"v": data.draw(st.integers(0, 1))})
            continue
        row = live[min(choice, len(live) - 1)]
        sim.advance(data.draw(st.sampled_from([0, 1, 30])))
        if row.kind is NodeKind.SLEEP:
            sim.complete(row.node_id, None, row.iteration)
        elif row.kind is NodeKind.EVENT:
            if data.draw(st.booleans()):
                sim.time_out(row.node_id)
            else:
                node = spec.node(row.node_id)
                assert isinstance(node, EventNodeSpec)
                sim.signal(node.event, {"v": data.draw(st.integers(0, 1))})
        else:
            outcome = data.draw(st.sampled_from(["ok", "ok", "fail", "fatal", "timeout"]))
            if outcome == "ok":
                sim.complete(row.node_id, _output_for(spec, row, data), row.iteration)
            elif outcome == "timeout" and row.kind is not NodeKind.CHILD:
                sim.time_out(row.node_id, row.iteration)
            else:
                sim.fail(row.node_id, row.iteration, retryable=outcome == "fail")
    else:
        raise AssertionError("the run did not finish")
    assert len(sim.finishes) == 1
    _check_final(spec, sim)


def _check_step(
    spec: WorkflowSpec, sim: Sim, oracle: Oracle, actions: Sequence[Action], before: object
) -> None:
    finishes = [a for a in actions if isinstance(a, FinishRun)]
    assert len(finishes) <= 1
    for action in actions:
        if not isinstance(action, CreateTask) or action.node_id == "$on_failure":
            continue
        node = spec.node(action.node_id)
        if action.state is TaskState.SKIPPED:
            continue
        # A node starts only when every dependency is resolved; task inputs are their outputs.
        if action.attempt == 1 and not isinstance(node, FirstOfNodeSpec):
            for dep in (*node.inputs, *node.after):
                assert oracle.resolved(dep)[0], f"{node.id} started before {dep} completed"
            if isinstance(node, TaskNodeSpec):
                assert action.input == [oracle.resolved(d)[1] for d in node.inputs]
        if node.guard is not None:
            sw = oracle.latest(node.guard.switch)
            assert sw is not None
            assert sw.state is TaskState.COMPLETED
            assert sw.output == node.guard.case, f"{node.id} ran on a branch not taken"
        if action.attempt > 1:
            task = spec.tasks[action.task_name or ""]
            assert action.attempt <= task.retry.attempts
            assert action.available_at is not None
            delay = (action.available_at - sim.now).total_seconds()
            base = base_delay(task.retry, action.attempt - 1)
            assert base * (1 - task.retry.jitter) - 1e-6 <= delay <= base + 1e-6
    for node in spec.nodes:
        if isinstance(node, MapNodeSpec) and node.max_concurrency is not None:
            live = [t for t in sim.live() if t.node_id == node.id]
            assert len(live) <= node.max_concurrency


def _check_final(spec: WorkflowSpec, sim: Sim) -> None:
    for node in spec.nodes:
        rows = sim.rows(node.id)
        if any(r.state is TaskState.SKIPPED for r in rows):
            assert len(rows) == 1, f"skipped node {node.id} also ran"
    finish = sim.finishes[0]
    if finish.status is RunStatus.SUCCEEDED:
        assert not sim.snap.cancel_requested
        for node in spec.nodes:
            rows = sim.rows(node.id)
            assert rows or isinstance(node, MapNodeSpec), f"{node.id} never resolved"
    assert all(t.observed for t in sim.snap.tasks), "a terminal row was never recorded"
