"""The deploy check's assessment of one run (pure): which remaining nodes need what of
the new app. The database side is ``tests/integration/test_deploy_check.py``."""

from __future__ import annotations

import enum
import uuid

from pydantic import BaseModel, JsonValue

from legato import App, FailureInfo, Flow, Node, TaskContext, TaskState, task, workflow
from legato.deploy_check import Assessment, Finding, RunState, VersionCheck
from legato.flow import WorkflowDefinition

DONE = TaskState.COMPLETED


class Ask(BaseModel):
    question: str


class Answer(BaseModel):
    text: str


class SignedAnswer(BaseModel):
    text: str
    signature: str


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Account(BaseModel):
    name: str
    plan: Plan


class StrictAccount(BaseModel):
    name: str
    plan: Plan
    email: str


@task()
async def ask(ctx: TaskContext, question: Ask) -> Ask:
    return question


@task()
async def reply(ctx: TaskContext, answer: Answer) -> str:
    return answer.text


@task(name="reply")
async def reply_signed(ctx: TaskContext, answer: SignedAnswer) -> str:
    return answer.signature


@workflow("qa")
def qa(flow: Flow[Ask]) -> Node[str]:
    flow.run(ask, flow.input)
    answer = flow.wait_for_event("answered", Answer)
    return flow.run(reply, answer)


def run(
    input: JsonValue,
    rows: dict[str, tuple[TaskState, JsonValue]] | None = None,
    signals: list[tuple[str, JsonValue]] | None = None,
) -> RunState:
    return RunState(
        input,
        {(node, 0): row for node, row in (rows or {}).items()},
        signals or [],
    )


def findings(old: WorkflowDefinition, new: App, state: RunState) -> list[tuple[str, str, str]]:
    return [(f.node, f.kind, f.reason) for f in VersionCheck(old.spec, new).assess(state)]


def test_the_same_code_strands_nothing() -> None:
    assert findings(qa, App([qa]), run({"question": "?"})) == []


def test_completed_nodes_need_nothing() -> None:
    @workflow("qa")
    def qa_without_ask(flow: Flow[Ask]) -> Node[str]:
        return flow.run(reply, flow.wait_for_event("answered", Answer))

    new = App([qa_without_ask])
    waiting = run({"question": "?"}, {"ask": (DONE, {"question": "?"})})
    assert findings(qa, new, waiting) == []
    assert findings(qa, new, run({"question": "?"})) == [
        ("ask", "task", "task 'ask' is not in the new app: no worker will run it")
    ]


# -- events ---------------------------------------------------------------------------------


def test_an_event_the_new_workflow_no_longer_waits_for() -> None:
    @workflow("qa")
    def qa_without_wait(flow: Flow[Ask]) -> Node[str]:
        flow.run(ask, flow.input)
        return flow.run(reply, flow.wait_for_event("replied", Answer))

    assert findings(qa, App([qa_without_wait]), run({"question": "?"})) == [
        (
            "answered",
            "event",
            "event 'answered': workflow 'qa' of the new app no longer waits for it, so a "
            "client with the new app refuses the signal",
        )
    ]


def test_an_event_model_that_gained_a_required_field() -> None:
    @workflow("qa")
    def qa_signed(flow: Flow[Ask]) -> Node[str]:
        flow.run(ask, flow.input)
        return flow.run(reply_signed, flow.wait_for_event("answered", SignedAnswer))

    assert findings(qa, App([qa_signed]), run({"question": "?"})) == [
        (
            "answered",
            "event",
            "event 'answered' payload may refuse what the version's model accepted: "
            "$.signature: required, but not passed",
        )
    ]
    # A signal already buffered is checked as it is stored, by the wait and its reader.
    buffered = run({"question": "?"}, signals=[("answered", {"text": "yes"})])
    assert findings(qa, App([qa_signed]), buffered) == [
        (
            "answered",
            "event",
            "event 'answered' payload refuses the buffered signal: signature: Field required",
        ),
        (
            "reply",
            "task",
            "task 'reply' input 1 refuses the buffered signal: signature: Field required",
        ),
    ]
    signed = run({"question": "?"}, signals=[("answered", {"text": "yes", "signature": "s"})])
    assert findings(qa, App([qa_signed]), signed) == []


