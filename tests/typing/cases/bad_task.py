from legato.flow import task


# E: Argument 1 to "__call__" of "_TaskDecorator" has incompatible type
#     "Callable[[int, int, int, int, int, int, int], Coroutine[Any, Any, int]]"; expected
#     "Callable[[TaskContext], Awaitable[int]]"
@task()
async def no_context(x: int, y: int, z: int, a: int, b: int, c: int, d: int) -> int:
    return x
