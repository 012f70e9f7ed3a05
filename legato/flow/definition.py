"""Compiled workflows: ``WorkflowDefinition`` (untyped), ``Workflow[In, Out]`` and ``@workflow``."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from pydantic import JsonValue, ValidationError

from legato.flow.builder import Flow, Node
from legato.flow.spec import SpecError, WorkflowSpec
from legato.flow.tasks import TaskDefinition, adapter_for

In = TypeVar("In")
Out = TypeVar("Out")


class InputValidationError(ValueError):
    """A run input, event payload or output that does not fit its declared type."""


class UnknownEventError(LookupError):
    """A signal for an event no wait of the workflow declares."""


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
