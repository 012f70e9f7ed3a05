"""Batch tasks: one body call for up to ``max_size`` queued attempts of a task.

``@batch_task(Batch(max_size=50, max_wait=timedelta(milliseconds=200)))`` turns
``async def f(ctx: BatchContext, items: list[A]) -> list[R]`` into a ``Task1[A, R]``: a
workflow runs it on one ``A`` like any task and gets one ``R``, and mypy checks that
wiring. A worker does not call the body per attempt: the attempts of the task it runs
at once join a batch, which is handed to one call when it holds ``max_size`` inputs, or
``max_wait`` after its first joined; output ``i`` is input ``i``'s. Each attempt keeps its
own lease, timeout, retries and history; a body that raises fails every attempt of the
batch (each retried by its policy), and one that returns a list of the wrong length
fails each with ``BatchOutputMismatch``, not retried.

Batches are per worker process and event loop (the attempts a worker claimed; a batch
is never larger than the worker's free slots, so give the worker a ``concurrency`` of
at least ``max_size``). The worker runs an attempt of a batch task as any other, through
``TaskDefinition.invoke``: this module is the whole of the batching.
"""

from __future__ import annotations

import asyncio
import typing
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

from pydantic import JsonValue

from legato.context import TaskContext
from legato.errors import BatchOutputMismatch, TaskDefinitionError
from legato.flow.task_options import Retry, is_int
from legato.flow.tasks import Task1, adapter_for

A = TypeVar("A")
R = TypeVar("R")

MAX_BATCH_SIZE = 1000
MAX_BATCH_WAIT = timedelta(minutes=10)


@dataclass(frozen=True)
class Batch:
    """Up to ``max_size`` inputs (1 to 1000) per body call; an attempt waits at most
    ``max_wait`` (0 to 10 minutes) for others to join its batch."""

    max_size: int
    max_wait: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not is_int(self.max_size) or not 1 <= self.max_size <= MAX_BATCH_SIZE:
            raise TaskDefinitionError(
                f"Batch(max_size={self.max_size!r}): max_size must be an int from 1 to "
                f"{MAX_BATCH_SIZE}"
            )
        if not isinstance(self.max_wait, timedelta) or not (
            timedelta(0) <= self.max_wait <= MAX_BATCH_WAIT
        ):
            raise TaskDefinitionError(
                f"Batch(max_wait={self.max_wait!r}): max_wait must be a timedelta from 0 to "
                f"{MAX_BATCH_WAIT}, e.g. timedelta(milliseconds=200)"
            )


@dataclass(frozen=True)
class BatchContext:
    """The context of a batch body: one ``TaskContext`` per input, in the inputs' order
    (``items[i].progress(...)`` reports for input ``i``'s attempt); ``heartbeat()``
    extends every attempt's lease."""

    items: tuple[TaskContext, ...]

    async def heartbeat(self) -> None:
        for ctx in self.items:
            await ctx.heartbeat()


BatchBody = Callable[[BatchContext, list[A]], Awaitable[list[R]]]


class BatchTask(Task1[A, R]):
    """A task whose attempts a worker runs in batches (``@batch_task``)."""

    def __init__(self, fn: BatchBody[A, R], batch: Batch, **options: typing.Any) -> None:
        super().__init__(fn, **options)
        label = f"batch task {getattr(fn, '__qualname__', repr(fn))}"
        if not isinstance(batch, Batch):
            raise TaskDefinitionError(f"{label}: batch={batch!r} must be a legato.Batch")
        if self.arity != 1:
            raise TaskDefinitionError(
                f"{label}: takes the context and one list of inputs, not {self.arity} "
                "parameters after the context: async def f(ctx: BatchContext, items: list[A])"
            )
        self.param_types = (
            _item_type(label, "its parameter after the context", self.param_types[0]),
        )
        self.return_type = _item_type(label, "its return type", self.return_type)
        self._params = (adapter_for(self.param_types[0]),)
        self._result = adapter_for(self.return_type)
        self.batch = batch
        self._collectors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Collector] = (
            weakref.WeakKeyDictionary()
        )

    async def invoke(self, ctx: TaskContext, args: JsonValue) -> JsonValue:
        """This attempt's output, from the batch it joins (its input checked first: a
        bad one fails only its attempt)."""
        (value,) = self.parse_args(args)
        loop = asyncio.get_running_loop()
        collector = self._collectors.get(loop)
        if collector is None:
            collector = self._collectors[loop] = _Collector(self)
        return await collector.submit(ctx, value)

    def is_retryable(self, exc: BaseException) -> bool:
        return not isinstance(exc, BatchOutputMismatch) and super().is_retryable(exc)

    async def run_batch(self, ctx: BatchContext, values: Sequence[object]) -> list[JsonValue]:
        """One body call: its outputs as JSON, one per input, or ``BatchOutputMismatch``."""
        outputs = await self.fn(ctx, list(values))
        if not isinstance(outputs, list) or len(outputs) != len(values):
            got = f"{len(outputs)} outputs" if isinstance(outputs, list) else repr(outputs)[:80]
            raise BatchOutputMismatch(
                f"batch task {self.name!r} returned {got} for {len(values)} inputs: return "
                "a list of one output per input, in the inputs' order"
            )
        return [self.dump_result(output) for output in outputs]