def test_a_task_that_no_longer_takes_what_an_event_will_pass() -> None:
    @workflow("qa")
    def qa_mismatched(flow: Flow[Ask]) -> Node[str]:
        flow.run(ask, flow.input)
        answer = flow.wait_for_event("answered", Answer)
        return flow.run(reply_signed, answer)  # type: ignore[arg-type]

    assert findings(qa, App([qa_mismatched]), run({"question": "?"})) == [
        (
            "reply",
            "task",
            "task 'reply' input 1 may refuse node 'answered' (event 'answered'): "
            "$.signature: required, but not passed",
        )
    ]


# -- switches, maps, children, the failure handler -----------------------------------------


@task()
async def upsell(ctx: TaskContext, account: Account) -> str:
    return account.name


@task()
async def welcome(ctx: TaskContext, account: Account) -> str:
    return account.name


@task(name="welcome")
async def welcome_strict(ctx: TaskContext, account: StrictAccount) -> str:
    return account.email


@workflow("branching")
def branching(flow: Flow[Account]) -> Node[str]:
    with flow.switch(flow.input, "plan") as sw:
        with sw.case(Plan.FREE):
            free = flow.run(upsell, flow.input)
        with sw.case(Plan.PRO):
            pro = flow.run(welcome, flow.input)
    return flow.first_of(free, pro)


@workflow("branching")
def branching_strict(flow: Flow[Account]) -> Node[str]:
    with flow.switch(flow.input, "plan") as sw:
        with sw.case(Plan.FREE):
            free = flow.run(upsell, flow.input)
        with sw.case(Plan.PRO):
            pro = flow.run(welcome_strict, flow.input)  # type: ignore[arg-type]
    return flow.first_of(free, pro)


def test_a_case_the_switch_passed_over_needs_nothing() -> None:
    account: JsonValue = {"name": "ada", "plan": "free"}
    [switch] = [n.id for n in branching.spec.nodes if n.kind == "switch"]
    new = App([branching_strict])
    assert findings(branching, new, run(account, {switch: (DONE, 'case:"free"')})) == []
    assert findings(branching, new, run(account, {switch: (DONE, 'case:"pro"')})) == [
        (
            "welcome",
            "task",
            "task 'welcome' input 1 refuses the run's input: email: Field required",
        )
    ]
    assert findings(branching, new, run(account)) != []  # not decided yet: either case


@task()
async def split(ctx: TaskContext, text: str) -> list[str]:
    return text.split()


@task()
async def shout(ctx: TaskContext, word: str) -> str:
    return word.upper()


@task(name="shout")
async def shout_number(ctx: TaskContext, word: int) -> str:
    return str(word)


@workflow("fanout")
def fanout(flow: Flow[str]) -> Node[list[str]]:
    return flow.map(shout, flow.run(split, flow.input))


@workflow("fanout")
def fanout_numbers(flow: Flow[str]) -> Node[list[str]]:
    return flow.map(shout_number, flow.run(split, flow.input))  # type: ignore[arg-type]


def test_map_elements() -> None:
    [mapped] = [n.id for n in fanout.spec.nodes if n.kind == "map"]
    new = App([fanout_numbers])
    assert findings(fanout, new, run("a b")) == [
        (
            mapped,
            "map",
            "task 'shout' input 1 may refuse each element of node 'split' (task 'split'): "
            "$: string may be passed, but integer is expected",
        )
    ]
    stored = run("a b", {"split": (DONE, ["a", "b"])})
    assert findings(fanout, new, stored) == [
        (
            mapped,
            "map",
            "task 'shout' input 1 refuses an element of node 'split''s stored output: "
            "value: Input should be a valid integer, unable to parse string as an integer",
        )
    ]
    numbers = run("1 2", {"split": (DONE, ["1", "2"])})
    assert findings(fanout, new, numbers) == []  # pydantic takes "1" for an int
    all_done = run("a b", {"split": (DONE, ["a", "b"])})
    all_done = RunState(
        all_done.input, {**all_done.rows, (mapped, 0): (DONE, "A"), (mapped, 1): (DONE, "B")}
    )
    assert findings(fanout, new, all_done) == []


