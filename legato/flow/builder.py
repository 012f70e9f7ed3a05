"""The typed workflow builder: ``Flow``, ``Node[T]``, ``@workflow`` and ``App``."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Generic, TypeVar, overload

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from legato.flow.spec import (
    DEFAULT_CASE,
    INPUT_NODE_ID,
    CaseSpec,
    ChildNodeSpec,
    EventNodeSpec,
    FirstOfNodeSpec,
    GuardSpec,
    JsonScalar,
    MapNodeSpec,
    NodeSpec,
    SleepNodeSpec,
    SpecError,
    SwitchNodeSpec,
    TaskNodeSpec,
    WorkflowSpec,
)
from legato.flow.spec import (
    FailureInfo as FailureInfo,
)
from legato.flow.tasks import Task0, Task1, Task2, Task3, Task4, Task5, TaskDefinition, adapter_for
from legato.limits import check_type

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
In = TypeVar("In")
Out = TypeVar("Out")
E = TypeVar("E")
R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")


class InputValidationError(ValueError):
    """A run input, event payload or output that does not fit its declared type."""


class UnknownEventError(LookupError):
    """A signal for an event no wait of the workflow declares."""


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING = _Missing.MISSING


class Node(Generic[T_co]):
    """A handle to a node's future output. Only the flow that made it may use it."""

    def __init__(self, flow: Flow[object], node_id: str, output_type: object) -> None:
        self._flow = flow
        self.node_id = node_id
        self.output_type = output_type

    def __repr__(self) -> str:
        return f"Node({self.node_id!r})"


class Switch:
    """Branches on one value; nodes built inside ``with switch.case(v):`` run only on ``v``."""

    def __init__(self, flow: Flow[object], node_id: str, field: str | None) -> None:
        self._flow = flow
        self.node_id = node_id
        self.field = field
        self._labels: dict[str, JsonScalar] = {}
        self._has_default = False

    @contextmanager
    def case(self, value: JsonScalar | enum.Enum) -> Iterator[None]:
        """Nodes built in this block run only if the switched value equals ``value``."""
        raw = value.value if isinstance(value, enum.Enum) else value
        if not isinstance(raw, str | int | float | bool | None):
            raise SpecError(f"switch {self.node_id!r}: case value {value!r} is not a JSON scalar")
        label = _case_label(raw)
        if label in self._labels:
            raise SpecError(f"switch {self.node_id!r}: duplicate case {raw!r}")
        self._labels[label] = raw
        with self._flow._guarded(GuardSpec(switch=self.node_id, case=label)):
            yield

    @contextmanager
    def default(self) -> Iterator[None]:
        """Nodes built in this block run if no case matched."""
        if self._has_default:
            raise SpecError(f"switch {self.node_id!r}: duplicate default case")
        self._has_default = True
        with self._flow._guarded(GuardSpec(switch=self.node_id, case=DEFAULT_CASE)):
            yield

    def __enter__(self) -> Switch:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _spec(self, base: SwitchNodeSpec) -> SwitchNodeSpec:
        cases = tuple(CaseSpec(label=k, value=v) for k, v in self._labels.items())
        return base.model_copy(update={"cases": cases, "has_default": self._has_default})


def _case_label(value: JsonScalar) -> str:
    return "case:" + TypeAdapter[JsonScalar](JsonScalar).dump_json(value).decode()


