"""Task definitions: typed async functions registered by name.

``@task(...)`` turns ``async def f(ctx: TaskContext, a: A, b: B) -> R`` into a
``Task2[A, B, R]``: a :class:`TaskDefinition` whose arity and parameter types
mypy checks at every ``flow.run(f, node_a, node_b)``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar, overload

from pydantic import JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from legato.context import TaskCancelled, TaskContext
from legato.errors import FairShareKeyError, InvalidOutput
from legato.errors import TaskDefinitionError as TaskDefinitionError
from legato.flow.fair_share import FairShare
from legato.flow.spec import TaskSpec, TimeoutSpec
from legato.flow.task_options import MAX_LIMIT, check_key_arity, is_int

# Re-exported: they were declared here first, and users import them from here.
from legato.flow.task_options import Cache as Cache
from legato.flow.task_options import Concurrency as Concurrency
from legato.flow.task_options import RateLimit as RateLimit
from legato.flow.task_options import Retry as Retry
from legato.limits import (
    MAX_PRIORITY,
    check_name,
    check_timeout,
)

R_co = TypeVar("R_co", covariant=True)
A1_contra = TypeVar("A1_contra", contravariant=True)
A2_contra = TypeVar("A2_contra", contravariant=True)
A3_contra = TypeVar("A3_contra", contravariant=True)
A4_contra = TypeVar("A4_contra", contravariant=True)
A5_contra = TypeVar("A5_contra", contravariant=True)
R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")


class TaskArgumentsError(ValueError):
    """The JSON arguments of an attempt do not fit the task's parameter types."""


def _check_transactional(label: str, transactional: object, limit: timedelta | None) -> bool:
    if not isinstance(transactional, bool):
        raise TaskDefinitionError(f"{label}: transactional={transactional!r} must be True or False")
    if transactional and limit is None:
        # The attempt holds a connection and the row locks of its writes until it
        # returns: an unbounded body would hold them for ever.
        raise TaskDefinitionError(
            f"{label}: transactional=True needs start_to_close (e.g. "
            "start_to_close=timedelta(seconds=10)), which bounds how long its transaction "
            "holds a connection and row locks"
        )
    return transactional


def adapter_for(tp: object) -> TypeAdapter[object]:
    """A TypeAdapter for a runtime annotation (a class, ``list[X]``, a union...)."""
    # Annotations read at runtime are plain objects; pydantic validates them itself.
    return TypeAdapter(typing.cast("type[object]", tp))


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


