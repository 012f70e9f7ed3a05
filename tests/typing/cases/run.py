from _models import Order, Signup, User, activate, create_user, ping, ship

from legato.flow import Flow, Node


def wrong_type(flow: Flow[Signup], user: Node[User]) -> None:
    # E: Argument 1 to task "ship" has incompatible type "Node[User]"; expected "Node[Order]"
    flow.run(ship, user)
    # E: Argument 2 to task "activate" has incompatible type "Node[Signup]";
    #     expected "Node[Confirmed]"
    flow.run(activate, user, flow.input)


def wrong_arity(flow: Flow[Signup], user: Node[User]) -> None:
    # E: Task "activate" takes 2 inputs ("User", "Confirmed"); 1 given
    flow.run(activate, user)
    flow.run(ping, user)  # E: Task "ping" takes no inputs; 1 given
    flow.run(create_user)  # E: Task "create_user" takes 1 input ("Signup"); 0 given


def wrong_output(flow: Flow[Signup]) -> None:
    # E: Incompatible types in assignment (expression has type "Node[User]", variable has
    #     type "Node[Order]")
    order: Node[Order] = flow.run(create_user, flow.input)
    del order
