from _models import Plan, User

from legato.flow import Flow


def selector_typo(flow: Flow[User]) -> None:
    flow.switch(flow.input, lambda u: u.paln)  # E: "User" has no attribute "paln"


def field_name_typo(flow: Flow[User]) -> None:
    # P: "User" has no field "paln" to switch on (its fields: plan, user_id)
    flow.switch(flow.input, "paln")


def case_of_the_wrong_type(flow: Flow[User]) -> None:
    sw = flow.switch(flow.input, lambda u: u.plan)
    # E: Argument 1 to "case" of "Switch" has incompatible type "str"; expected "Plan"
    with sw.case("pro"):
        pass
    by_name = flow.switch(flow.input, "plan")
    # P: Argument 1 to "case" of "Switch" has incompatible type "int"; expected "Plan"
    with by_name.case(1):
        pass
    with by_name.case(Plan.PRO):
        pass
