"""The typed workflow builder: ``Flow``, ``Node[T]`` and ``Switch[V]``.

``@workflow`` compiles a builder function (legato.flow.definition); ``App`` collects
workflows (legato.flow.app).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from legato.flow import flow_checks as checks
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
from legato.flow.spec import FailureInfo as FailureInfo
from legato.flow.tasks import Task0, Task1, Task2, Task3, Task4, Task5, TaskDefinition

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
In = TypeVar("In")
Out_co = TypeVar("Out_co", covariant=True)
V = TypeVar("V")
E = TypeVar("E")
R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")


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


class Switch(Generic[V]):
    """Branches on a value of type ``V``: nodes built in ``with sw.case(v):`` run only on ``v``."""

    def __init__(self, flow: Flow[object], node_id: str, field: str | None) -> None:
        self._flow = flow
        self.node_id = node_id
        self.field = field
        self._labels: dict[str, JsonScalar] = {}
        self._has_default = False

    @contextmanager
    def case(self, value: V) -> Iterator[None]:
        """Nodes built in this block run only if the switched value equals ``value``."""
        raw = value.value if isinstance(value, enum.Enum) else value
        if not isinstance(raw, str | int | float | bool | None):
            raise SpecError(f"switch {self.node_id!r}: case value {value!r} is not a JSON scalar")
        checks.storable(self._flow.name, f"switch {self.node_id!r}: case value {raw!r}", raw)
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

    def __enter__(self) -> Switch[V]:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _spec(self, base: SwitchNodeSpec) -> SwitchNodeSpec:
        cases = tuple(CaseSpec(label=k, value=v) for k, v in self._labels.items())
        return base.model_copy(update={"cases": cases, "has_default": self._has_default})


class _Field:
    def __init__(self, name: str) -> None:
        self.name = name


class _FieldProbe:
    def __getattr__(self, name: str) -> _Field:
        return _Field(name)


def _case_label(value: JsonScalar) -> str:
    return "case:" + TypeAdapter[JsonScalar](JsonScalar).dump_json(value).decode()


class ChildWorkflow(Protocol[In, Out_co]):
    """What ``Flow.child`` needs of a workflow (``definition.Workflow``, built on this
    module, is one): its function's types are the child's input and output types."""

    @property
    def name(self) -> str: ...
    @property
    def output_type(self) -> object: ...
    @property
    def fn(self) -> Callable[[Flow[In]], Node[Out_co]]: ...


class Flow(Generic[In]):
    """The builder a workflow function receives; ``flow.input`` is the run's input."""

    def __init__(self, name: str, input_type: object) -> None:
        self.name = name
        self._nodes: list[NodeSpec] = []
        self._switches: dict[str, Switch[object]] = {}
        self._ids: set[str] = set()
        self._guards: list[GuardSpec] = []
        self._tasks: dict[str, TaskDefinition] = {}
        self._children: dict[str, ChildWorkflow[Any, Any]] = {}
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
        for node in checks.node_list(self.name, what, nodes):
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
        checks.duration(self.name, "the sleep duration", duration)
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
        adapter: TypeAdapter[E] = checks.event_adapter(self.name, event, model)
        checks.one_model_per_event(self.name, event, model, self._event_models.get(event))
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
            checks.storable(self.name, f"the default of the wait for {event!r}", default_json)
        what = f"the timeout of the wait for {event!r}"
        checks.duration(self.name, what, timeout, allow_none=True)
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

    @overload
    def switch(self, node: Node[T], field: None = ..., *, name: str | None = ...) -> Switch[T]: ...
    @overload
    def switch(
        self, node: Node[T], field: Callable[[T], V], *, name: str | None = ...
    ) -> Switch[V]: ...
    @overload
    def switch(self, node: Node[object], field: str, *, name: str | None = ...) -> Switch[Any]: ...
    def switch(
        self,
        node: Node[object],
        field: str | Callable[[Any], object] | None = None,
        *,
        name: str | None = None,
    ) -> Switch[Any]:
        """Branch on ``node``'s output, or one field of it; use ``with sw.case(value): ...``.

        ``field`` is a selector such as ``lambda o: o.status`` (mypy checks the field and
        the case values) or the field's name.
        """
        (ref,) = self._refs([node], "switch input")
        if callable(field):
            field = self._selected_field(node, field)
        if field is not None:
            tp = node.output_type
            fields = tp.model_fields if isinstance(tp, type) and issubclass(tp, BaseModel) else None
            if fields is None or field not in fields:
                raise SpecError(
                    f"workflow {self.name!r}: switch on {node.node_id!r}.{field}: "
                    f"the output type {getattr(tp, '__name__', tp)!r} has no field {field!r}"
                )
        node_id = self._new_id(name, f"switch-{node.node_id}")
        sw: Switch[Any] = Switch(self._erased(), node_id, field)
        self._switches[node_id] = sw
        self._add(SwitchNodeSpec(id=node_id, field=field, inputs=(ref,), guard=self._guard()))
        return sw

    def _selected_field(self, node: Node[object], selector: Callable[[Any], object]) -> str:
        # The selector is called once, on a probe that records the attribute it reads.
        try:
            picked = selector(_FieldProbe())
        except AttributeError:
            picked = None
        if not isinstance(picked, _Field):
            raise SpecError(
                f"workflow {self.name!r}: switch on {node.node_id!r}: the selector must read "
                f"one field of the output, like `lambda o: o.status`; got {selector!r}"
            )
        return picked.name

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
        items: Node[list[A1]],
        *,
        max_concurrency: int | None = None,
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[list[R]]:
        """Run ``task`` once per element of ``items``; the output is the results in order."""
        if not isinstance(task, TaskDefinition) or task.arity != 1:
            raise SpecError(f"workflow {self.name!r}: map needs a task with exactly one input")
        checks.max_concurrency(self.name, max_concurrency)
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
        workflow: ChildWorkflow[A1, R],
        input: Node[A1],
        *,
        name: str | None = None,
        after: Sequence[Node[object]] = (),
    ) -> Node[R]:
        """Start ``workflow`` as a child run with ``input``; completes with its output."""
        checks.child_workflow(self.name, workflow)
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
        checks.failure_handler(self.name, handler)
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