class TaskDefinition:
    """A registered task: what the worker calls and what the spec references by name."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[object]],
        *,
        name: str,
        queue: str,
        priority: int,
        retry: Retry,
        schedule_to_start: timedelta | None,
        start_to_close: timedelta | None,
        heartbeat: timedelta | None,
        concurrency: Concurrency | None = None,
        rate_limit: RateLimit | None = None,
        cache: Cache | None = None,
        transactional: bool = False,
        fair_share: FairShare | None = None,
    ) -> None:
        label = f"task {getattr(fn, '__qualname__', repr(fn))}"
        self.fn = fn
        self.param_types, self.return_type = _inspect_task(fn)
        self.name = check_name(f"{label}: name", name, TaskDefinitionError)
        self.queue = check_name(f"{label}: queue", queue, TaskDefinitionError)
        if not is_int(priority) or abs(priority) > MAX_PRIORITY:
            raise TaskDefinitionError(
                f"{label}: priority {priority!r} must be an int between "
                f"-{MAX_PRIORITY} and {MAX_PRIORITY}"
            )
        self.priority = priority
        if not isinstance(retry, Retry):
            raise TaskDefinitionError(f"{label}: retry={retry!r} must be a legato.Retry")
        self.retry = retry
        self.schedule_to_start = check_timeout(
            f"{label}: schedule_to_start", schedule_to_start, TaskDefinitionError
        )
        self.start_to_close = check_timeout(
            f"{label}: start_to_close", start_to_close, TaskDefinitionError
        )
        self.heartbeat = check_timeout(f"{label}: heartbeat", heartbeat, TaskDefinitionError)
        for option, value, kind in (
            ("concurrency", concurrency, Concurrency),
            ("rate_limit", rate_limit, RateLimit),
            ("cache", cache, Cache),
            ("fair_share", fair_share, FairShare),
        ):
            if value is not None and not isinstance(value, kind):
                raise TaskDefinitionError(
                    f"{label}: {option}={value!r} must be a legato.{kind.__name__} or None"
                )
            if value is not None:
                check_key_arity(label, value, len(self.param_types))
        self.concurrency = concurrency
        self.rate_limit = rate_limit
        self.cache = cache
        self.fair_share = fair_share
        self.transactional = _check_transactional(label, transactional, self.start_to_close)
        self._params = tuple(adapter_for(t) for t in self.param_types)
        self._result = adapter_for(self.return_type)
        self.spec = TaskSpec(
            name=name,
            queue=queue,
            priority=priority,
            retry=retry.to_spec(),
            timeouts=TimeoutSpec(
                schedule_to_start=_seconds(schedule_to_start),
                start_to_close=_seconds(start_to_close),
                heartbeat=_seconds(heartbeat),
            ),
        )

    @property
    def arity(self) -> int:
        """Number of parameters after the context."""
        return len(self.param_types)

    def parse_args(self, args: JsonValue) -> list[object]:
        """Validate the JSON argument list into the parameter types."""
        if not isinstance(args, list) or len(args) != self.arity:
            raise TaskArgumentsError(
                f"task {self.name!r} takes {self.arity} argument(s) as a JSON list, got {args!r}"
            )
        try:
            pairs = zip(self._params, args, strict=True)
            return [adapter.validate_python(arg) for adapter, arg in pairs]
        except ValueError as exc:
            raise TaskArgumentsError(f"task {self.name!r}: invalid arguments: {exc}") from exc

    def key_of(self, key: Callable[..., object] | None, args: JsonValue) -> str:
        """The limit key of an attempt with JSON ``args``: ``str(key(*inputs))``, or ``""``
        without ``key``. Inputs that do not parse, or a ``key`` that raises, give ``""``:
        such attempts share one key rather than escape the limit."""
        if key is None:
            return ""
        try:
            return str(key(*self.parse_args(args)))
        except Exception:
            return ""

    def cache_key(self, args: JsonValue) -> str | None:
        """The output-cache key of an attempt with JSON ``args``, or None when the task
        is not cached: ``str(cache.key(*inputs))``, else a SHA-256 of the canonical JSON
        of the inputs."""
        if self.cache is None:
            return None
        if self.cache.key is not None:
            return str(self.cache.key(*self.parse_args(args)))
        canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def dump_result(self, value: object) -> JsonValue:
        """Serialise a return value to JSON: a value of the declared return type as it is;
        another (a dict for a model, say) validated into that type first, or
        ``InvalidOutput`` naming the task, its return type and what it returned."""
        try:
            dumped: JsonValue = self._result.dump_python(value, mode="json", warnings="error")
        except PydanticSerializationError:
            try:
                fitted = self._result.validate_python(value)
            except ValidationError as error:
                returned = f"{type(value).__name__} {repr(value)[:80]}"
                declared = getattr(self.return_type, "__name__", repr(self.return_type))
                raise InvalidOutput(
                    f"task {self.name!r} returned {returned}, which is not its declared return "
                    f"type {declared}: {error.error_count()} problem(s), first: "
                    f"{error.errors()[0]['msg']}; return a {declared}"
                ) from None
            dumped = self._result.dump_python(fitted, mode="json")
        return dumped

    async def invoke(self, ctx: TaskContext, args: JsonValue) -> JsonValue:
        """Validate ``args`` (a JSON list), call the function, return its result as JSON."""
        values = self.parse_args(args)
        if self.fair_share is not None:
            # The decider enqueued an attempt whose key it could not compute as unkeyed:
            # it fails here, in its history, not in the decider's loop.
            self.fair_share.of(self.name, values)
        result = await self.fn(ctx, *values)
        return self.dump_result(result)

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether a failed attempt that raised ``exc`` may be retried (budget permitting)."""
        if isinstance(exc, TaskCancelled | TaskArgumentsError | FairShareKeyError | InvalidOutput):
            return False
        if isinstance(exc, self.retry.dont_retry_on):
            return False
        return isinstance(exc, self.retry.retry_on)

    def __repr__(self) -> str:
        return f"<task {self.name!r} queue={self.queue!r}>"


class Task0(TaskDefinition, Generic[R_co]):
    """A task taking only the context."""


