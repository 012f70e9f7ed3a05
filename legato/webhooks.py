"""Webhooks: which endpoints receive which run lifecycle events, and how a receiver
checks that a request came from Legato.

Endpoints are deployment configuration (a URL and a secret per environment), so they
live in the database, not in code: ``legato webhooks add URL --secret ... --event
run.failed --workflow signup`` or :func:`add_endpoint`. The relay (``legato relay``)
delivers each event to each endpoint at least once; every request carries

``Legato-Event-Id``
    the event's id (a UUID): the same on every retry and for every endpoint — dedupe on it.
``Legato-Event-Type``
    e.g. ``run.succeeded``.
``Legato-Timestamp``
    when this attempt was signed, in Unix seconds.
``Legato-Signature``
    ``v1=`` and the hex HMAC-SHA256, keyed by the endpoint's secret, of
    ``<timestamp>.<raw body>``.

A receiver calls :func:`verify` on the raw body before trusting it::

    event = legato.webhooks.verify(SECRET, await request.body(), request.headers)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.repositories import outbox
from legato.engine.repositories.outbox import Delivery, Endpoint
from legato.errors import InvalidArgument, InvalidWebhook, WebhookNotFound
from legato.limits import name_problem
from legato.webhook_signature import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from legato.webhook_signature import EVENT_ID_HEADER as EVENT_ID_HEADER
from legato.webhook_signature import EVENT_TYPE_HEADER as EVENT_TYPE_HEADER
from legato.webhook_signature import SIGNATURE_HEADER as SIGNATURE_HEADER
from legato.webhook_signature import TIMESTAMP_HEADER as TIMESTAMP_HEADER
from legato.webhook_signature import EventType, sign, verify

MAX_URL_CHARS = 2048
MAX_SECRET_CHARS = 1024
MAX_ID = 2**63 - 1  # the ids are bigint
MAX_LISTED = 10_000

__all__ = [
    "DEFAULT_TOLERANCE",
    "EVENT_ID_HEADER",
    "EVENT_TYPE_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Delivery",
    "Endpoint",
    "EventType",
    "add_endpoint",
    "dead_letters",
    "delivery",
    "list_endpoints",
    "remove_endpoint",
    "replay",
    "sign",
    "verify",
]


def check_endpoint(
    url: str, secret: str, events: Iterable[str] | None, workflows: Iterable[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The endpoint's event types (every one when ``events`` is None) and workflows, or
    ``InvalidWebhook`` naming what is wrong; pure."""
    if not isinstance(url, str):
        raise InvalidWebhook(
            f"webhook URL must be a string of at most {MAX_URL_CHARS} characters, "
            f"not {type(url).__name__}"
        )
    if len(url) > MAX_URL_CHARS:
        raise InvalidWebhook(
            f"webhook URL {_shown(url)} is {len(url):,} characters long: it must be a "
            f"string of at most {MAX_URL_CHARS} characters"
        )
    port = _bad_port(url)
    if port is not None:
        raise InvalidWebhook(
            f"webhook URL {_shown(url)} has a bad port {_shown(port)}: a port is a whole "
            "number from 1 to 65535 (or leave it out: 443 for https://, 80 for http://)"
        )
    if not _is_url(url):
        raise InvalidWebhook(
            f"webhook URL {_shown(url)} is not an absolute http:// or https:// URL "
            "(e.g. https://hooks.example.com/legato)"
        )
    if not isinstance(secret, str) or not secret.strip():
        raise InvalidWebhook(
            "webhook secret must not be empty: receivers verify signatures with it "
            "(e.g. `openssl rand -hex 32`)"
        )
    if len(secret) > MAX_SECRET_CHARS or not secret.isprintable():
        raise InvalidWebhook(
            f"webhook secret must be at most {MAX_SECRET_CHARS} printable characters "
            "(e.g. `openssl rand -hex 32`)"
        )
    known = [e.value for e in EventType]
    chosen = tuple(known) if events is None else _names("event types", events)
    unknown = [e for e in chosen if e not in known]
    if unknown or not chosen:
        problem = f"unknown webhook event type {unknown[0]!r}" if unknown else "no event types"
        raise InvalidWebhook(f"{problem}: choose from {', '.join(known)}")
    names = None if workflows is None else _names("workflows", workflows)
    if names is not None and not names:
        raise InvalidWebhook("webhook workflow names must not be empty; omit them for every one")
    for name in names or ():
        name_wrong = name_problem(name)
        if name_wrong is not None:
            raise InvalidWebhook(f"webhook workflow name {name[:80]!r} {name_wrong}")
    return chosen, names


def _is_url(url: str) -> bool:
    """Whether ``url`` is an absolute http(s) URL with a host and, if any, a valid port."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is no port)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _shown(value: str) -> str:
    """``repr(value)``, cut short (with its length) when it is long."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}… [{len(value):,} characters]"


