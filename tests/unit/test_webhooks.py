"""Webhooks without a database: signing and verifying, endpoint checks, back-off, which
lifecycle events a decision writes."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from legato import InvalidSignature, InvalidWebhook, RunStatus, webhooks
from legato.engine.decider.model import Action, AppendEvent, FinishRun, TaskError
from legato.engine.loops.relay import (
    RelaySettings,
    body_of,
    headers_of,
    lifecycle_events,
    retry_delay,
)
from legato.engine.repositories.outbox import Delivery
from legato.errors import ConfigurationError

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
    ],
)
def test_a_bad_endpoint_is_refused_by_name(
    url: str, secret: str, events: list[str] | None, message: str
) -> None:
    with pytest.raises(InvalidWebhook, match=message):
        webhooks.check_endpoint(url, secret, events, None)


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
