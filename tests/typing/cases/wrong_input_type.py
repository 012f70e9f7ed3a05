from _models import User, ship

from legato.flow import Flow, Node, workflow


@workflow("wrong-input")
def wf(flow: Flow[User]) -> Node[None]:
    return flow.run(ship, flow.input)  # E: Cannot infer value of type parameter "A1" of "run"
