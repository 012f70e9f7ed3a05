from _models import Signup, User, activate, numbers, ship, shout, words

from legato.flow import Flow, Node


def not_a_list(flow: Flow[Signup], name: Node[str]) -> None:
    # E: "map" of "Flow" needs a node whose output is a list; got "Node[str]" (expected
    #     "Node[list[str]]")
    flow.map(shout, name)


def wrong_items(flow: Flow[Signup]) -> None:
    # E: Argument 2 to "map" of "Flow" (task "shout") has incompatible type "Node[list[int]]";
    #     expected "Node[list[str]]"
    flow.map(shout, flow.run(numbers))


def task_with_two_inputs(flow: Flow[Signup], user: Node[User]) -> None:
    # E: Task "activate" takes 2 inputs ("User", "Confirmed"); map needs a task that takes 1
    #     input
    flow.map(activate, flow.run(words, user))


def results_miswired(flow: Flow[Signup], user: Node[User]) -> None:
    shouted = flow.map(shout, flow.run(words, user))
    # E: Argument 1 to task "ship" has incompatible type "Node[list[str]]"; expected
    #     "Node[Order]"
    flow.run(ship, shouted)