class Flow(Generic[In]):
    """The builder a workflow function receives; ``flow.input`` is the run's input."""

    def __init__(self, name: str, input_type: object) -> None:
        self.name = name
        self._nodes: list[NodeSpec] = []
        self._switches: dict[str, Switch] = {}
        self._ids: set[str] = set()
        self._guards: list[GuardSpec] = []
        self._tasks: dict[str, TaskDefinition] = {}
        self._children: dict[str, WorkflowDefinition] = {}
        self._on_failure: TaskDefinition | None = None
        self._event_models: dict[str, list[object]] = {}
        self._input: Node[In] = Node(self._erased(), INPUT_NODE_ID, input_type)

    def _erased(self) -> Flow[object]:
        # Flow is invariant in In; handles only need the identity of their flow.
        return typing.cast("Flow[object]", self)

    @property
    def input(self) -> Node[In]:
        """The run's input, validated against the workflow's input type."""
        return self._input

    # -- helpers -----------------------------------------------------------------

    @contextmanager
    def _guarded(self, guard: GuardSpec) -> Iterator[None]:
        self._guards.append(guard)
        try:
            yield
        finally:
            self._guards.pop()

    def _new_id(self, name: str | None, base: str) -> str:
        if name is not None:
            if name in self._ids:
                raise SpecError(f"workflow {self.name!r}: duplicate node name {name!r}")
            if not name or name.startswith("$"):
                raise SpecError(f"workflow {self.name!r}: invalid node name {name!r}")
            return name
        candidate, n = base, 1
        while candidate in self._ids:
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def _refs(self, nodes: Iterable[Node[object]], what: str) -> tuple[str, ...]:
        refs = []
        for node in nodes:
            if not isinstance(node, Node) or node._flow is not self._erased():
                raise SpecError(
                    f"workflow {self.name!r}: {what} {node!r} is not a node of this flow"
                )
            refs.append(node.node_id)
        return tuple(refs)

    def _add(self, spec: NodeSpec) -> None:
        self._ids.add(spec.id)
        self._nodes.append(spec)

    def _register(self, t: TaskDefinition) -> None:
        existing = self._tasks.get(t.name)
        if existing is not None and existing is not t:
            raise SpecError(f"workflow {self.name!r}: two different tasks are named {t.name!r}")
        self._tasks[t.name] = t

    def _guard(self) -> GuardSpec | None:
        return self._guards[-1] if self._guards else None

    # -- node kinds --------------------------------------------------------------

    @overload
    def run(
        self, task: Task0[R], /, *, name: str | None = ..., after: Sequence[Node[object]] = ...
    ) -> Node[R]: ...
    @overload
    def run(
        self,
        task: Task1[A1, R],
        a1: Node[A1],
        /,
        *,
        name: str | None = ...,
        after: Sequence[Node[object]] = ...,
    ) -> Node[R]: ...
    @overload
    def run(
        self,
        task: Task2[A1, A2, R],
        a1: Node[A1],
        a2: Node[A2],
        /,
        *,
        name: str | None = ...,
        after: Sequence[Node[object]] = ...,
    ) -> Node[R]: ...
    @overload
    def run(
        self,
        task: Task3[A1, A2, A3, R],
        a1: Node[A1],
        a2: Node[A2],
        a3: Node[A3],
        /,
        *,
        name: str | None = ...,
        after: Sequence[Node[object]] = ...,
    ) -> Node[R]: ...
    @overload
    def run(
        self,
        task: Task4[A1, A2, A3, A4, R],
        a1: Node[A1],
        a2: Node[A2],
        a3: Node[A3],
        a4: Node[A4],
        /,
        *,
        name: str | None = ...,
        after: Sequence[Node[object]] = ...,
    ) -> Node[R]: ...
    @overload
    def run(
        self,
        task: Task5[A1, A2, A3, A4, A5, R],
        a1: Node[A1],
        a2: Node[A2],
        a3: Node[A3],
        a4: Node[A4],
        a5: Node[A5],
        /,
        *,
        name: str | None = ...,
        after: Sequence[Node[object]] = ...,
    ) -> Node[R]: ...
    def run(
        self,
        task: TaskDefinition,
        /,
        *inputs: Node[object],
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[object]:
        """Run ``task`` once its inputs (the join) and ``after`` nodes have completed."""
        if not isinstance(task, TaskDefinition):
            raise SpecError(f"workflow {self.name!r}: {task!r} is not a task")
        if len(inputs) != task.arity:
            raise SpecError(
                f"workflow {self.name!r}: task {task.name!r} takes {task.arity} input(s), "
                f"got {len(inputs)}"
            )
        node_id = self._new_id(name, task.name)
        spec = TaskNodeSpec(
            id=node_id,
            task=task.name,
            inputs=self._refs(inputs, "input"),
            after=self._refs(after, "after"),
            guard=self._guard(),
        )
        self._register(task)
        self._add(spec)
        return Node(self._erased(), node_id, task.return_type)

    def sleep(
        self, duration: timedelta, *, name: str | None = None, after: Sequence[Node[object]] = ()
    ) -> Node[None]:
        """Complete ``duration`` after the ``after`` nodes completed (or after the start)."""
        if duration < timedelta(0):
            raise SpecError(f"workflow {self.name!r}: sleep duration must not be negative")
        node_id = self._new_id(name, "sleep")
        self._add(
            SleepNodeSpec(
                id=node_id,
                seconds=duration.total_seconds(),
                after=self._refs(after, "after"),
                guard=self._guard(),
            )
        )
        return Node(self._erased(), node_id, type(None))

    def wait_for_event(
        self,
        event: str,
        model: type[E],
        *,
        timeout: timedelta | None = None,
        default: E | _Missing = MISSING,
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[E]:
        """Wait for the signal ``event`` (buffered if sent earlier); its payload is the output.

        On ``timeout`` the node fails, or completes with ``default`` if one is given.
        """
        adapter = TypeAdapter[E](model)
        has_default = not isinstance(default, _Missing)
        default_json: JsonValue = None
        if not isinstance(default, _Missing):
            try:
                default_json = adapter.dump_python(adapter.validate_python(default), mode="json")
            except ValidationError as exc:
                raise SpecError(
                    f"workflow {self.name!r}: default of the wait for {event!r} "
                    f"is not a {getattr(model, '__name__', model)}: {exc}"
                ) from exc
        node_id = self._new_id(name, event)
        self._add(
            EventNodeSpec(
                id=node_id,
                event=event,
                timeout=None if timeout is None else timeout.total_seconds(),
                has_default=has_default,
                default=default_json,
                payload_schema=adapter.json_schema(),
                after=self._refs(after, "after"),
                guard=self._guard(),
            )
        )
        self._event_models.setdefault(event, []).append(model)
        return Node(self._erased(), node_id, model)

    def switch(
        self, node: Node[object], field: str | None = None, *, name: str | None = None
    ) -> Switch:
        """Branch on ``node``'s output (or its ``field``); use ``with sw.case(value): ...``."""
        (ref,) = self._refs([node], "switch input")
        if field is not None:
            tp = node.output_type
            fields = tp.model_fields if isinstance(tp, type) and issubclass(tp, BaseModel) else None
            if fields is None or field not in fields:
                raise SpecError(
                    f"workflow {self.name!r}: switch on {node.node_id!r}.{field}: "
                    f"the output type {getattr(tp, '__name__', tp)!r} has no field {field!r}"
                )
        node_id = self._new_id(name, f"switch-{node.node_id}")
        sw = Switch(self._erased(), node_id, field)
        self._switches[node_id] = sw
        self._add(SwitchNodeSpec(id=node_id, field=field, inputs=(ref,), guard=self._guard()))
        return sw

    def first_of(self, first: Node[T], /, *others: Node[T], name: str | None = None) -> Node[T]:
        """The output of the first input (in argument order) that completed; skips if all skip."""
        nodes = (first, *others)
        node_id = self._new_id(name, "first_of")
        self._add(
            FirstOfNodeSpec(id=node_id, inputs=self._refs(nodes, "input"), guard=self._guard())
        )
        return Node(self._erased(), node_id, first.output_type)

    def map(
        self,
        task: Task1[A1, R],
        items: Node[Sequence[A1]],
        *,
        max_concurrency: int | None = None,
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[list[R]]:
        """Run ``task`` once per element of ``items``; the output is the results in order."""
        if not isinstance(task, TaskDefinition) or task.arity != 1:
            raise SpecError(f"workflow {self.name!r}: map needs a task with exactly one input")
        if max_concurrency is not None and max_concurrency < 1:
            raise SpecError(f"workflow {self.name!r}: map max_concurrency must be >= 1")
        node_id = self._new_id(name, f"map-{task.name}")
        self._add(
            MapNodeSpec(
                id=node_id,
                task=task.name,
                max_concurrency=max_concurrency,
                inputs=self._refs([items], "map input"),
                after=self._refs(after, "after"),
                guard=self._guard(),
            )
        )
        self._register(task)
        return Node(self._erased(), node_id, types.GenericAlias(list, (task.return_type,)))

    def child(
        self,
        workflow: Workflow[A1, R],
        input: Node[A1],
        *,
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[R]:
        """Start ``workflow`` as a child run with ``input``; completes with its output."""
        node_id = self._new_id(name, f"child-{workflow.name}")
        self._add(
            ChildNodeSpec(
                id=node_id,
                workflow=workflow.name,
                inputs=self._refs([input], "child input"),
                after=self._refs(after, "after"),
                guard=self._guard(),
            )
        )
        self._children[workflow.name] = workflow
        return Node(self._erased(), node_id, workflow.output_type)

    def on_failure(self, handler: Task1[FailureInfo, object]) -> None:
        """Run ``handler`` with the :class:`FailureInfo` when a node fails for good."""
        if self._on_failure is not None:
            raise SpecError(f"workflow {self.name!r}: on_failure is already set")
        self._register(handler)
        self._on_failure = handler

    def _compile(self, output: Node[object]) -> WorkflowSpec:
        (out,) = self._refs([output], "returned value")
        nodes = [
            self._switches[n.id]._spec(n) if isinstance(n, SwitchNodeSpec) else n
            for n in self._nodes
        ]
        return WorkflowSpec(
            name=self.name,
            nodes=tuple(nodes),
            output=out,
            tasks={name: t.spec for name, t in sorted(self._tasks.items())},
            on_failure=None if self._on_failure is None else self._on_failure.name,
        )


class WorkflowDefinition:
    """A compiled workflow, untyped view: what ``App`` and the runtime hold.

    ``name``, ``spec`` (the compiled :class:`WorkflowSpec`), ``input_type`` and
    ``output_type``, the ``tasks`` and ``children`` it uses, and validation of
    inputs, event payloads and outputs.
    """

    def __init__(self, name: str, fn: Callable[..., object]) -> None:
        self.name = name
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:
            raise SpecError(f"workflow {name!r}: cannot resolve annotations: {exc}") from exc
        flow_hint = next((v for k, v in hints.items() if k != "return"), None)
        ret_hint = hints.get("return")
        if typing.get_origin(flow_hint) is not Flow or typing.get_origin(ret_hint) is not Node:
            raise SpecError(
                f"workflow {name!r}: annotate the function as (flow: Flow[In]) -> Node[Out]"
            )
        self.input_type: object = typing.get_args(flow_hint)[0]
        self.output_type: object = typing.get_args(ret_hint)[0]
        flow: Flow[object] = Flow(name, self.input_type)
        result = fn(flow)
        if not isinstance(result, Node):
            raise SpecError(f"workflow {name!r}: the function must return a node, got {result!r}")
        if not flow._nodes:
            raise SpecError(f"workflow {name!r} is empty: it has no nodes")
        self.spec: WorkflowSpec = flow._compile(result)
        self.tasks: Mapping[str, TaskDefinition] = dict(flow._tasks)
        self.children: Mapping[str, WorkflowDefinition] = dict(flow._children)
        self._events: Mapping[str, list[object]] = dict(flow._event_models)
        self._input = adapter_for(self.input_type)
        self._output = adapter_for(self.output_type)

    @property
    def spec_hash(self) -> str:
        return self.spec.spec_hash

    def validate_input(self, value: object) -> JsonValue:
        """Validate a run input (a model instance or JSON) and return it as JSON."""
        try:
            parsed = self._input.validate_python(value)
        except ValidationError as exc:
            raise InputValidationError(f"workflow {self.name!r}: invalid input: {exc}") from exc
        dumped: JsonValue = self._input.dump_python(parsed, mode="json")
        return dumped

    def parse_output(self, value: JsonValue) -> object:
        """Decode a run's JSON output into the workflow's output type."""
        try:
            return self._output.validate_python(value)
        except ValidationError as exc:
            raise InputValidationError(f"workflow {self.name!r}: invalid output: {exc}") from exc

    def validate_event(self, event: str, payload: object) -> JsonValue:
        """Validate a signal payload against every wait for ``event``; return it as JSON.

        Raises :class:`UnknownEventError` if the workflow never waits for ``event``
        and :class:`InputValidationError` if the payload fails a wait's model.
        """
        models = self._events.get(event)
        if not models:
            raise UnknownEventError(
                f"workflow {self.name!r} has no wait for event {event!r} "
                f"(it waits for: {sorted(self._events) or 'nothing'})"
            )
        dumped: JsonValue = None
        for model in models:
            adapter = adapter_for(model)
            try:
                dumped = adapter.dump_python(adapter.validate_python(payload), mode="json")
            except ValidationError as exc:
                raise InputValidationError(
                    f"workflow {self.name!r}: invalid payload for event {event!r}: {exc}"
                ) from exc
        return dumped

    def __repr__(self) -> str:
        return f"<workflow {self.name!r}>"


class Workflow(WorkflowDefinition, Generic[In, Out]):
    """A compiled workflow with its input and output types, made by ``@workflow``."""

    def __init__(self, name: str, fn: Callable[[Flow[In]], Node[Out]]) -> None:
        super().__init__(name, fn)
        self.fn = fn

    def parse_output(self, value: JsonValue) -> Out:
        """Decode a run's JSON output into the workflow's output type."""
        # The adapter was built from this workflow's ``Node[Out]`` return annotation.
        return typing.cast(Out, super().parse_output(value))


class _WorkflowDecorator:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, fn: Callable[[Flow[In]], Node[Out]]) -> Workflow[In, Out]:
        return Workflow(self.name, fn)


def workflow(name: str) -> _WorkflowDecorator:
    """Compile ``(flow: Flow[In]) -> Node[Out]`` into a :class:`Workflow` named ``name``."""
    if not name:
        raise SpecError("a workflow needs a non-empty name")
    return _WorkflowDecorator(name)


class App:
    """The workflows (and, collected from them, the tasks) a runtime serves.

    Child workflows are included. Two different workflows or tasks with one name
    are an error.
    """

    def __init__(self, workflows: Iterable[WorkflowDefinition] = ()) -> None:
        found: dict[str, WorkflowDefinition] = {}
        tasks: dict[str, TaskDefinition] = {}
        pending = list(workflows)
        while pending:
            wf = pending.pop(0)
            check_type("each workflow passed to App()", wf, WorkflowDefinition, SpecError)
            seen = found.get(wf.name)
            if seen is not None:
                if seen is not wf and seen.spec_hash != wf.spec_hash:
                    raise SpecError(f"two different workflows are named {wf.name!r}")
                continue
            found[wf.name] = wf
            for t in wf.tasks.values():
                other = tasks.get(t.name)
                if other is not None and other is not t:
                    raise SpecError(f"two different tasks are named {t.name!r}")
                tasks[t.name] = t
            pending.extend(wf.children.values())
        self.workflows: Mapping[str, WorkflowDefinition] = found
        self.tasks: Mapping[str, TaskDefinition] = tasks

    def workflow(self, name: str) -> WorkflowDefinition:
        try:
            return self.workflows[name]
        except KeyError:
            raise LookupError(
                f"unknown workflow {name!r}; known: {sorted(self.workflows)}"
            ) from None

    def task(self, name: str) -> TaskDefinition:
        try:
            return self.tasks[name]
        except KeyError:
            raise LookupError(f"unknown task {name!r}; known: {sorted(self.tasks)}") from None