class Task1(TaskDefinition, Generic[A1_contra, R_co]):
    """A task taking one input."""


class Task2(TaskDefinition, Generic[A1_contra, A2_contra, R_co]):
    """A task taking two inputs."""


class Task3(TaskDefinition, Generic[A1_contra, A2_contra, A3_contra, R_co]):
    """A task taking three inputs."""


class Task4(TaskDefinition, Generic[A1_contra, A2_contra, A3_contra, A4_contra, R_co]):
    """A task taking four inputs."""


class Task5(TaskDefinition, Generic[A1_contra, A2_contra, A3_contra, A4_contra, A5_contra, R_co]):
    """A task taking five inputs."""


_CLASSES: Sequence[type[TaskDefinition]] = (Task0, Task1, Task2, Task3, Task4, Task5)


def _inspect_task(fn: Callable[..., object]) -> tuple[tuple[object, ...], object]:
    label = getattr(fn, "__qualname__", repr(fn))
    if not inspect.iscoroutinefunction(fn):
        raise TaskDefinitionError(f"task {label}: must be an async function")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise TaskDefinitionError(f"task {label}: cannot resolve its annotations: {exc}") from exc
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TaskDefinitionError(f"task {label}: first parameter must be the TaskContext")
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
            raise TaskDefinitionError(f"task {label}: parameter {p.name!r} must be positional")
    types: list[object] = []
    for p in params[1:]:
        if p.name not in hints or hints[p.name] is typing.Any:
            raise TaskDefinitionError(f"task {label}: parameter {p.name!r} needs a type annotation")
        types.append(hints[p.name])
    if "return" not in hints or hints["return"] is typing.Any:
        raise TaskDefinitionError(f"task {label}: needs a return type annotation")
    checks = [(f"parameter {p.name!r}", t) for p, t in zip(params[1:], types, strict=True)]
    for what, tp in [*checks, ("return type", hints["return"])]:
        try:
            adapter_for(tp).json_schema(mode="serialization")
        except Exception as exc:
            raise TaskDefinitionError(
                f"task {label}: {what} {tp!r} cannot be serialised to JSON: {exc}"
            ) from exc
    if len(types) >= len(_CLASSES):
        raise TaskDefinitionError(
            f"task {label}: at most {len(_CLASSES) - 1} inputs are supported; pass a model"
        )
    return tuple(types), hints["return"]


@dataclass(frozen=True)
class _TaskDecorator:
    name: str | None
    queue: str
    retry: Retry
    schedule_to_start: timedelta | None
    start_to_close: timedelta | None
    heartbeat: timedelta | None
    priority: int
    concurrency: Concurrency | None = None
    rate_limit: RateLimit | None = None
    cache: Cache | None = None
    transactional: bool = False
    fair_share: FairShare | None = None

    @overload
    def __call__(self, fn: Callable[[TaskContext], Awaitable[R]], /) -> Task0[R]: ...
    @overload
    def __call__(self, fn: Callable[[TaskContext, A1], Awaitable[R]], /) -> Task1[A1, R]: ...
    @overload
    def __call__(
        self, fn: Callable[[TaskContext, A1, A2], Awaitable[R]], /
    ) -> Task2[A1, A2, R]: ...
    @overload
    def __call__(
        self, fn: Callable[[TaskContext, A1, A2, A3], Awaitable[R]], /
    ) -> Task3[A1, A2, A3, R]: ...
    @overload
    def __call__(
        self, fn: Callable[[TaskContext, A1, A2, A3, A4], Awaitable[R]], /
    ) -> Task4[A1, A2, A3, A4, R]: ...
    @overload
    def __call__(
        self, fn: Callable[[TaskContext, A1, A2, A3, A4, A5], Awaitable[R]], /
    ) -> Task5[A1, A2, A3, A4, A5, R]: ...
    def __call__(self, fn: Callable[..., Awaitable[object]], /) -> TaskDefinition:
        name = self.name if self.name is not None else getattr(fn, "__name__", "")
        # Arity decides the class; the overloads above give mypy the precise type.
        try:
            arity = len(inspect.signature(fn).parameters) - 1
        except (TypeError, ValueError):
            arity = -1  # not a function: TaskDefinition says so, naming it
        cls = _CLASSES[arity] if 0 <= arity < len(_CLASSES) else TaskDefinition
        return cls(
            fn,
            name=name,
            queue=self.queue,
            priority=self.priority,
            retry=self.retry,
            schedule_to_start=self.schedule_to_start,
            start_to_close=self.start_to_close,
            heartbeat=self.heartbeat,
            concurrency=self.concurrency,
            rate_limit=self.rate_limit,
            cache=self.cache,
            transactional=self.transactional,
            fair_share=self.fair_share,
        )


