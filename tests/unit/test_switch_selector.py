"""A switch's typed field selector compiles to the field's name; anything else is refused."""

from __future__ import annotations

import pytest

from legato.flow import Flow, Node, SpecError, workflow
from legato.flow.spec import SwitchNodeSpec

from ._flows import Account, Plan, User, load_account


def test_selector_compiles_to_the_field_name_like_the_string_form() -> None:
    def build(by_selector: bool) -> SwitchNodeSpec:
        @workflow("switch-selector")
        def wf(flow: Flow[User]) -> Node[Account]:
            account = flow.run(load_account, flow.input)
            sw = (
                flow.switch(account, lambda a: a.plan)
                if by_selector
                else flow.switch(account, "plan")
            )
            with sw.case(Plan.PRO):
                flow.run(load_account, flow.input, name="pro")
            return account

        (node,) = [n for n in wf.spec.nodes if isinstance(n, SwitchNodeSpec)]
        return node

    assert build(by_selector=True) == build(by_selector=False)
    assert build(by_selector=True).field == "plan"


@pytest.mark.parametrize(
    "selector",
    [lambda a: a.plan.upper(), lambda a: a, lambda a: "plan"],
    ids=["method-call", "whole-value", "constant"],
)
def test_selector_that_does_not_read_one_field_is_refused(selector: object) -> None:
    with pytest.raises(SpecError, match=r"selector must read one field.*lambda o: o\.status"):

        @workflow("bad-selector")
        def wf(flow: Flow[User]) -> Node[Account]:
            account = flow.run(load_account, flow.input)
            flow.switch(account, selector)  # type: ignore[call-overload]
            return account


def test_selector_naming_a_missing_field_fails_like_the_string_form() -> None:
    with pytest.raises(SpecError, match=r"no field 'tier'"):

        @workflow("missing-field")
        def wf(flow: Flow[User]) -> Node[Account]:
            account = flow.run(load_account, flow.input)
            flow.switch(account, lambda a: a.tier)  # type: ignore[attr-defined]
            return account