def _bad_port(url: str) -> str | None:
    """The port of an http(s) URL with a host when it is no port (not a whole number
    from 1 to 65535), else None: ``_is_url`` judges the rest."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open: not a URL at all
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    host_port = parts.netloc.rpartition("@")[2]
    if host_port.startswith("["):  # an IPv6 literal: the port follows the bracket
        _, _, after = host_port.partition("]")
        port = after[1:] if after.startswith(":") else None
    else:
        _, colon, port_text = host_port.partition(":")
        port = port_text if colon else None
    if not port:  # none, or "host:" (the default port, as urlsplit reads it)
        return None
    if port.isascii() and port.isdigit() and 1 <= int(port) <= 65535:
        return None
    return port


def _names(what: str, values: Iterable[str]) -> tuple[str, ...]:
    """``values`` as a tuple of distinct strings; a lone string is refused, since
    iterating it would subscribe its letters."""
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidWebhook(
            f"webhook {what} must be a list of strings, not {values!r:.80}: e.g. [{values!r:.80}]"
        )
    return tuple(dict.fromkeys(values))


def _check_id(what: str, value: object) -> int:
    """``value`` as a stored id, or ``InvalidArgument``; an id no row can have is
    ``WebhookNotFound`` (PostgreSQL's bigint would refuse it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} {value!r:.80} must be a whole number (an id from the list)")
    if not 1 <= value <= MAX_ID:
        raise WebhookNotFound(f"no {what} {value}: ids are whole numbers from 1 to {MAX_ID}")
    return value


async def add_endpoint(
    engine: AsyncEngine,
    url: str,
    secret: str,
    *,
    events: Iterable[str] | None = None,
    workflows: Iterable[str] | None = None,
) -> int:
    """Subscribe ``url`` to ``events`` (default: every ``EventType``) of ``workflows``
    (default: every workflow); returns the endpoint's id. Events written from now on
    reach it. Raises ``InvalidWebhook`` (before writing anything) for a bad URL, an empty
    secret, an unknown event type."""
    types, names = check_endpoint(url, secret, events, workflows)
    async with engine.begin() as conn:
        return await outbox.add_endpoint(conn, url, secret, types, names)


async def list_endpoints(engine: AsyncEngine) -> list[Endpoint]:
    """Every endpoint, oldest first."""
    async with engine.connect() as conn:
        return await outbox.endpoints(conn)


async def remove_endpoint(engine: AsyncEngine, endpoint_id: int) -> None:
    """Unsubscribe an endpoint, dropping its undelivered events and dead letters. Raises
    ``WebhookNotFound``."""
    _check_id("webhook endpoint", endpoint_id)
    async with engine.begin() as conn:
        if not await outbox.remove_endpoint(conn, endpoint_id):
            raise WebhookNotFound(
                f"no webhook endpoint {endpoint_id}: see `legato webhooks list` for the ids"
            )


async def dead_letters(
    engine: AsyncEngine, limit: int = 50, *, pending: bool = False
) -> list[Delivery]:
    """Dead-lettered deliveries, newest first (or, with ``pending``, those still being
    tried, next due first), at most ``limit`` (1 to 10,000)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
        raise InvalidArgument(f"limit={limit!r:.80} must be a whole number from 1 to {MAX_LISTED}")
    async with engine.connect() as conn:
        return await outbox.entries(conn, dead=not pending, limit=limit)


async def delivery(engine: AsyncEngine, delivery_id: int) -> Delivery:
    """One delivery (pending or dead). Raises ``WebhookNotFound`` (a delivered one is
    deleted)."""
    _check_id("outbox delivery", delivery_id)
    async with engine.connect() as conn:
        found = await outbox.get(conn, delivery_id)
    if found is None:
        raise WebhookNotFound(
            f"no outbox delivery {delivery_id}: it was delivered (and deleted) or never "
            "existed; see `legato outbox list`"
        )
    return found


async def replay(engine: AsyncEngine, delivery_ids: Sequence[int] | None = None) -> list[int]:
    """Deliver dead letters again, with a fresh attempt budget: ``delivery_ids``, or every
    dead letter (None). Returns the ids replayed; raises ``WebhookNotFound`` (replaying
    none) when one of ``delivery_ids`` is not a dead letter."""
    if delivery_ids is not None:
        if isinstance(delivery_ids, str | bytes):
            raise InvalidArgument(f"delivery_ids={delivery_ids!r:.80} must be a list of ids")
        for delivery_id in delivery_ids:
            _check_id("outbox delivery", delivery_id)
    async with engine.begin() as conn:
        replayed = await outbox.replay(conn, delivery_ids)
        missing = sorted(set(delivery_ids or ()) - set(replayed))
        if missing:  # raised inside the transaction: it rolls back, replaying none
            raise WebhookNotFound(
                f"outbox delivery {missing[0]} is not a dead letter: see `legato outbox list`"
            )
    return replayed
