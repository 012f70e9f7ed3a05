"""Compiled workflows: ``WorkflowDefinition`` (untyped), ``Workflow[In, Out]`` and ``@workflow``."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Generic, TypeVar

from pydantic import JsonValue, TypeAdapter, ValidationError

from legato.errors import InvalidSchedule
from legato.flow.builder import Flow, Node
from legato.flow.schedules import Schedule
from legato.flow.spec import SpecError, WorkflowSpec
from legato.flow.tasks import TaskDefinition, adapter_for
from legato.limits import MAX_DURATION, check_name
from legato.schema.enums import CatchUp

In = TypeVar("In")
Out = TypeVar("Out")


class InputValidationError(ValueError):
    """A run input, event payload or output that does not fit its declared type;
    ``problems`` names each field that does not (its dotted path, ``(input)`` for the
    value itself) and why, as pydantic found them."""

    def __init__(self, message: str, problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


def _problems(error: ValidationError) -> tuple[tuple[str, str], ...]:
    return tuple(
        (".".join(str(part) for part in found["loc"]) or "(input)", found["msg"])
        for found in error.errors()
    )


class UnknownEventError(LookupError):
    """A signal for an event no wait of the workflow declares."""


class WorkflowDefinition:
    """A compiled workflow, untyped view: what ``App`` and the runtime hold.

    ``name``, ``spec`` (the compiled :class:`WorkflowSpec`), ``input_type`` and
    ``output_type``, the ``tasks`` and ``children`` it uses, and validation of
    inputs, event payloads and outputs.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., object],
        execution_timeout: timedelta | None = None,
    ) -> None:
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
        if execution_timeout is not None:
            self.spec = self.spec.model_copy(
                update={"execution_timeout": _timeout_seconds(name, execution_timeout)}
            )
        # Declared with Workflow.schedule; deploying the workflow deploys exactly these.
        self.schedules: dict[str, Schedule] = {}
        self.tasks: Mapping[str, TaskDefinition] = dict(flow._tasks)
        # Flow.child is given Workflow instances; the builder sees them as ChildWorkflow.
        self.children: Mapping[str, WorkflowDefinition] = {
            child: typing.cast(WorkflowDefinition, wf) for child, wf in flow._children.items()
        }
        self._events: Mapping[str, list[object]] = dict(flow._event_models)
        # Each event's adapters, built at its first signal (a signal is a hot path).
        self._event_adapters: dict[str, list[TypeAdapter[object]]] = {}
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
            raise InputValidationError(
                f"workflow {self.name!r}: invalid input: {exc}", _problems(exc)
            ) from exc
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
        adapters = self._event_adapters.get(event)
        if adapters is None:
            adapters = self._event_adapters[event] = [adapter_for(model) for model in models]
        dumped: JsonValue = None
        for adapter in adapters:
            try:
                dumped = adapter.dump_python(adapter.validate_python(payload), mode="json")
            except ValidationError as exc:
                raise InputValidationError(
                    f"workflow {self.name!r}: invalid payload for event {event!r}: {exc}"
                ) from exc
        return dumped

    def __repr__(self) -> str:
        return f"<workflow {self.name!r}>"


def _timeout_seconds(name: str, value: object) -> float:
    if not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_DURATION:
        raise SpecError(
            f"workflow {name!r}: execution_timeout must be a positive timedelta of at most "
            f"{MAX_DURATION.days} days, e.g. timedelta(hours=1); got {value!r}"
        )
    return value.total_seconds()


class Workflow(WorkflowDefinition, Generic[In, Out]):
    """A compiled workflow with its input and output types, made by ``@workflow``."""

    def __init__(
        self,
        name: str,
        fn: Callable[[Flow[In]], Node[Out]],
        execution_timeout: timedelta | None = None,
    ) -> None:
        super().__init__(name, fn, execution_timeout)
        self.fn = fn

    def schedule(
        self,
        name: str,
        *,
        input: In,
        cron: str | None = None,
        every: timedelta | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp | str = CatchUp.SKIP,
        max_catch_up: int = 100,
        grace: timedelta = timedelta(minutes=1),
    ) -> Schedule:
        """Start a run of this workflow with ``input`` on every tick of ``cron`` (in
        ``timezone``) or every ``every``; deployed with the workflow. Raises
        ``InvalidSchedule`` naming the bad value. See docs/flows.md, "Schedules"."""
        check_name("schedule name", name, InvalidSchedule)
        if name in self.schedules:
            raise InvalidSchedule(f"workflow {self.name!r} already has a schedule {name!r}")
        try:
            payload = self.validate_input(input)
        except InputValidationError as exc:
            raise InvalidSchedule(f"schedule {name!r}: {exc}") from None
        declared = Schedule.declare(
            name,
            self.name,
            payload,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
            max_catch_up=max_catch_up,
            grace=grace,
        )
        self.schedules[name] = declared
        return declared

    def parse_output(self, value: JsonValue) -> Out:
        """Decode a run's JSON output into the workflow's output type."""
        # The adapter was built from this workflow's ``Node[Out]`` return annotation.
        return typing.cast(Out, super().parse_output(value))


class _WorkflowDecorator:
    def __init__(self, name: str, execution_timeout: timedelta | None) -> None:
        self.name = name
        self.execution_timeout = execution_timeout

    def __call__(self, fn: Callable[[Flow[In]], Node[Out]]) -> Workflow[In, Out]:
        return Workflow(self.name, fn, self.execution_timeout)


def workflow(name: str, *, execution_timeout: timedelta | None = None) -> _WorkflowDecorator:
    """Compile ``(flow: Flow[In]) -> Node[Out]`` into a :class:`Workflow` named ``name``.

    ``execution_timeout`` bounds a run: past it, pending work is cancelled and the run
    finishes ``TIMED_OUT`` (docs/flows.md, "Run timeout").
    """
    if not isinstance(name, str) or not name:
        raise SpecError(f"a workflow needs a non-empty name, a str: got {name!r}")
    if execution_timeout is not None:
        _timeout_seconds(name, execution_timeout)
    return _WorkflowDecorator(name, execution_timeout)
