from datetime import timedelta

from legato.flow import Flow


def wrong_duration(flow: Flow[int]) -> None:
    # E: Argument 1 to "sleep" of "Flow" has incompatible type "int"; expected "timedelta"
    flow.sleep(5)


def after_not_a_node(flow: Flow[int]) -> None:
    # E: List item 0 has incompatible type "int"; expected "Node[object]"
    flow.sleep(timedelta(seconds=1), after=[1])
