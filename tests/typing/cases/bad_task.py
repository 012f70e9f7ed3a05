from legato.flow import task


@task()  # E: Argument 1 to "__call__" of "_TaskDecorator" has incompatible type
async def no_context(x: int, y: int, z: int, a: int, b: int, c: int, d: int) -> int:
    return x
