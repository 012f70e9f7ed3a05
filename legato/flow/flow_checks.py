"""What ``Flow``'s methods accept, checked while a workflow is built (pure): each check
raises ``SpecError`` naming the workflow, the argument and what to pass, so a mistake
surfaces at ``@workflow``, not as a ``TypeError`` from deep inside the builder or a
database error at deploy."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, cast

from pydantic import JsonValue, TypeAdapter
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from legato.flow.spec import SpecError
from legato.flow.tasks import TaskDefinition
from legato.limits import MAX_DURATION, json_problem


def node_list(workflow: str, what: str, nodes: object) -> Iterable[Any]:
    """``nodes`` (``after=``, a join's inputs) as an iterable; a lone node or a value is
    refused, since iterating it would not name the nodes meant."""
    if isinstance(nodes, str | bytes) or not isinstance(nodes, Iterable):
        raise SpecError(
            f"workflow {workflow!r}: {what} {nodes!r:.80} must be a list of nodes of this "
            "flow, e.g. after=[node]"
        )
    return nodes


def duration(workflow: str, what: str, value: object, *, allow_none: bool = False) -> None:
    """A ``timedelta`` from 0 to ``MAX_DURATION`` (or None when ``allow_none``)."""
    if value is None and allow_none:
        return
    if not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_DURATION:
        also = " (or None)" if allow_none else ""
        raise SpecError(
            f"workflow {workflow!r}: {what} is {value!r:.80}, not a timedelta from 0 to "
            f"{MAX_DURATION.days} days{also}"
        )


def event_adapter(workflow: str, event: str, model: object) -> TypeAdapter[Any]:
    """The adapter of the wait for ``event``'s payload type ``model``."""
    try:
        return TypeAdapter(cast("type[Any]", model))
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as error:
        raise SpecError(
            f"workflow {workflow!r}: the wait for {event!r} has payload type {model!r:.80}, "
            f"which is no type pydantic can read ({type(error).__name__}): pass a model "
            "class or a type such as str, int or dict[str, int]"
        ) from None


def one_model_per_event(
    workflow: str, event: str, model: object, earlier: list[object] | None
) -> None:
    """A signal name's payload is checked against one type: a second wait for the
    same event with another type could never be signalled for both."""
    for other in earlier or ():
        if other != model:
            raise SpecError(
                f"workflow {workflow!r}: the event {event!r} is waited for with two payload "
                f"types, {getattr(other, '__name__', other)!s:.80} and "
                f"{getattr(model, '__name__', model)!s:.80}: wait for it with one type, or "
                "give the waits different event names"
            )


def storable(workflow: str, what: str, value: JsonValue) -> None:
    """A value kept in the workflow's spec (a wait's default, a switch case): storable
    JSON (no NaN or infinity), so the spec can be deployed."""
    problem = json_problem(value)
    if problem is not None:
        raise SpecError(f"workflow {workflow!r}: {what} is not storable JSON: {problem}")


def max_concurrency(workflow: str, value: object) -> None:
    """A map's ``max_concurrency``: None, or a whole number of at least 1."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(
            f"workflow {workflow!r}: map max_concurrency={value!r:.80} must be a whole "
            "number of at least 1, or None for no limit"
        )


def child_workflow(workflow: str, child: object) -> None:
    """What ``flow.child`` starts: a workflow made by ``@workflow``."""
    if not isinstance(getattr(child, "name", None), str) or not hasattr(child, "output_type"):
        raise SpecError(
            f"workflow {workflow!r}: flow.child() takes a workflow (made by @workflow), "
            f"not {child!r:.80}"
        )


def failure_handler(workflow: str, handler: object) -> None:
    """What ``flow.on_failure`` runs: a task of one input (the ``FailureInfo``)."""
    if not isinstance(handler, TaskDefinition) or handler.arity != 1:
        raise SpecError(
            f"workflow {workflow!r}: on_failure() takes a task of one input (the "
            f"FailureInfo), made by @task, not {handler!r:.80}"
        )
