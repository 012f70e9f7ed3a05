"""The pure checks at the edges: names, keys, JSON, error reports, task and workflow options."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pydantic import BaseModel

import legato
from legato import (
    App,
    Flow,
    LegatoError,
    Node,
    Retry,
    SpecError,
    TaskContext,
    TaskDefinitionError,
    WorkflowSpec,
    task,
    workflow,
)
from legato.engine.attempts import error_of, output_error
from legato.errors import InvalidInput
from legato.flow.spec import TaskNodeSpec, TaskSpec
from legato.limits import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_JSON_DEPTH,
    MAX_NAME_LENGTH,
    check_idempotency_key,
    check_json,
    check_name,
    clean_text,
    json_problem,
    name_problem,
    truncated,
)


class Item(BaseModel):
    n: int


@task()
async def noop(ctx: TaskContext, item: Item) -> Item:
    return item


async def ok(ctx: TaskContext) -> int:
    return 1


def _nested(depth: int) -> list[object]:
    root: list[object] = []
    node = root
    for _ in range(depth - 1):
        child: list[object] = []
        node.append(child)
        node = child
    return root


# -- names and keys ----------------------------------------------------------------------


@pytest.mark.parametrize("good", ["signup", "a", "x" * MAX_NAME_LENGTH, "order.paid v2", "café"])
def test_good_names_pass(good: str) -> None:
    assert name_problem(good) is None
    assert check_name("event name", good, InvalidInput) == good


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "must not be empty"),
        ("x" * (MAX_NAME_LENGTH + 1), "201 characters long, over the 200-character limit"),
        ("x" * 10_000, "10000 characters long"),
        ("a\x00b", "U+0000"),
        ("a\nb", "U+000A"),
        ("tab\there", "U+0009"),
        ("\x7f", "U+007F"),
        ("lone\ud800", "U+D800"),
        ("zero\u200bwidth", "U+200B"),
        (" padded", "must not start or end with a space"),
        (42, "must be a string, not int"),
        (None, "must be a string, not NoneType"),
    ],
)
def test_bad_names_are_refused_naming_the_value_and_the_rule(bad: object, why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_name("event name", bad, InvalidInput)
    message = str(caught.value)
    assert message.startswith("event name ")
    assert why in message
    assert "1 to 200 printable characters" in message
    assert len(message) < 400  # a 10,000-character name is not echoed whole


def test_idempotency_keys_allow_512_bytes_and_no_control_characters() -> None:
    assert check_idempotency_key("k" * MAX_IDEMPOTENCY_KEY_BYTES, InvalidInput)
    assert check_idempotency_key("signup:ada@example.com", InvalidInput)
    with pytest.raises(InvalidInput, match="513 bytes"):
        check_idempotency_key("k" * 513, InvalidInput)
    with pytest.raises(InvalidInput, match="514 bytes"):
        check_idempotency_key("é" * 257, InvalidInput)  # 257 characters, 514 bytes
    cases = [("", "is empty"), ("a\x00", r"U\+0000"), ("\ud800", r"U\+D800"), (7, "string")]
    for bad, why in cases:
        with pytest.raises(InvalidInput, match=why):
            check_idempotency_key(bad, InvalidInput)


# -- JSON --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "good",
    [None, True, 0, -1.5, "text", "\x00nul is stripped later", [1, [2, {"a": None}]], (1, 2)],
)
def test_storable_json_passes(good: object) -> None:
    assert json_problem(good) is None


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (float("nan"), "$ is nan"),
        ({"a": [1, float("inf")]}, "$.a[1] is inf"),
        ({"a": -float("inf")}, "$.a is -inf"),
        ("\udc80", "lone surrogate"),
        ({"\ud800": 1}, "key with a lone surrogate"),
        ({1: "x"}, "key 1, which is not a string"),
        ({"s": {1, 2}}, "$.s is a set"),
        (b"bytes", "$ is a bytes"),
        (_nested(MAX_JSON_DEPTH + 1), f"deeper than {MAX_JSON_DEPTH} levels"),
    ],
)
def test_unstorable_json_is_named(bad: object, why: str) -> None:
    problem = json_problem(bad)
    assert problem is not None and why in problem
    with pytest.raises(InvalidInput, match="input of workflow 'w' is not storable JSON"):
        check_json("input of workflow 'w'", bad, InvalidInput)


def test_json_exactly_at_the_depth_limit_passes() -> None:
    assert json_problem(_nested(MAX_JSON_DEPTH)) is None


def test_a_million_deep_value_is_refused_without_recursion() -> None:
    problem = json_problem(_nested(1_000_000))
    assert problem is not None and "deeper than" in problem


# -- text caps ---------------------------------------------------------------------------


def test_truncation_keeps_the_head_or_tail_and_says_how_much_went() -> None:
    assert truncated("short", 10) == "short"
    head = truncated("a" * 50 + "b" * 50, 50)
    assert head.startswith("a" * 50) and "[truncated 50 characters]" in head and "bb" not in head
    tail = truncated("a" * 50 + "b" * 50, 50, keep="tail")
    assert tail.endswith("b" * 50) and "[truncated 50 characters]" in tail and "aa" not in tail


def test_clean_text_escapes_lone_surrogates_so_the_text_encodes() -> None:
    assert clean_text("fine é") == "fine é"
    cleaned = clean_text("bad \ud800 here")
    assert cleaned == "bad \\ud800 here"
    cleaned.encode()


# -- the worker's reports ----------------------------------------------------------------


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_an_exception_whose_str_raises_is_still_recorded() -> None:
    error = error_of(BrokenStr(), retryable=True)
    assert error.type == "BrokenStr"
    assert error.message == "BrokenStr (its __str__ raised RuntimeError)"
    assert error.traceback is not None


def test_huge_and_unencodable_error_messages_are_capped_and_encodable() -> None:
    try:
        raise ValueError("\ud800" + "x" * (5 << 20))
    except ValueError as exc:
        error = error_of(exc, retryable=False)
    assert len(error.message) < MAX_ERROR_MESSAGE_CHARS + 100
    assert error.message.startswith("\\ud800xxx")
    assert "[truncated " in error.message
    assert error.traceback is not None and len(error.traceback) < 8_100
    assert error.traceback.rstrip().endswith("characters] ...") is False  # the tail is kept
    error.model_dump_json().encode()
    assert not error.retryable


def test_output_limit_and_unstorable_outputs_fail_without_retry() -> None:
    assert output_error({"ok": "x" * 100}, max_output_bytes=1 << 20) is None
    too_big = output_error("x" * 2_000, max_output_bytes=1_000)
    assert too_big is not None and too_big.type == "OutputTooLarge" and not too_big.retryable
    assert "2002 bytes" in too_big.message and "1000-byte limit" in too_big.message
    assert "max_output_bytes" in too_big.message
    nan = output_error({"x": float("nan")}, max_output_bytes=1 << 20)
    assert nan is not None and nan.type == "InvalidOutput" and not nan.retryable
    assert "$.x is nan" in nan.message


# -- Retry, task() and workflow() --------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"attempts": 0}, "Retry(attempts=0): attempts must be an int >= 1"),
        ({"attempts": -3}, "Retry(attempts=-3)"),
        ({"attempts": 2.5}, "Retry(attempts=2.5)"),
        ({"attempts": True}, "Retry(attempts=True)"),
        ({"backoff": timedelta(seconds=-1)}, "Retry(backoff="),
        ({"backoff": 5}, "Retry(backoff=5): backoff must be a datetime.timedelta"),
        ({"max_backoff": timedelta(seconds=-1)}, "Retry(max_backoff="),
        (
            {"backoff": timedelta(minutes=10), "max_backoff": timedelta(seconds=1)},
            "max_backoff must be at least backoff=datetime.timedelta(seconds=600)",
        ),
        ({"multiplier": 0.5}, "Retry(multiplier=0.5): multiplier must be a finite number >= 1"),
        ({"multiplier": float("inf")}, "Retry(multiplier=inf)"),
        ({"jitter": 1.5}, "Retry(jitter=1.5): jitter must be a fraction"),
        ({"jitter": float("nan")}, "Retry(jitter=nan)"),
        ({"retry_on": ValueError}, "Retry(retry_on=<class 'ValueError'>)"),
        ({"dont_retry_on": (int,)}, "Retry(dont_retry_on=(<class 'int'>,))"),
    ],
)
def test_bad_retry_options_are_typed_and_named(options: dict[str, object], named: str) -> None:
    with pytest.raises(TaskDefinitionError) as caught:
        Retry(**options)  # type: ignore[arg-type]
    assert named in str(caught.value)
    assert isinstance(caught.value, LegatoError)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"start_to_close": timedelta(0)}, "task ok: start_to_close must be positive"),
        ({"start_to_close": timedelta(seconds=-5)}, "task ok: start_to_close must be positive"),
        ({"schedule_to_start": timedelta(0)}, "task ok: schedule_to_start must be positive"),
        ({"heartbeat": timedelta(seconds=-1)}, "task ok: heartbeat must be positive"),
        ({"heartbeat": 10}, "task ok: heartbeat must be a datetime.timedelta, not int"),
        ({"name": "x" * 10_000}, "task ok: name 'xxx"),
        ({"name": ""}, "task ok: name '' must not be empty"),
        ({"name": "a\x00b"}, "contains the unprintable character U+0000"),
        ({"queue": "q" * 201}, "task ok: queue 'qqq"),
        ({"queue": "bad\nqueue"}, "task ok: queue 'bad\\nqueue' contains"),
        ({"priority": 2**31}, "task ok: priority 2147483648 must be an int"),
        ({"priority": "high"}, "task ok: priority 'high' must be an int"),
        ({"retry": 3}, "task ok: retry=3 must be a legato.Retry"),
    ],
)
def test_bad_task_options_name_the_function_and_option(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(TaskDefinitionError) as caught:
        task(**options)(ok)  # type: ignore[arg-type]
    assert named in str(caught.value)


def test_decorating_something_that_is_not_a_function_is_a_task_definition_error() -> None:
    with pytest.raises(TaskDefinitionError, match="must be an async function"):
        task()(5)  # type: ignore[call-overload]


def test_a_workflow_with_a_bad_name_is_refused_when_defined() -> None:
    def body(flow: Flow[Item]) -> Node[Item]:
        return flow.run(noop, flow.input)

    for bad in ["", "w" * 201, "nul\x00", "new\nline"]:
        with pytest.raises(SpecError, match="name"):
            workflow(bad)(body)
    for junk in [5, None, b"w"]:  # named when it is not a str, before the body is read
        with pytest.raises(
            SpecError, match=f"a workflow needs a non-empty name, a str: got {junk!r}"
        ):
            workflow(junk)  # type: ignore[arg-type]


def test_a_10000_character_event_name_is_refused_when_the_workflow_is_defined() -> None:
    with pytest.raises(SpecError, match=r"workflow 'waits': node 'wait': event name .* is 10000"):

        @workflow("waits")
        def waits(flow: Flow[Item]) -> Node[Item]:
            return flow.wait_for_event("e" * 10_000, Item, name="wait")


def test_node_names_and_event_names_with_control_characters_are_refused() -> None:
    with pytest.raises(SpecError, match="node name 'a\\\\x00b'"):

        @workflow("named")
        def named(flow: Flow[Item]) -> Node[Item]:
            return flow.run(noop, flow.input, name="a\x00b")

    with pytest.raises(SpecError, match="event name"):

        @workflow("evented")
        def evented(flow: Flow[Item]) -> Node[Item]:
            return flow.wait_for_event("paid\x00", Item, name="wait")


def test_a_zero_event_timeout_is_a_spec_error_naming_the_node() -> None:
    with pytest.raises(SpecError, match=r"EventNodeSpec 'wait': timeout: .*greater than 0"):

        @workflow("timeouts")
        def timeouts(flow: Flow[Item]) -> Node[Item]:
            return flow.wait_for_event("e", Item, timeout=timedelta(0), name="wait")


def test_a_cycle_in_a_hand_written_spec_is_a_spec_error_not_a_validation_error() -> None:
    spec = {
        "name": "loop",
        "nodes": [
            TaskNodeSpec(id="a", task="t", inputs=("b",)),
            TaskNodeSpec(id="b", task="t", inputs=("a",)),
        ],
        "output": "b",
        "tasks": {"t": TaskSpec(name="t")},
    }
    with pytest.raises(SpecError, match="workflow 'loop': cycle through node 'a': a -> b -> a"):
        WorkflowSpec(**spec)


def test_a_bad_field_of_a_hand_written_spec_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"TaskSpec 't': priority: .*valid integer"):
        TaskSpec(name="t", priority="high")


def test_app_refuses_things_that_are_not_workflows() -> None:
    with pytest.raises(SpecError, match="each workflow passed to App\\(\\) must be a Workfl"):
        App([noop])  # type: ignore[list-item]
    with pytest.raises(SpecError, match="not str 's'"):
        App("signup")  # type: ignore[arg-type]


def test_every_legato_error_is_exported_from_legato() -> None:
    from legato import errors

    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, LegatoError)
    }
    # Connection failures are reported by the database layer, which exports its own.
    exported = defined - {"DatabaseUnavailable"}
    assert exported <= set(legato.__all__)
    assert issubclass(SpecError, LegatoError) and issubclass(TaskDefinitionError, LegatoError)


@pytest.mark.parametrize(
    "output",
    [None, True, 7, -(10**40), 2.5, -1.7976931348623157e308, "", "é" * 50, "\x1f" * 50],
)
def test_the_output_limit_holds_for_scalars_checked_without_serialising(output: object) -> None:
    # Each output's compact JSON, measured exactly, decides the boundary: one byte
    # under its size is refused, its size passes (the bound never lets a large one by).
    size = len(json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode())
    assert output_error(output, max_output_bytes=size) is None  # type: ignore[arg-type]
    refused = output_error(output, max_output_bytes=size - 1)  # type: ignore[arg-type]
    assert refused is not None and refused.type == "OutputTooLarge"
