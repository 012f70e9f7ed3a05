"""Webhooks without a database: signing and verifying, endpoint checks, back-off, which
lifecycle events a decision writes."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from legato import (
    InvalidSignature,
    InvalidWebhook,
    RunStatus,
    WebhookNotFound,
    create_engine,
    webhooks,
)
from legato.engine.decider.model import Action, AppendEvent, FinishRun, TaskError
from legato.engine.loops.relay import (
    RelaySettings,
    body_of,
    headers_of,
    lifecycle_events,
    retry_delay,
)
from legato.engine.repositories.outbox import Delivery
from legato.errors import ConfigurationError, InvalidArgument

SECRET = "whsec-0123456789"
NOW = 1_700_000_000.0


def _delivery() -> Delivery:
    return Delivery(
        id=7,
        event_id=uuid.uuid4(),
        endpoint_id=1,
        url="https://hooks.example.com/x",
        secret=SECRET,
        run_id=uuid.uuid4(),
        workflow_name="signup",
        event_type="run.succeeded",
        payload={"status": "SUCCEEDED", "output": {"ok": True}},
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        attempts=1,
        next_attempt_at=datetime(2024, 1, 1, tzinfo=UTC),
        last_error=None,
        dead_lettered_at=None,
        shard=0,
    )


def test_a_signed_request_verifies_and_yields_the_event() -> None:
    delivery = _delivery()
    body = body_of(delivery)
    headers = headers_of(delivery, body, NOW)
    # Frameworks hand headers over in any case.
    event = webhooks.verify(SECRET, body, {k.lower(): v for k, v in headers.items()}, now=NOW + 5)
    assert event["id"] == str(delivery.event_id) == headers[webhooks.EVENT_ID_HEADER]
    assert event["type"] == "run.succeeded" and event["workflow"] == "signup"
    assert event["data"] == {"status": "SUCCEEDED", "output": {"ok": True}}
    assert webhooks.verify(SECRET, body.decode(), headers, now=NOW) == event


def test_the_documented_recipe_matches_the_signature() -> None:
    import hashlib
    import hmac

    body = body_of(_delivery())
    headers = headers_of(_delivery(), body, NOW)
    stamp = headers["Legato-Timestamp"]
    expected = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["Legato-Signature"] == f"v1={expected}"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("secret", "does not match"),
        ("body", "does not match"),
        ("stale", "tolerance"),
        ("unsigned", "no Legato-Timestamp or Legato-Signature"),
        ("garbled", "not Unix seconds"),
    ],
)
def test_a_forged_tampered_or_replayed_request_is_refused(change: str, message: str) -> None:
    delivery = _delivery()
    body = body_of(delivery)
    headers = headers_of(delivery, body, NOW)
    secret, now = SECRET, NOW
    if change == "secret":
        secret = "another"
    elif change == "body":
        body = body.replace(b"signup", b"signuq")
    elif change == "stale":
        now = NOW + 301
    elif change == "unsigned":
        del headers[webhooks.SIGNATURE_HEADER]
    else:
        headers[webhooks.TIMESTAMP_HEADER] = "yesterday"
    with pytest.raises(InvalidSignature, match=message):
        webhooks.verify(secret, body, headers, now=now)


@pytest.mark.parametrize(
    ("url", "secret", "events", "message"),
    [
        ("hooks.example.com/x", "s", None, "'hooks.example.com/x' is not an absolute http"),
        ("ftp://example.com/x", "s", None, "not an absolute http"),
        ("https:///nohost", "s", None, "not an absolute http"),
        ("https://exa mple.com/", "s", None, "not an absolute http"),
        ("https://example.com/x", "", None, "secret must not be empty"),
        ("https://example.com/x", "   ", None, "secret must not be empty"),
        ("https://example.com/x", "s", ["run.started", "run.exploded"], "'run.exploded'"),
        ("https://example.com/x", "s", [], "no event types"),
        ("http://[::1/x", "s", None, "not an absolute http"),
        ("https://example.com:abc/x", "s", None, "has a bad port 'abc': a port is a whole"),
        ("https://example.com:99999/x", "s", None, "bad port '99999'.* from 1 to 65535"),
        ("https://example.com:0/x", "s", None, "bad port '0'"),
        ("http://u:p@example.com:+80/x", "s", None, "bad port '\\+80'"),
        ("http://[::1]:70000/x", "s", None, "'http://\\[::1\\]:70000/x' has a bad port '70000'"),
        ("https://example.com/" + "x" * 2100, "s", None, r"\[2,120 characters\] is 2,120 "),
        ("https://exa\x00mple.com/x", "s", None, "not an absolute http"),
        ("https://example.com/x", "s\x00", None, "printable"),
        ("https://example.com/x", "s" * 1025, None, "at most 1024"),
        ("https://example.com/x", "s", "run.failed", "must be a list of strings"),
    ],
)
def test_a_bad_endpoint_is_refused_by_name(
    url: str, secret: str, events: list[str] | None, message: str
) -> None:
    with pytest.raises(InvalidWebhook, match=message):
        webhooks.check_endpoint(url, secret, events, None)


def test_a_long_url_is_shown_cut_short_with_its_length() -> None:
    with pytest.raises(InvalidWebhook) as refused:
        webhooks.check_endpoint("https://example.com/" + "x" * 5000, "s", None, None)
    message = str(refused.value)
    assert len(message) < 250, message
    assert message.startswith("webhook URL 'https://example.com/xxx")
    assert "… [5,020 characters] is 5,020 characters long" in message
    assert "at most 2048 characters" in message


def test_a_url_with_a_good_port_or_none_is_accepted() -> None:
    for url in (
        "https://x.example:1/h",
        "https://x.example:65535/h",
        "https://x.example:/h",
        "http://u:p@[::1]:8080/h",
        "http://[::1]/h",
    ):
        webhooks.check_endpoint(url, "s", None, None)


def test_an_endpoint_defaults_to_every_event_and_workflow() -> None:
    types, flows = webhooks.check_endpoint("http://127.0.0.1:8000/h", "s", None, None)
    assert types == tuple(e.value for e in webhooks.EventType) and flows is None
    types, flows = webhooks.check_endpoint(
        "https://x.example/h", "s", ["run.failed", "run.failed"], ["a"]
    )
    assert types == ("run.failed",) and flows == ("a",)


def test_retry_delay_doubles_with_jitter_in_its_upper_half_up_to_the_cap() -> None:
    rng = random.Random(12)
    base, cap = timedelta(seconds=5), timedelta(minutes=1)
    for attempts, ceiling in [(1, 5), (2, 10), (3, 20), (4, 40), (5, 60), (40, 60)]:
        delays = [retry_delay(attempts, base, cap, rng).total_seconds() for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), attempts
        assert len(set(delays)) > 100  # jittered, not lockstep


def test_relay_settings_refuse_a_lease_no_longer_than_the_request_timeout() -> None:
    with pytest.raises(ConfigurationError, match="lease"):
        RelaySettings(request_timeout=10, lease=timedelta(seconds=10))
    with pytest.raises(ConfigurationError, match="max_attempts"):
        RelaySettings(max_attempts=0)


def test_a_decision_writes_started_on_the_first_decision_and_its_finish() -> None:
    run_id = uuid.uuid4()
    timeout = TaskError(type="Timeout", message="too slow", retryable=False)
    refused = TaskError(type="Refused", message="no", retryable=False)
    cases: list[tuple[bool, list[Action], list[str]]] = [
        (True, [AppendEvent(type="task_scheduled")], ["run.started"]),
        (False, [AppendEvent(type="task_scheduled")], []),
        (False, [FinishRun(status=RunStatus.SUCCEEDED, output=3)], ["run.succeeded"]),
        (True, [FinishRun(status=RunStatus.CANCELLED)], ["run.started", "run.cancelled"]),
        (False, [FinishRun(status=RunStatus.FAILED, error=refused)], ["run.failed"]),
        # A task's timeout fails the run; the workflow's execution_timeout times it out.
        (False, [FinishRun(status=RunStatus.FAILED, error=timeout)], ["run.failed"]),
        (False, [FinishRun(status=RunStatus.TIMED_OUT, error=timeout)], ["run.timed_out"]),
    ]
    for first, actions, expected in cases:
        events = lifecycle_events(run_id, first, actions)
        assert [e.type for e in events] == expected, actions
        assert len({e.event_id for e in events}) == len(events)
    (succeeded,) = lifecycle_events(
        run_id, False, [FinishRun(status=RunStatus.SUCCEEDED, output=3)]
    )
    assert succeeded.payload == {"status": "SUCCEEDED", "output": 3}
    (failed,) = lifecycle_events(run_id, False, [FinishRun(status=RunStatus.FAILED, error=refused)])
    assert json.dumps(failed.payload, sort_keys=True) == json.dumps(
        {"status": "FAILED", "error": refused.model_dump(mode="json")}, sort_keys=True
    )


@pytest.mark.parametrize(
    ("workflows", "message"),
    [
        ("signup", "must be a list of strings"),
        (["sign\x00up"], "unprintable character U\\+0000"),
        (["w" * 201], "over the 200-character limit"),
        ([" signup"], "must not start or end with a space"),
        ([7], "must be a list of strings"),
    ],
)
def test_an_endpoints_workflows_are_names(workflows: object, message: str) -> None:
    with pytest.raises(InvalidWebhook, match=message):
        webhooks.check_endpoint("https://example.com/x", "s", None, workflows)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (webhooks.SIGNATURE_HEADER, "v1=\u00e9"),  # compare_digest refuses non-ASCII str
        (webhooks.TIMESTAMP_HEADER, "9" * 400),  # past a float: OverflowError once
        (webhooks.TIMESTAMP_HEADER, "1e9"),
        (webhooks.TIMESTAMP_HEADER, "\u0661\u0662"),  # Arabic-Indic digits: int() takes them
    ],
)
def test_hostile_headers_are_an_invalid_signature(header: str, value: str) -> None:
    delivery = _delivery()
    body = body_of(delivery)
    headers = headers_of(delivery, body, NOW)
    headers[header] = value
    with pytest.raises(InvalidSignature):
        webhooks.verify(SECRET, body, headers, now=NOW)


@pytest.mark.parametrize(
    "body",
    [b"not json", b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b'{"n": ' + b"9" * 5000 + b"}"],
)
def test_a_signed_body_that_is_no_event_is_an_invalid_signature(body: bytes) -> None:
    headers = {
        webhooks.TIMESTAMP_HEADER: str(int(NOW)),
        webhooks.SIGNATURE_HEADER: webhooks.sign(SECRET, int(NOW), body),
    }
    with pytest.raises(InvalidSignature, match="not a Legato event"):
        webhooks.verify(SECRET, body, headers, now=NOW)


@pytest.mark.parametrize("tolerance", [float("nan"), -1.0, float("inf"), "300"])
def test_a_tolerance_that_is_no_number_of_seconds_is_refused(tolerance: object) -> None:
    delivery = _delivery()
    body = body_of(delivery)
    with pytest.raises(InvalidArgument, match="tolerance"):
        webhooks.verify(
            SECRET,
            body,
            headers_of(delivery, body, NOW),
            now=NOW,
            tolerance=tolerance,  # type: ignore[arg-type]
        )


NEVER_CONNECTED = create_engine("postgresql://app@localhost/app")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: webhooks.remove_endpoint(NEVER_CONNECTED, 2**70), WebhookNotFound, "no webhook"),
        (
            lambda: webhooks.remove_endpoint(NEVER_CONNECTED, "1"),  # type: ignore[arg-type]
            InvalidArgument,
            "whole number",
        ),
        (lambda: webhooks.remove_endpoint(NEVER_CONNECTED, True), InvalidArgument, "whole number"),
        (lambda: webhooks.delivery(NEVER_CONNECTED, 0), WebhookNotFound, "no outbox delivery 0"),
        (lambda: webhooks.replay(NEVER_CONNECTED, [2**70]), WebhookNotFound, "no outbox"),
        (
            lambda: webhooks.replay(NEVER_CONNECTED, "12"),  # type: ignore[arg-type]
            InvalidArgument,
            "list of ids",
        ),
        (lambda: webhooks.dead_letters(NEVER_CONNECTED, -1), InvalidArgument, "limit=-1"),
        (lambda: webhooks.dead_letters(NEVER_CONNECTED, 2**70), InvalidArgument, "limit="),
    ],
)
async def test_ids_and_limits_no_row_can_match_are_refused_before_any_query(
    call: Callable[[], Awaitable[object]], error: type[Exception], message: str
) -> None:
    """Refused by the checks (the engine is never connected to: a query would fail
    with a connection error instead)."""
    with pytest.raises(error, match=message):
        await call()
