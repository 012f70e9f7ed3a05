from _models import Order, Signup, ship, signup

from legato.flow import Flow, Node


def wrong_input(flow: Flow[Signup], order: Node[Order]) -> None:
    # E: Input to child workflow "signup" has incompatible type "Node[Order]"; expected
    #     "Node[Signup]"
    flow.child(signup, order)


def output_miswired(flow: Flow[Signup]) -> None:
    # E: Argument 1 to task "ship" has incompatible type "Node[User]"; expected "Node[Order]"
    flow.run(ship, flow.child(signup, flow.input))
