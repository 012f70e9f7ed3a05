from _models import Confirmed, Order, Plan, User, ship

from legato.flow import Flow


def wrong_default(flow: Flow[User]) -> None:
    # P: Default of the wait for "late" has incompatible type "User"; expected "Confirmed"
    flow.wait_for_event("late", Confirmed, default=User(user_id="u", plan=Plan.FREE))


def payload_miswired(flow: Flow[Order]) -> None:
    confirmed = flow.wait_for_event("confirmed", Confirmed)
    # E: Argument 1 to task "ship" has incompatible type "Node[Confirmed]"; expected
    #     "Node[Order]"
    flow.run(ship, confirmed)
