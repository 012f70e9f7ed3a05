"""One stored version's checks against the new app: for each node a run of it may still
run, whether the new code has what the node needs and accepts what it will pass (see
the package docstring). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import JsonValue, TypeAdapter, ValidationError

from legato.deploy_check.report import Finding, RiskKind, RunState
from legato.enums import TaskState
from legato.flow import App, WorkflowDefinition
from legato.flow.spec import (
    HANDLER_NODE_ID,
    INPUT_NODE_ID,
    ChildNodeSpec,
    EventNodeSpec,
    FailureInfo,
    FirstOfNodeSpec,
    MapNodeSpec,
    NodeSpec,
    SleepNodeSpec,
    SwitchNodeSpec,
    TaskNodeSpec,
    WorkflowSpec,
)
from legato.flow.tasks import adapter_for
from legato.schema_compat import accepted_schema, incompatibilities, produced_schema

MAX_ELEMENTS = 100  # a map's stored elements validated per run


# -- the value each node passes on ------------------------------------------------------


@dataclass(frozen=True)
class _Stored:
    """A value the run has stored: validated with the new model as it is."""

    value: JsonValue
    what: str


@dataclass(frozen=True)
class _Later:
    """A value still to be produced, by new code or a signal: described by a schema."""

    schema: Mapping[str, Any]
    what: str


class _Missing:
    """No buffered signal (a stored payload may be JSON null)."""


_MISSING = _Missing()

_Value = _Stored | _Later | None  # None: unknown (what produces it is itself at risk)
_Status = Literal["done", "skipped", "open"]


class VersionCheck:
    """The checks of one stored version's spec against the new app, run by run."""

    def __init__(self, spec: WorkflowSpec, app: App) -> None:
        self.spec = spec
        self.app = app
        self.workflow: WorkflowDefinition | None = app.workflows.get(spec.name)
        # Memos by id(...), holding what they are keyed by so no id is reused.
        self._adapters: dict[int, tuple[object, TypeAdapter[object]]] = {}
        self._accepted: dict[int, tuple[object, dict[str, Any]]] = {}
        self._produced_memo: dict[int, tuple[object, dict[str, Any]]] = {}
        self._later_memo: dict[str, _Value] = {}
        self._reasons: dict[tuple[int, int], tuple[object, list[str]]] = {}

    def assess(self, run: RunState) -> list[Finding]:
        """Why this run of the version could not finish with the new app; [] if it can."""
        findings: list[Finding] = []
        status: dict[str, tuple[_Status, JsonValue]] = {INPUT_NODE_ID: ("done", run.input)}
        values: dict[str, _Value] = {INPUT_NODE_ID: _Stored(run.input, "the run's input")}
        buffered = list(run.signals)
        for node in self.spec.nodes:
            state = self._status(node, run, status)
            status[node.id] = state
            if state[0] == "done":
                values[node.id] = _Stored(state[1], f"node {node.id!r}'s stored output")
                continue
            if state[0] == "skipped":
                values[node.id] = None
                continue
            signal: JsonValue | _Missing = _MISSING
            if isinstance(node, EventNodeSpec):
                row = run.rows.get((node.id, 0))
                taken = next((i for i, (n, _) in enumerate(buffered) if n == node.event), None)
                if (row is None or row[0] is TaskState.WAITING) and taken is not None:
                    signal = buffered.pop(taken)[1]  # one signal satisfies one wait
            if not isinstance(signal, _Missing):
                values[node.id] = _Stored(signal, "the buffered signal")
            elif isinstance(node, FirstOfNodeSpec):
                values[node.id] = self._later(node, values)
            else:  # depends on the node and the new app only
                if node.id not in self._later_memo:
                    self._later_memo[node.id] = self._later(node, values)
                values[node.id] = self._later_memo[node.id]
            findings += self._node(node, run, values, signal)
        if self.spec.on_failure is not None:
            handler = run.rows.get((HANDLER_NODE_ID, 0))
            if handler is None or handler[0] is not TaskState.COMPLETED:
                findings += self._task(
                    HANDLER_NODE_ID,
                    "handler",
                    self.spec.on_failure,
                    [_Later(self._produced(FailureInfo), "the failure")],
                )
        unique: list[Finding] = []
        for finding in findings:
            if finding not in unique:
                unique.append(finding)
        return unique

    # -- where the run is ---------------------------------------------------------------

    def _status(
        self, node: NodeSpec, run: RunState, status: Mapping[str, tuple[_Status, JsonValue]]
    ) -> tuple[_Status, JsonValue]:
        row = run.rows.get((node.id, 0))
        if row is not None and row[0] is TaskState.SKIPPED:
            return ("skipped", None)
        if isinstance(node, MapNodeSpec):
            items = status.get(node.inputs[0], ("open", None))
            if row is not None and items[0] == "done" and isinstance(items[1], list):
                outputs = [run.rows.get((node.id, i)) for i in range(len(items[1]))]
                if all(o is not None and o[0] is TaskState.COMPLETED for o in outputs):
                    return ("done", [o[1] for o in outputs if o is not None])
        elif row is not None:
            if row[0] is TaskState.COMPLETED:
                return ("done", row[1])
            if (
                isinstance(node, EventNodeSpec)
                and row[0] is TaskState.TIMED_OUT
                and node.has_default
            ):
                return ("done", node.default)
            return ("open", None)
        if row is None and self._will_skip(node, status):
            return ("skipped", None)
        return ("open", None)

    @staticmethod
    def _will_skip(node: NodeSpec, status: Mapping[str, tuple[_Status, JsonValue]]) -> bool:
        """Whether the decider will skip a node not yet started (its ``_gate``)."""
        if node.guard is not None:
            switch, chosen = status.get(node.guard.switch, ("open", None))
            if switch == "skipped" or (switch == "done" and chosen != node.guard.case):
                return True
        if isinstance(node, FirstOfNodeSpec):
            inputs = [status.get(i, ("open", None))[0] for i in node.inputs]
            after = [status.get(a, ("open", None))[0] for a in node.after]
            return "skipped" in after or all(s == "skipped" for s in inputs)
        return any(status.get(d, ("open", None))[0] == "skipped" for d in node.dependencies())

    def _later(self, node: NodeSpec, values: Mapping[str, _Value]) -> _Value:
        """What an open node will pass on, as the new code produces it."""
        what = f"node {node.id!r}"
        if isinstance(node, TaskNodeSpec | MapNodeSpec):
            task = self.app.tasks.get(node.task)
            if task is None:
                return None
            produced = self._produced(task.return_type)
            if isinstance(node, MapNodeSpec):
                produced = {"type": "array", "items": produced, "$defs": produced.get("$defs", {})}
            return _Later(produced, f"{what} (task {node.task!r})")
        if isinstance(node, EventNodeSpec):
            models = self._event_models(node.event)
            if models:
                return _Later(self._produced(models[-1]), f"{what} (event {node.event!r})")
            return _Later(node.payload_schema, f"{what} (event {node.event!r})")
        if isinstance(node, ChildNodeSpec):
            child = self.app.workflows.get(node.workflow)
            if child is None:
                return None
            return _Later(self._produced(child.output_type), f"{what} (workflow {node.workflow!r})")
        if isinstance(node, SwitchNodeSpec):
            return _Later({"type": "string"}, what)
        if isinstance(node, SleepNodeSpec):
            return _Later({"type": "null"}, what)
        options: list[_Value] = [values.get(i) for i in node.inputs]  # first_of
        stored = next((o for o in options if isinstance(o, _Stored)), None)
        if stored is not None:
            return stored
        schemas = [o.schema for o in options if isinstance(o, _Later)]
        if len(schemas) < len(options):
            return None
        return _Later({"anyOf": [_inline(s) for s in schemas]}, what)

    # -- what an open node needs of the new app -----------------------------------------

    def _node(
        self,
        node: NodeSpec,
        run: RunState,
        values: Mapping[str, _Value],
        signal: JsonValue | _Missing,
    ) -> list[Finding]:
        if isinstance(node, TaskNodeSpec):
            return self._task(node.id, "task", node.task, [values.get(i) for i in node.inputs])
        if isinstance(node, MapNodeSpec):
            return self._map(node, run, values.get(node.inputs[0]))
        if isinstance(node, ChildNodeSpec):
            if run.rows.get((node.id, 0)) is not None:
                return []  # started: the child is a run in flight of its own
            return self._child(node, values.get(node.inputs[0]))
        if isinstance(node, EventNodeSpec):
            return self._event(node, signal)
        return []

    def _task(
        self, node_id: str, kind: RiskKind, name: str, inputs: Sequence[_Value]
    ) -> list[Finding]:
        def finding(reason: str) -> Finding:
            return Finding(node_id, kind, name, reason)

        task = self.app.tasks.get(name)
        if task is None:
            return [finding(f"task {name!r} is not in the new app: no worker will run it")]
        found: list[Finding] = []
        queued_on = self.spec.tasks[name].queue if name in self.spec.tasks else task.queue
        if task.queue != queued_on:
            found.append(
                finding(
                    f"task {name!r} moved from queue {queued_on!r} to {task.queue!r}: this "
                    f"version queues its attempts on {queued_on!r}, which workers serving "
                    f"{task.queue!r} do not claim"
                )
            )
        if task.arity != len(inputs):
            found.append(
                finding(
                    f"task {name!r} now takes {task.arity} input(s); "
                    f"this version passes {len(inputs)}"
                )
            )
            return found
        for i, value in enumerate(inputs):
            prefix = f"task {name!r} input {i + 1}"
            found += [
                finding(reason) for reason in self._accepts(value, task.param_types[i], prefix)
            ]
        return found

    def _map(self, node: MapNodeSpec, run: RunState, items: _Value) -> list[Finding]:
        if isinstance(items, _Stored) and isinstance(items.value, list):
            open_items = [
                item
                for i, item in enumerate(items.value)
                if (row := run.rows.get((node.id, i))) is None or row[0] is not TaskState.COMPLETED
            ]
            what = f"an element of {items.what}"
            found: list[Finding] = []
            elements: list[_Value] = [_Stored(item, what) for item in open_items[:MAX_ELEMENTS]]
            for stored in elements or [None]:
                found += [
                    f for f in self._task(node.id, "map", node.task, [stored]) if f not in found
                ]
            return found
        if isinstance(items, _Later):
            element = _Later(_items(items.schema), f"each element of {items.what}")
            return self._task(node.id, "map", node.task, [element])
        return self._task(node.id, "map", node.task, [None])

    def _child(self, node: ChildNodeSpec, value: _Value) -> list[Finding]:
        def finding(reason: str) -> Finding:
            return Finding(node.id, "child", node.workflow, reason)

        child = self.app.workflows.get(node.workflow)
        if child is None:
            return [
                finding(
                    f"child workflow {node.workflow!r} is not in the new app: its tasks "
                    "have no worker"
                )
            ]
        prefix = f"child workflow {node.workflow!r} input"
        return [finding(r) for r in self._accepts(value, child.input_type, prefix)]

    def _event(self, node: EventNodeSpec, signal: JsonValue | _Missing) -> list[Finding]:
        def finding(reason: str) -> Finding:
            return Finding(node.id, "event", node.event, reason)

        if self.workflow is None:
            return []  # clients with the new app check no payload of this workflow
        models = self._event_models(node.event)
        if not models:
            return [
                finding(
                    f"event {node.event!r}: workflow {self.spec.name!r} of the new app no "
                    "longer waits for it, so a client with the new app refuses the signal"
                )
            ]
        prefix = f"event {node.event!r} payload"
        if not isinstance(signal, _Missing):
            payload: _Value = _Stored(signal, "the buffered signal")
        elif node.payload_schema:
            payload = _Later(node.payload_schema, "what the version's model accepted")
        else:
            return []
        return [finding(r) for model in models for r in self._accepts(payload, model, prefix)]

    # -- values against models ----------------------------------------------------------

    def _accepts(self, value: _Value, tp: object, prefix: str) -> list[str]:
        """Why ``value`` may be refused by a model of type ``tp``, each line prefixed."""
        if value is None:
            return []  # what produces it is reported already
        if isinstance(value, _Stored):
            try:
                self._adapter(tp).validate_python(value.value)
            except ValidationError as error:
                return [f"{prefix} refuses {value.what}: {_first_error(error)}"]
            return []
        key = (id(value.schema), id(tp))
        memo = self._reasons.get(key)
        if memo is None:
            memo = ((value.schema, tp), incompatibilities(value.schema, self._accepted_of(tp)))
            self._reasons[key] = memo
        return [f"{prefix} may refuse {value.what}: {reason}" for reason in memo[1]]

    def _adapter(self, tp: object) -> TypeAdapter[object]:
        memo = self._adapters.get(id(tp))
        if memo is None:
            memo = self._adapters[id(tp)] = (tp, adapter_for(tp))
        return memo[1]

    def _accepted_of(self, tp: object) -> dict[str, Any]:
        memo = self._accepted.get(id(tp))
        if memo is None:
            memo = self._accepted[id(tp)] = (tp, accepted_schema(tp))
        return memo[1]

    def _produced(self, tp: object) -> dict[str, Any]:
        memo = self._produced_memo.get(id(tp))
        if memo is None:
            memo = self._produced_memo[id(tp)] = (tp, produced_schema(tp))
        return memo[1]

    def _event_models(self, event: str) -> list[object]:
        if self.workflow is None:
            return []
        models: Mapping[str, list[object]] = self.workflow._events
        return list(models.get(event, ()))


def _inline(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema with its ``$defs`` dropped (a union of two keeps the first's defs only
    when they are inlined): good enough for a first_of's alternatives."""
    return {k: v for k, v in schema.items() if k != "$defs"}


def _items(schema: Mapping[str, Any]) -> dict[str, Any]:
    items = schema.get("items")
    defs = schema.get("$defs", {})
    if isinstance(items, Mapping):
        return {**items, "$defs": defs} if defs else dict(items)
    return {}


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "value"
    count = error.error_count()
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"{where}: {first['msg']}{more}"
