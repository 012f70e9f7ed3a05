from _models import User, activate

from legato.flow import Flow, Node, workflow


@workflow("wrong-arity")
def wf(flow: Flow[User]) -> Node[User]:
    return flow.run(activate, flow.input)  # E: No overload variant of "run" of "Flow" matches