@task()
async def double(ctx: TaskContext, value: int) -> int:
    return value * 2


@workflow("inner")
def inner(flow: Flow[int]) -> Node[int]:
    return flow.run(double, flow.input)


@workflow("outer")
def outer(flow: Flow[int]) -> Node[int]:
    return flow.child(inner, flow.input)


@workflow("inner")
def inner_text(flow: Flow[str]) -> Node[str]:
    return flow.run(shout, flow.input)


def test_child_workflows() -> None:
    @workflow("outer")
    def outer_alone(flow: Flow[int]) -> Node[int]:
        return flow.run(double, flow.input)

    assert findings(outer, App([outer_alone]), run(3)) == [
        (
            "child-inner",
            "child",
            "child workflow 'inner' is not in the new app: its tasks have no worker",
        )
    ]
    new = App([outer_alone, inner_text])
    assert findings(outer, new, run(3)) == [
        (
            "child-inner",
            "child",
            "child workflow 'inner' input refuses the run's input: "
            "value: Input should be a valid string",
        )
    ]
    started = run(3, {"child-inner": (TaskState.WAITING, None)})
    assert findings(outer, new, started) == []  # the child run is checked on its own


@task()
async def compensate(ctx: TaskContext, failure: FailureInfo) -> None:
    return None


@workflow("guarded")
def guarded(flow: Flow[int]) -> Node[int]:
    flow.on_failure(compensate)
    return flow.run(double, flow.input)


def test_the_failure_handler() -> None:
    @workflow("guarded")
    def unguarded(flow: Flow[int]) -> Node[int]:
        return flow.run(double, flow.input)

    assert findings(guarded, App([guarded]), run(1)) == []
    assert findings(guarded, App([unguarded]), run(1)) == [
        ("$on_failure", "handler", "task 'compensate' is not in the new app: no worker will run it")
    ]
    handled = run(1, {"$on_failure": (DONE, None)})
    assert findings(guarded, App([unguarded]), handled) == []


# -- counting runs ---------------------------------------------------------------------------


def test_runs_are_counted_per_version_and_reason() -> None:
    @workflow("qa")
    def qa_without_ask(flow: Flow[Ask]) -> Node[str]:
        return flow.run(reply, flow.wait_for_event("answered", Answer))

    assessment = Assessment(App([qa_without_ask]))
    assessment.add_spec("qa", 1, qa.spec)
    assessment.add_spec("qa", 2, None)  # a stored spec this Legato cannot read
    ids = [uuid.uuid4() for _ in range(8)]
    for run_id in ids[:6]:
        assessment.add_run(run_id, "qa", 1, False, run({"question": "?"}))
    assessment.add_run(ids[6], "qa", 1, True, run({"question": "?"}, {"ask": (DONE, {})}))
    assessment.add_run(ids[7], "qa", 2, False, run({"question": "?"}))
    report = assessment.report
    assert not report.ok
    assert (report.runs_in_flight, report.runs_at_risk) == (8, 7)
    first, second = report.versions
    assert (first.version, first.runs_in_flight, first.quarantined, first.runs_at_risk) == (
        1,
        7,
        1,
        6,
    )
    [risk] = first.risks
    assert (risk.node, risk.kind, risk.name, risk.runs) == ("ask", "task", "ask", 6)
    assert risk.run_ids == tuple(ids[:5])  # five examples
    assert second.risks[0].reason == "the stored spec of 'qa' v2 cannot be read by this Legato"
    assert Finding("ask", "task", "ask", risk.reason) in {
        Finding("ask", "task", "ask", risk.reason)
    }
