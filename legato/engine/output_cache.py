"""The worker's side of ``@task(cache=Cache(...))``: reuse a stored output, or run and
store it."""

from __future__ import annotations

from pydantic import JsonValue
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.context import TaskContext
from legato.engine.repositories import task_cache
from legato.flow import TaskDefinition
from legato.limits import json_problem


async def invoke(
    engine: AsyncEngine, definition: TaskDefinition, ctx: TaskContext, args: JsonValue
) -> tuple[JsonValue, bool]:
    """``definition.invoke(ctx, args)``'s output and False, unless the task is cached
    and an unexpired output for its key exists: then that output and True (a cache hit),
    without running the task. A fresh output is stored when it is storable JSON (one
    that is not fails the attempt anyway)."""
    if definition.cache is None:
        return await definition.invoke(ctx, args), False
    key = definition.cache_key(args)
    if key is None:
        return await definition.invoke(ctx, args), False
    async with engine.connect() as conn:
        hit, output = await task_cache.lookup(conn, definition.name, key)
    if hit:
        return output, True
    output = await definition.invoke(ctx, args)
    if json_problem(output) is None:
        async with engine.begin() as conn:
            await task_cache.store(conn, definition.name, key, output, definition.cache.expires)
    return output, False
