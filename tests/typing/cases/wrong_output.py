from _models import Order, User, activate, shout

from legato.flow import Flow, Node, workflow


@workflow("wrong-output")
def wf(flow: Flow[User]) -> Node[Order]:
    confirmed = flow.wait_for_event("ok", User)
    flow.map(shout, flow.input)  # E: Argument 2 to "map" of "Flow" has incompatible type
    return flow.run(activate, flow.input, confirmed)  # E: Cannot infer value of type parameter
