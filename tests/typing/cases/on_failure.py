from _models import Signup, ping, ship

from legato.flow import Flow


def handler_takes_the_wrong_input(flow: Flow[Signup]) -> None:
    # E: Failure handler "ship" must take 1 input ("FailureInfo"); it takes 1 input ("Order")
    flow.on_failure(ship)
    # E: Failure handler "ping" must take 1 input ("FailureInfo"); it takes no inputs
    flow.on_failure(ping)
