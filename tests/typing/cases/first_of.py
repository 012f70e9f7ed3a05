from _models import Order, Signup, User, create_user, ship

from legato.flow import Flow, Node


def different_types(flow: Flow[Signup], order: Node[Order]) -> None:
    user = flow.run(create_user, flow.input)
    # P: Argument 2 to "first_of" of "Flow" has incompatible type "Node[Order]"; expected
    #     "Node[User]" (the type of the first input)
    flow.first_of(user, order)


def merged_miswired(flow: Flow[Signup], a: Node[User], b: Node[User]) -> None:
    # E: Argument 1 to task "ship" has incompatible type "Node[User]"; expected "Node[Order]"
    flow.run(ship, flow.first_of(a, b))
