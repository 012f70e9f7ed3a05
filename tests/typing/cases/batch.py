from typing import assert_type

from _models import Order, Plan, Signup, User, ship

from legato.flow import Batch, BatchContext, BatchTask, Flow, Node, batch_task

BATCH = Batch(max_size=10)


@batch_task(BATCH)
async def create_users(ctx: BatchContext, items: list[Signup]) -> list[User]:
    return [User(user_id=item.email, plan=Plan.FREE) for item in items]


assert_type(create_users, BatchTask[Signup, User])


def wiring(flow: Flow[Signup]) -> None:
    # A batch task of Signup -> User wires as a task of one Signup and one User.
    assert_type(flow.run(create_users, flow.input), Node[User])
    user = flow.run(create_users, flow.input)
    # E: Argument 1 to task "ship" has incompatible type "Node[User]"; expected "Node[Order]"
    flow.run(ship, user)
    # E: Argument 1 to "run" of "Flow" has incompatible type "BatchTask[Signup, User]";
    #     expected "Task1[Signup, Order]"
    order: Node[Order] = flow.run(create_users, flow.input)
    del order


# E: Argument 1 to "__call__" of "_BatchDecorator" has incompatible type
#     "Callable[[BatchContext, Signup], Coroutine[Any, Any, User]]"; expected
#     "Callable[[BatchContext, list[Never]], Awaitable[list[Never]]]"
@batch_task(BATCH)
async def one_at_a_time(ctx: BatchContext, item: Signup) -> User:
    return User(user_id=item.email, plan=Plan.FREE)