def _item_type(label: str, what: str, annotation: object) -> object:
    if typing.get_origin(annotation) is not list or len(typing.get_args(annotation)) != 1:
        raise TaskDefinitionError(
            f"{label}: {what} must be list[X] (one X per input), not {annotation!r}: "
            "declare it as async def f(ctx: BatchContext, items: list[A]) -> list[R]"
        )
    return typing.get_args(annotation)[0]


@dataclass
class _Waiting:
    ctx: TaskContext
    value: object
    output: asyncio.Future[JsonValue]


@dataclass
class _Collector:
    """The batch being gathered for one task in one event loop, and the bodies running."""

    task: BatchTask[typing.Any, typing.Any]
    waiting: list[_Waiting] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    running: set[asyncio.Task[None]] = field(default_factory=set)

    async def submit(self, ctx: TaskContext, value: object) -> JsonValue:
        loop = asyncio.get_running_loop()
        joined = _Waiting(ctx, value, loop.create_future())
        self.waiting.append(joined)
        if len(self.waiting) >= self.task.batch.max_size:
            self._flush()
        elif self.timer is None:
            self.timer = loop.call_later(self.task.batch.max_wait.total_seconds(), self._flush)
        # A cancelled attempt (lost lease, timeout) cancels its future: the batch skips
        # it if it has not started, and drops its output if it has.
        return await joined.output

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        size = self.task.batch.max_size
        while self.waiting:
            batch = [w for w in self.waiting[:size] if not w.output.done()]
            del self.waiting[:size]
            if batch:
                body = asyncio.create_task(self._run(batch), name=f"legato-batch-{self.task.name}")
                self.running.add(body)
                body.add_done_callback(self.running.discard)

    async def _run(self, batch: list[_Waiting]) -> None:
        ctx = BatchContext(tuple(w.ctx for w in batch))
        try:
            outputs = await self.task.run_batch(ctx, [w.value for w in batch])
        except asyncio.CancelledError:
            for waiting in batch:
                waiting.output.cancel()
            raise
        except Exception as error:
            for waiting in batch:
                if not waiting.output.done():
                    waiting.output.set_exception(error)
            return
        for waiting, output in zip(batch, outputs, strict=True):
            if not waiting.output.done():
                waiting.output.set_result(output)


@dataclass(frozen=True)
class _BatchDecorator:
    batch: Batch
    options: dict[str, typing.Any]

    def __call__(self, fn: BatchBody[A, R], /) -> BatchTask[A, R]:
        options = dict(self.options)
        name = options.pop("name")  # None: the function's name; "" is refused as @task does
        if name is None:
            name = getattr(fn, "__name__", "")
        return BatchTask(fn, self.batch, name=name, **options)


def batch_task(
    batch: Batch,
    *,
    name: str | None = None,
    queue: str = "default",
    retry: Retry | None = None,
    schedule_to_start: timedelta | None = None,
    start_to_close: timedelta | None = None,
    heartbeat: timedelta | None = None,
    priority: int = 0,
) -> _BatchDecorator:
    """Register ``async def f(ctx: BatchContext, items: list[A]) -> list[R]`` as a task
    of one ``A`` and one ``R`` whose attempts a worker runs ``batch.max_size`` at a time
    (module docstring). The options are ``@task``'s, each applying to every attempt."""
    return _BatchDecorator(
        batch,
        {
            "name": name,
            "queue": queue,
            "priority": priority,
            "retry": retry if retry is not None else Retry(),
            "schedule_to_start": schedule_to_start,
            "start_to_close": start_to_close,
            "heartbeat": heartbeat,
        },
    )