def task(
    *,
    name: str | None = None,
    queue: str = "default",
    retry: Retry | None = None,
    schedule_to_start: timedelta | None = None,
    start_to_close: timedelta | None = None,
    heartbeat: timedelta | None = None,
    priority: int = 0,
    concurrency: Concurrency | None = None,
    rate_limit: RateLimit | None = None,
    cache: Cache | None = None,
    transactional: bool = False,
    fair_share: FairShare | None = None,
) -> _TaskDecorator:
    """Register an async function ``(ctx: TaskContext, *inputs) -> R`` as a task.

    Every parameter after the context and the return type must be annotated
    with a pydantic model or a JSON-able type; otherwise, or when an option is out
    of range (a name or queue breaking the name rules, a timeout that is not a
    positive ``timedelta``), this raises :class:`TaskDefinitionError` naming the
    function and the option.

    ``concurrency``, ``rate_limit`` and ``cache`` are enforced by the workers (see
    docs/flows.md): they change when an attempt starts, or whether it runs at all,
    never the workflow's spec. ``fair_share`` shares the task's queue between the values
    of its key (docs/flows.md, "Fair share per key").
    ``transactional=True`` (which needs ``start_to_close``) runs the body inside a
    transaction on Legato's database, reachable as ``ctx.connection``; the worker
    applies the attempt's completion in that transaction, so the body's writes and its
    completion commit together or not at all.
    """
    return _TaskDecorator(
        name=name,
        queue=queue,
        retry=retry if retry is not None else Retry(),
        schedule_to_start=schedule_to_start,
        start_to_close=start_to_close,
        heartbeat=heartbeat,
        priority=priority,
        concurrency=concurrency,
        rate_limit=rate_limit,
        cache=cache,
        transactional=transactional,
        fair_share=fair_share,
    )


def concurrency_name(definition: TaskDefinition) -> str | None:
    """The limit a task's attempts count against (its ``Concurrency``), or None."""
    limit = definition.concurrency
    return None if limit is None else f"task:{limit.name or definition.name}"


def rate_name(definition: TaskDefinition) -> str | None:
    """The bucket family a task's attempts draw from (its ``RateLimit``), or None."""
    limit = definition.rate_limit
    return None if limit is None else f"task:{limit.name or definition.name}"


def queue_limit_name(queue: str) -> str:
    """The limit every attempt of ``queue`` counts against when the queue has one."""
    return f"queue:{queue}"


def check_queue_limits(limits: Mapping[str, int]) -> dict[str, int]:
    """``App(queue_limits=...)`` validated: queue names to ints >= 1."""
    if not isinstance(limits, Mapping):
        raise TaskDefinitionError(f"queue_limits={limits!r} must be a mapping of queue to int")
    for queue, limit in limits.items():
        check_name("queue_limits: queue", queue, TaskDefinitionError)
        if not is_int(limit) or not 1 <= limit <= MAX_LIMIT:
            raise TaskDefinitionError(
                f"queue_limits[{queue!r}]={limit!r}: a queue limit must be an int from 1 to "
                f"{MAX_LIMIT}"
            )
    return dict(limits)


def check_shared_limits(definitions: Iterable[TaskDefinition]) -> None:
    """Tasks sharing a limit by name must agree on its size."""
    sizes: dict[str, tuple[str, object]] = {}
    for definition in definitions:
        for name, size in (
            (concurrency_name(definition), definition.concurrency and definition.concurrency.limit),
            (
                rate_name(definition) and f"rate {rate_name(definition)}",
                definition.rate_limit and (definition.rate_limit.count, definition.rate_limit.per),
            ),
        ):
            if name is None:
                continue
            seen = sizes.setdefault(name, (definition.name, size))
            if seen[1] != size:
                raise TaskDefinitionError(
                    f"tasks {seen[0]!r} and {definition.name!r} share the limit {name!r} with "
                    f"different sizes ({seen[1]!r} and {size!r}): give both the same size"
                )
