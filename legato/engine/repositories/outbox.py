"""``outbox`` and ``webhook_endpoints``: run lifecycle events waiting for delivery, and
where they go.

An event is fanned out when it is written: one ``outbox`` row per subscribed endpoint,
all carrying the event's id, so each endpoint's delivery backs off, dead-letters and is
replayed on its own. A delivered row is deleted; the table holds only work.

A row has its run's shard key: the decider writes a batch's events in its key, the
relay claims and reports within one key at a time (``shard = $k``); the operator's
listing and replay are fan-outs across keys.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    CTE,
    BigInteger,
    DateTime,
    Insert,
    Integer,
    Interval,
    all_,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import routed
from legato.engine.repositories.claims import locked
from legato.engine.repositories.params import (
    fan_out,
    in_array,
    int_array,
    rows_of,
    run_shard,
    shard_param,
    shards_param,
    text_array,
    uuid_array,
)
from legato.schema import Outbox, Runs, WebhookEndpoints
from legato.schema.layout import routed as routes
from legato.schema.types import JSON_VALUE


@dataclass(frozen=True)
class Event:
    """A run lifecycle event to publish: ``type`` is a ``legato.webhooks.EventType`` value."""

    event_id: uuid.UUID
    run_id: uuid.UUID
    type: str
    payload: JsonValue


@dataclass(frozen=True)
class Endpoint:
    id: int
    url: str
    secret: str
    event_types: tuple[str, ...]
    workflows: tuple[str, ...] | None  # None: every workflow
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    """One event for one endpoint, as the relay claims it or an operator inspects it;
    ``shard`` is its run's key, which the relay's report of it goes to."""

    id: int
    event_id: uuid.UUID
    endpoint_id: int
    url: str
    secret: str
    run_id: uuid.UUID
    workflow_name: str
    event_type: str
    payload: JsonValue
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    dead_lettered_at: datetime | None
    shard: int


@dataclass(frozen=True)
class Failure:
    """A failed delivery attempt: retry after ``retry_in``, or dead-letter it (None)."""

    id: int
    attempts: int  # the claim's count: a stale relay's report matches nothing
    error: str
    retry_in: timedelta | None


async def publish(conn: AsyncConnection, shard: int, events: Sequence[Event]) -> None:
    """Write each event of runs of key ``shard`` once per endpoint subscribed to its type
    and its run's workflow (decider loop: ``DeciderLoop._failed`` for a quarantine;
    ``decisions.write`` folds a batch's starts and finishes into its one statement with
    :func:`published`), in the caller's transaction — the transition and its event
    commit or roll back together. One ``INSERT ... SELECT`` over ``unnest``: the
    endpoints are a handful of rows read whole, the run's workflow comes from the
    ``runs`` primary key (one partition per run), the rows take the key from the one
    parameter ``shard``. With no endpoint subscribed it inserts nothing. On a distributed
    install ``routed.publish``."""
    if events and routes(conn):
        await routed.publish(conn, published_params(shard, events))
    elif events:
        await conn.execute(_publish_statement(), published_params(shard, events))


def published(spanning: bool = False) -> CTE:
    """:func:`publish` as a data-modifying CTE, bound by :func:`published_params` (a part
    of ``decisions.write``, so a decision batch's lifecycle events cost no statement
    of their own: most deployments have no endpoint, and then it inserts nothing)."""
    return _publish_statement(spanning).cte("published")


def published_params(shard: int, events: Sequence[Event]) -> dict[str, Any]:
    """The parameters of :func:`published` for ``events`` of runs of key ``shard``."""
    return {
        "in_shard": shard,
        "event_ids": [e.event_id for e in events],
        "run_ids": [e.run_id for e in events],
        "types": [e.type for e in events],
        "payloads": [JSON_VALUE.dump_text(e.payload) for e in events],
    }


@cache
def _publish_statement(spanning: bool = False) -> Insert:
    given = rows_of(
        "lifecycle",
        event_id=uuid_array("event_ids"),
        run_id=uuid_array("run_ids"),
        type=text_array("types"),
        payload=text_array("payloads"),
    )
    # Spanning (``decisions.write_held``): each event in its run's key.
    shard = run_shard(given.c.run_id) if spanning else shard_param()
    rows = (
        select(
            given.c.event_id,
            WebhookEndpoints.id,
            given.c.run_id,
            Runs.workflow_name,
            given.c.type,
            cast(given.c.payload, JSONB),
            shard,
        )
        .select_from(given)
        .join(Runs.table, (Runs.shard == shard) & (Runs.id == given.c.run_id))
        .join(
            WebhookEndpoints.table,
            (given.c.type == any_(WebhookEndpoints.event_types))
            & or_(
                WebhookEndpoints.workflows.is_(None),
                Runs.workflow_name == any_(WebhookEndpoints.workflows),
            ),
        )
        .order_by(given.c.event_id, WebhookEndpoints.id)
    )
    return insert(Outbox.table).from_select(
        ["event_id", "endpoint_id", "run_id", "workflow_name", "event_type", "payload", "shard"],
        rows,
    )


def _delivery_columns() -> tuple[Any, ...]:
    return (
        Outbox.id,
        Outbox.event_id,
        Outbox.endpoint_id,
        WebhookEndpoints.url,
        WebhookEndpoints.secret,
        Outbox.run_id,
        Outbox.workflow_name,
        Outbox.event_type,
        Outbox.payload,
        Outbox.created_at,
        Outbox.attempts,
        Outbox.next_attempt_at,
        Outbox.last_error,
        Outbox.dead_lettered_at,
        Outbox.shard,
    )


async def claim(
    conn: AsyncConnection,
    shard: int,
    limit: int,
    lease: timedelta,
    per_endpoint: int | None = None,
    in_flight: Mapping[int, int] | None = None,
) -> list[Delivery]:
    """Claim up to ``limit`` due deliveries of key ``shard``, oldest first (relay loop,
    per held key), at most
    ``per_endpoint`` (default: ``limit``) per endpoint counting the ``in_flight`` ones
    the caller already sends to it: the due rows are scanned oldest first, skipping
    endpoints with no room left (so a stuck endpoint's backlog cannot fill the scan),
    numbered per endpoint, and kept while an endpoint has room; those are locked ``FOR
    UPDATE SKIP LOCKED`` in a materialized CTE, then, by primary key, count the attempt
    and push ``next_attempt_at`` a ``lease`` ahead — the lease: a relay killed
    mid-delivery leaves the row due again once it passes, so nothing is lost (and the
    receiver may see the event twice, with the same event id). Commit at once: no
    transaction stays open across HTTP. Served by the partial index
    ``ix_outbox_relay_due`` (shard, next_attempt_at)."""
    return await _claim(conn, {"in_shard": shard}, limit, lease, per_endpoint, in_flight)


async def claim_held(
    conn: AsyncConnection,
    keys: Sequence[int],
    limit: int,
    lease: timedelta,
    per_endpoint: int | None = None,
    in_flight: Mapping[int, int] | None = None,
) -> list[Delivery]:
    """:func:`claim` over every key in ``keys`` in ONE statement (relay loop of a
    single-node installation, one claim per tick over its due held keys): the oldest due
    deliveries of any of those keys, each row leased in its own key; the same limits
    and locks. ``ix_outbox_relay_due``, one range per key (``shard = ANY``)."""
    return await _claim(conn, {"in_shards": list(keys)}, limit, lease, per_endpoint, in_flight)


async def _claim(
    conn: AsyncConnection,
    key: dict[str, Any],
    limit: int,
    lease: timedelta,
    per_endpoint: int | None,
    in_flight: Mapping[int, int] | None,
) -> list[Delivery]:
    cap = limit if per_endpoint is None else per_endpoint
    sending = {endpoint: count for endpoint, count in (in_flight or {}).items() if count > 0}
    result = await conn.execute(
        _claim_statement("in_shards" in key),
        {
            **key,
            "limit": limit,
            "lease": lease,
            "per_endpoint": cap,
            "full_endpoints": [e for e, count in sending.items() if count >= cap],
            "busy_endpoints": list(sending),
            "busy_counts": list(sending.values()),
        },
    )
    return sorted((Delivery(*row) for row in result.all()), key=lambda d: d.id)


@cache
def _claim_statement(spanning: bool) -> Any:
    full = bindparam("full_endpoints", type_=ARRAY(BigInteger()))
    due = (
        select(Outbox.shard, Outbox.id, Outbox.endpoint_id, Outbox.next_attempt_at)
        .where(
            in_array(Outbox.shard, shards_param()) if spanning else Outbox.shard == shard_param(),
            Outbox.dead_lettered_at.is_(None),
            Outbox.next_attempt_at <= func.now(),
            Outbox.endpoint_id != all_(full),
        )
        .order_by(Outbox.next_attempt_at)
        .limit(bindparam("limit", type_=Integer()))
        .subquery("due")
    )
    numbered = select(
        due.c.shard,
        due.c.id,
        due.c.endpoint_id,
        func.row_number()
        .over(partition_by=due.c.endpoint_id, order_by=(due.c.next_attempt_at, due.c.id))
        .label("place"),
    ).cte("numbered")
    busy = rows_of(
        "busy",
        endpoint_id=bindparam("busy_endpoints", type_=ARRAY(BigInteger())),
        in_flight=int_array("busy_counts"),
    )
    room = (
        select(Outbox.shard, Outbox.id)
        .join(numbered, numbered.c.id == Outbox.id)
        .outerjoin(busy, busy.c.endpoint_id == numbered.c.endpoint_id)
        .where(
            Outbox.shard == (numbered.c.shard if spanning else shard_param()),
            numbered.c.place + func.coalesce(busy.c.in_flight, 0)
            <= bindparam("per_endpoint", type_=Integer()),
        )
    )
    claimed = locked(room, "claimed", of=Outbox.table)
    return (
        update(Outbox.table)
        .where(
            Outbox.shard == (claimed.c.shard if spanning else shard_param()),
            Outbox.id == claimed.c.id,
            WebhookEndpoints.id == Outbox.endpoint_id,
        )
        .values(
            attempts=Outbox.attempts + 1,
            next_attempt_at=func.now() + bindparam("lease", type_=Interval()),
        )
        .returning(*_delivery_columns())
    )


async def delivered(conn: AsyncConnection, shard: int, ids: Sequence[int]) -> None:
    """Forget delivered rows of key ``shard`` (relay loop, after a 2xx; one statement
    per key). Primary key."""
    if ids:
        await conn.execute(_delivered_statement(), {"in_shard": shard, "ids": list(ids)})


@cache
def _delivered_statement() -> Any:
    return delete(Outbox.table).where(
        Outbox.shard == shard_param(),
        in_array(Outbox.id, bindparam("ids", type_=ARRAY(BigInteger()))),
    )


async def failed(conn: AsyncConnection, shard: int, failures: Sequence[Failure]) -> None:
    """Record failed attempts of rows of key ``shard`` (relay loop, one statement per
    key): each row is due again after its back-off, or dead-lettered when its budget is
    spent. Fenced by the claim's attempt count, so the report of a relay whose lease ran
    out (and whose row was claimed again) changes nothing. One ``UPDATE ... FROM
    unnest`` by primary key. The times are the relay's clock, parameters (the next
    attempt's computed here): Citus allows only immutable expressions inside a CASE of
    an UPDATE of a distributed table, and neither ``now()`` nor ``timestamptz +
    interval`` is."""
    if failures:
        now = datetime.now(UTC)
        await conn.execute(
            _failed_statement(),
            {
                "in_shard": shard,
                "now": now,
                "failed_ids": [f.id for f in failures],
                "claimed_attempts": [f.attempts for f in failures],
                "errors": [f.error for f in failures],
                "next_attempts": [
                    None if f.retry_in is None else now + f.retry_in for f in failures
                ],
            },
        )


@cache
def _failed_statement() -> Any:
    given = rows_of(
        "given",
        id=bindparam("failed_ids", type_=ARRAY(BigInteger())),
        attempts=bindparam("claimed_attempts", type_=ARRAY(Integer())),
        error=text_array("errors"),
        next_attempt_at=bindparam("next_attempts", type_=ARRAY(DateTime(timezone=True))),
    )
    now = bindparam("now", type_=DateTime(timezone=True))
    return (
        update(Outbox.table)
        .where(
            Outbox.shard == shard_param(),
            Outbox.id == given.c.id,
            Outbox.attempts == given.c.attempts,
            Outbox.dead_lettered_at.is_(None),
        )
        .values(
            last_error=given.c.error,
            next_attempt_at=func.coalesce(given.c.next_attempt_at, Outbox.next_attempt_at),
            dead_lettered_at=case((given.c.next_attempt_at.is_(None), now), else_=null()),
        )
    )


async def entries(conn: AsyncConnection, *, dead: bool, limit: int) -> list[Delivery]:
    """Fan-out across shard keys: dead letters, newest first, or deliveries still pending,
    next due first, of every key (``legato outbox list [--pending]``; an operator's
    command, never on a hot path). Served by ``ix_outbox_dead_letter``, or a scan of
    ``outbox``, which holds only undelivered work."""
    query = select(*_delivery_columns()).join(
        WebhookEndpoints.table, WebhookEndpoints.id == Outbox.endpoint_id
    )
    if dead:
        query = query.where(Outbox.dead_lettered_at.is_not(None)).order_by(
            Outbox.dead_lettered_at.desc(), Outbox.id.desc()
        )
    else:
        query = query.where(Outbox.dead_lettered_at.is_(None)).order_by(
            Outbox.next_attempt_at, Outbox.id
        )
    result = await conn.execute(fan_out(query.limit(limit)))
    return [Delivery(*row) for row in result.all()]


async def get(conn: AsyncConnection, delivery_id: int) -> Delivery | None:
    """Fan-out across shard keys: one delivery by its id, in whichever key holds it
    (``legato outbox show``; ids are unique across keys). The primary key of each key."""
    result = await conn.execute(
        fan_out(
            select(*_delivery_columns())
            .join(WebhookEndpoints.table, WebhookEndpoints.id == Outbox.endpoint_id)
            .where(Outbox.id == delivery_id)
        )
    )
    row = result.one_or_none()
    return None if row is None else Delivery(*row)


async def replay(conn: AsyncConnection, ids: Sequence[int] | None) -> list[int]:
    """Fan-out across shard keys: make dead letters of every key due now with a fresh
    attempt budget (``legato outbox replay``; an operator's command): those of ``ids``,
    or every one (None); returns the ids replayed. The last error is kept until the next
    attempt. ``ix_outbox_dead_letter``."""
    statement = update(Outbox.table).where(Outbox.dead_lettered_at.is_not(None))
    if ids is not None:
        statement = statement.where(
            in_array(Outbox.id, bindparam("ids", list(ids), type_=ARRAY(BigInteger())))
        )
    result = await conn.execute(
        fan_out(
            statement.values(
                dead_lettered_at=None, attempts=0, next_attempt_at=func.now()
            ).returning(Outbox.id)
        )
    )
    return sorted(result.scalars().all())


async def add_endpoint(
    conn: AsyncConnection,
    url: str,
    secret: str,
    event_types: Sequence[str],
    workflows: Sequence[str] | None,
) -> int:
    """Store an endpoint (``legato webhooks add``); its id. Events written from now on
    reach it; earlier ones do not."""
    result = await conn.execute(
        insert(WebhookEndpoints.table)
        .values(
            url=url,
            secret=secret,
            event_types=list(event_types),
            workflows=None if workflows is None else list(workflows),
        )
        .returning(WebhookEndpoints.id)
    )
    return int(result.scalar_one())


async def endpoints(conn: AsyncConnection) -> list[Endpoint]:
    """Every endpoint, oldest first (``legato webhooks list``). Primary key."""
    result = await conn.execute(
        select(
            WebhookEndpoints.id,
            WebhookEndpoints.url,
            WebhookEndpoints.secret,
            WebhookEndpoints.event_types,
            WebhookEndpoints.workflows,
            WebhookEndpoints.created_at,
        ).order_by(WebhookEndpoints.id)
    )
    return [
        Endpoint(id, url, secret, tuple(types), None if flows is None else tuple(flows), created_at)
        for id, url, secret, types, flows, created_at in result.all()
    ]


async def remove_endpoint(conn: AsyncConnection, endpoint_id: int) -> bool:
    """Delete an endpoint and, by the foreign key's cascade, its undelivered rows and dead
    letters (``legato webhooks remove``); False if there was none. Primary key (the
    cascade scans ``outbox``, which holds only undelivered work)."""
    result = await conn.execute(
        delete(WebhookEndpoints.table)
        .where(WebhookEndpoints.id == endpoint_id)
        .returning(WebhookEndpoints.id)
    )
    return result.scalar_one_or_none() is not None
