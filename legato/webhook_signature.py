"""What a webhook request carries and how its signature is made and checked: the
headers, the event types and the HMAC-SHA256 over ``<timestamp>.<raw body>``.

Pure (no database): the relay signs with it and ``legato.webhooks`` (which re-exports
every name here) manages the endpoints. See ``legato.webhooks`` for the headers.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from enum import StrEnum

from pydantic import JsonValue

from legato.errors import InvalidArgument, InvalidInput, InvalidSignature
from legato.limits import parse_json_text

EVENT_ID_HEADER = "Legato-Event-Id"
EVENT_TYPE_HEADER = "Legato-Event-Type"
TIMESTAMP_HEADER = "Legato-Timestamp"
SIGNATURE_HEADER = "Legato-Signature"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE = 300.0  # seconds a signed request stays acceptable
MAX_TOLERANCE = 86_400.0 * 366  # a year: past that a stamp proves nothing


class EventType(StrEnum):
    """The run lifecycle events an endpoint can subscribe to."""

    STARTED = "run.started"  # the run's first decision
    SUCCEEDED = "run.succeeded"
    FAILED = "run.failed"
    CANCELLED = "run.cancelled"
    TIMED_OUT = "run.timed_out"  # finished TIMED_OUT: its workflow's execution_timeout passed
    QUARANTINED = "run.quarantined"  # its decisions kept failing; parked until resumed


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Legato-Signature`` value of ``body`` signed at ``timestamp``."""
    if not isinstance(secret, str) or not secret:
        raise InvalidArgument("sign(secret=...) must be the endpoint's secret, a non-empty str")
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify(
    secret: str,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, JsonValue]:
    """The event of a webhook request, once its signature proves it was sent with
    ``secret`` within ``tolerance`` seconds of ``now`` (default: the clock).

    ``body`` is the raw request body, exactly as received (not re-serialized JSON);
    ``headers`` any mapping of header names (matched case-insensitively) to values.
    Raises ``InvalidSignature`` for a missing or wrong signature or a stale timestamp.
    """
    if not isinstance(secret, str) or not secret:
        raise InvalidArgument("verify(secret=...) must be the endpoint's secret, a non-empty str")
    if not isinstance(body, bytes | str):
        raise InvalidArgument(
            f"verify(body=...) must be the raw request body as bytes (or str), not "
            f"{type(body).__name__}: e.g. await request.body()"
        )
    if not isinstance(headers, Mapping):
        raise InvalidArgument(
            f"verify(headers=...) must be a mapping of header names to values, not "
            f"{type(headers).__name__}: e.g. request.headers"
        )
    # A str body is encoded as it was sent; a lone surrogate never came over the wire.
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    given = {str(name).lower(): str(value) for name, value in headers.items()}
    stamp = given.get(TIMESTAMP_HEADER.lower())
    signature = given.get(SIGNATURE_HEADER.lower())
    if stamp is None or signature is None:
        raise InvalidSignature(
            f"the request has no {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header: "
            "it was not sent by the Legato relay"
        )
    if not (isinstance(tolerance, int | float) and 0 <= tolerance <= MAX_TOLERANCE):
        raise InvalidArgument(
            f"tolerance={tolerance!r} is not a number of seconds from 0 to {MAX_TOLERANCE:.0f}: "
            f"pass how old a signed request may be (default {DEFAULT_TOLERANCE:.0f})"
        )
    # Unix seconds fit in 12 digits for tens of thousands of years; a longer stamp would
    # overflow the float arithmetic below.
    digits = stamp.strip().removeprefix("-")
    if not (digits.isascii() and digits.isdecimal() and len(digits) <= 12):
        raise InvalidSignature(f"{TIMESTAMP_HEADER} {stamp[:40]!r} is not Unix seconds")
    timestamp = int(stamp)
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > tolerance:
        raise InvalidSignature(
            f"{TIMESTAMP_HEADER} is {age:.0f}s away from now (tolerance {tolerance:.0f}s): "
            "a replayed request, or a clock out of sync"
        )
    # Bytes, not str: compare_digest refuses a str with non-ASCII characters, and the
    # header is whatever the sender put there.
    expected = sign(secret, timestamp, raw).encode()
    if not hmac.compare_digest(expected, signature.strip().encode("utf-8", "replace")):
        raise InvalidSignature(
            f"{SIGNATURE_HEADER} does not match the body: a different secret, or a body "
            "changed after signing (verify the raw bytes received)"
        )
    try:
        text = raw.decode("utf-8")
        event = parse_json_text(text, "the signed body", f"{len(raw):,} bytes")
    except (UnicodeDecodeError, InvalidInput) as error:
        raise InvalidSignature(f"the signed body is not a Legato event: {error}") from None
    if not isinstance(event, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return event
