"""Call one task as a worker would, without a database.

```python
user = await run_task(create_user, Signup(email="ada@example.com"))   # a User
```

The arguments go through the task's JSON round trip (validated into the parameter
types) and so does the result (dumped, then parsed back into the return type), so a
value that would not survive the queue fails here too.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from pydantic import JsonValue

from legato.arguments import as_run_id, check_flag, check_int_argument
from legato.context import TaskCancelled, TaskContext
from legato.errors import InvalidArgument, InvalidInput, InvalidOutput
from legato.flow import Task0, Task1, Task2, Task3, Task4, Task5
from legato.flow.tasks import TaskArgumentsError, TaskDefinition, adapter_for
from legato.limits import check_json, check_name, json_problem
from legato.schema import uuid7

R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")


def task_context(
    *,
    node_id: str = "task",
    workflow: str = "test",
    run_id: uuid.UUID | str | None = None,
    iteration: int = 0,
    attempt: int = 1,
    cancelled: bool = False,
    heartbeat: Callable[[], Awaitable[None]] | None = None,
) -> TaskContext:
    """A ``TaskContext`` for a task under test. With ``cancelled=True`` its
    ``heartbeat()`` raises ``TaskCancelled``, as when the run was cancelled. A bad
    argument raises ``InvalidArgument`` (``InvalidRunId`` for ``run_id``)."""
    check_name("node_id", node_id, InvalidArgument)
    check_name("workflow", workflow, InvalidArgument)
    given_id = None if run_id is None else as_run_id(run_id)
    check_int_argument("iteration", iteration, 0)
    check_int_argument("attempt", attempt, 1)
    check_flag("cancelled", cancelled)
    if heartbeat is not None and not callable(heartbeat):
        raise InvalidArgument(
            f"heartbeat={heartbeat!r} must be an async function taking no arguments, or None"
        )

    async def cancelled_heartbeat() -> None:
        raise TaskCancelled(f"attempt {attempt} of {node_id!r} was cancelled")

    async def no_heartbeat() -> None:
        return None

    beat = cancelled_heartbeat if cancelled else heartbeat or no_heartbeat
    return TaskContext(
        run_id=given_id or uuid7(),
        task_id=uuid7(),
        workflow=workflow,
        node_id=node_id,
        iteration=iteration,
        attempt=attempt,
        _heartbeat=beat,
    )


@overload
async def run_task(task: Task0[R], /, *, ctx: TaskContext | None = None) -> R: ...
@overload
async def run_task(task: Task1[A1, R], a1: A1, /, *, ctx: TaskContext | None = None) -> R: ...
@overload
async def run_task(
    task: Task2[A1, A2, R], a1: A1, a2: A2, /, *, ctx: TaskContext | None = None
) -> R: ...
@overload
async def run_task(
    task: Task3[A1, A2, A3, R], a1: A1, a2: A2, a3: A3, /, *, ctx: TaskContext | None = None
) -> R: ...
@overload
async def run_task(
    task: Task4[A1, A2, A3, A4, R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    *,
    ctx: TaskContext | None = None,
) -> R: ...
@overload
async def run_task(
    task: Task5[A1, A2, A3, A4, A5, R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    /,
    *,
    ctx: TaskContext | None = None,
) -> R: ...
async def run_task(task: TaskDefinition, /, *inputs: Any, ctx: TaskContext | None = None) -> Any:
    """Run ``task`` on ``inputs`` (models or JSON) with ``ctx`` (``task_context()`` by
    default) and return its result, typed. The task's own exceptions propagate;
    arguments that fail the parameter types, or are not JSON, raise ``InvalidInput``."""
    if not isinstance(task, TaskDefinition):
        raise InvalidArgument(f"run_task() takes a task (made by @task), not {task!r}")
    if ctx is not None and not isinstance(ctx, TaskContext):
        raise InvalidArgument(f"ctx={ctx!r} must be a TaskContext, e.g. task_context()")
    args = check_json(
        f"the input list of task {task.name!r}",
        [_json(task.name, i, v) for i, v in enumerate(inputs)],
        InvalidInput,
    )
    context = ctx or task_context(node_id=task.name)
    try:
        output = await task.invoke(context, args)
    except TaskArgumentsError as error:
        raise InvalidInput(str(error)) from None
    # What the worker checks before it stores an output (the size limit aside, which is
    # the worker's option): a value it would fail the attempt for raises here too.
    problem = json_problem(output)
    if problem is not None:
        raise InvalidOutput(
            f"task {task.name!r} returned a value that is not storable JSON: {problem}"
        )
    return adapter_for(task.return_type).validate_python(output)


def _json(task: str, position: int, value: Any) -> JsonValue:
    try:
        dumped: JsonValue = adapter_for(type(value)).dump_python(value, mode="json")
    except ValueError as error:  # pydantic cannot serialise it
        raise InvalidInput(
            f"argument {position} of task {task!r} is not JSON: {type(value).__name__} "
            f"{value!r} ({error}); pass models or JSON values"
        ) from None
    return dumped
