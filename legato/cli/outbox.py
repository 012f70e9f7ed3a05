"""``legato webhooks add|list|remove``, ``legato outbox list|show|replay`` and ``legato
relay``: who receives run lifecycle events, what is waiting or dead-lettered, and the
process that delivers them."""

from __future__ import annotations

import argparse
import json
import logging
import os
from datetime import timedelta
from typing import Any

from legato import webhooks
from legato.cli import (
    add_startup_timeout,
    command,
    connected,
    group,
    nonempty,
    number_in,
    render,
)
from legato.db import create_engine
from legato.db.schema_names import resolve_schema
from legato.db.urls import resolve_url
from legato.engine.loops.relay import RelaySettings
from legato.engine.repositories.outbox import Delivery
from legato.errors import ConfigurationError, InvalidArgument
from legato.flow import App
from legato.runtime import Roles, Runtime

log = logging.getLogger("legato")

SECRET_ENV = "LEGATO_WEBHOOK_SECRET"
MAX_ID = 2**63 - 1
delivery_id = number_in(int, 1, MAX_ID, "an id (a positive whole number)")
limit = number_in(int, 1, 10_000, "a limit from 1 to 10000")
seconds = number_in(
    float, 0.0, 86_400.0, "a number of seconds above 0, at most 86400", above_low=True
)
attempts = number_in(int, 1, 1000, "a number of attempts from 1 to 1000")


def _when(moment: Any) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")


def _delivery_json(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "event_id": str(d.event_id),
        "event_type": d.event_type,
        "endpoint_id": d.endpoint_id,
        "url": d.url,
        "run_id": str(d.run_id),
        "workflow": d.workflow_name,
        "payload": d.payload,
        "created_at": d.created_at.isoformat(),
        "attempts": d.attempts,
        "next_attempt_at": d.next_attempt_at.isoformat(),
        "dead_lettered_at": None if d.dead_lettered_at is None else d.dead_lettered_at.isoformat(),
        "last_error": d.last_error,
    }


async def _add(args: argparse.Namespace) -> int:
    secret = args.secret if args.secret is not None else os.environ.get(SECRET_ENV, "")
    webhooks.check_endpoint(args.url, secret, args.event, args.workflow)  # before connecting
    async with connected(args) as client:
        endpoint = await webhooks.add_endpoint(
            client.engine, args.url, secret, events=args.event, workflows=args.workflow
        )
    print(endpoint)
    return 0


async def _list_endpoints(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        found = await webhooks.list_endpoints(client.engine)
    if args.json:
        rows = [
            {
                "id": e.id,
                "url": e.url,
                "event_types": list(e.event_types),
                "workflows": None if e.workflows is None else list(e.workflows),
                "created_at": e.created_at.isoformat(),
            }
            for e in found
        ]
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [str(e.id), e.url, ",".join(e.event_types), ",".join(e.workflows or ("*",))] for e in found
    ]
    for line in render.table(["ID", "URL", "EVENTS", "WORKFLOWS"], table) if table else []:
        print(line)
    if not table:
        print("no webhook endpoints (legato webhooks add URL --secret ...)")
    return 0


async def _remove(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        await webhooks.remove_endpoint(client.engine, args.id)
    print(f"removed webhook endpoint {args.id}")
    return 0


async def _list_outbox(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        found = await webhooks.dead_letters(client.engine, args.limit, pending=args.pending)
    if args.json:
        print(json.dumps([_delivery_json(d) for d in found], indent=2, default=str))
        return 0
    when = "NEXT ATTEMPT" if args.pending else "DEAD SINCE"
    rows = [
        [
            str(d.id),
            d.event_type,
            str(d.run_id),
            d.url,
            str(d.attempts),
            _when(d.next_attempt_at if args.pending else d.dead_lettered_at),
            render.compact(d.last_error or "", 60).strip('"'),
        ]
        for d in found
    ]
    if not rows:
        print("no pending deliveries" if args.pending else "no dead letters")
        return 0
    headers = ["ID", "EVENT", "RUN", "URL", "ATTEMPTS", when, "LAST ERROR"]
    for line in render.table(headers, rows):
        print(line)
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with connected(args) as client:
        found = await webhooks.delivery(client.engine, args.id)
    print(json.dumps(_delivery_json(found), indent=2, default=str))
    return 0


async def _replay(args: argparse.Namespace) -> int:
    if not args.all and not args.ids:
        raise InvalidArgument(
            "name the dead letters to replay (legato outbox replay ID ...) or pass --all"
        )
    if args.all and args.ids:
        raise InvalidArgument("pass either delivery ids or --all, not both")
    async with connected(args) as client:
        replayed = await webhooks.replay(client.engine, None if args.all else args.ids)
    print(f"replayed {len(replayed)} dead letter(s)" + (f": {replayed}" if replayed else ""))
    return 0


async def _relay(args: argparse.Namespace) -> int:
    # RelaySettings checks these too, in its parameters' names: say them as flags here.
    if not 0 < args.retry_delay <= args.max_retry_delay:
        raise ConfigurationError(
            f"--retry-delay {args.retry_delay:g} must be above 0 and at most --max-retry-delay "
            f"{args.max_retry_delay:g}: the first retry waits --retry-delay and later ones "
            "double up to --max-retry-delay"
        )
    if args.lease <= args.request_timeout:
        raise ConfigurationError(
            f"--lease {args.lease:g} must be longer than --request-timeout "
            f"{args.request_timeout:g}: a delivery's lease must outlast its request"
        )
    settings = RelaySettings(
        batch_size=args.batch_size,
        per_endpoint_concurrency=args.per_endpoint_concurrency,
        request_timeout=args.request_timeout,
        lease=timedelta(seconds=args.lease),
        max_attempts=args.max_attempts,
        retry_delay=timedelta(seconds=args.retry_delay),
        max_retry_delay=timedelta(seconds=args.max_retry_delay),
    )
    schema = resolve_schema(args.schema)
    engine = create_engine(resolve_url(args.database_url), schema)
    try:
        runtime = Runtime(
            engine,
            App(),
            roles=Roles(decider=False, worker=False, timer=False, deploy=False, relay=True),
            poll_interval=args.poll_interval,
            startup_timeout=args.startup_timeout,
            relay=settings,
        )
        await runtime.run_until_signalled(
            lambda: log.info("relay running on schema %r; Ctrl-C or SIGTERM stops it", schema)
        )
        log.info("relay stopped")
    finally:
        await engine.dispose()
    return 0


def _register_webhooks(commands: Any) -> None:
    sub = group(
        commands,
        "webhooks",
        "which endpoints receive which run lifecycle events",
        description="Manage webhook endpoints: deployment configuration kept in the database.",
    )
    add = command(
        sub,
        "add",
        "subscribe a URL to run lifecycle events; prints the endpoint's id",
        _add,
        f"""examples:
  legato webhooks add https://hooks.example.com/legato --secret "$(openssl rand -hex 32)"
  legato webhooks add https://ops.example.com/hook --event run.failed --event run.timed_out \\
      --event run.quarantined --workflow signup

Event types: {", ".join(e.value for e in webhooks.EventType)} (default: all).
The secret signs every request (Legato-Signature); receivers check it with
legato.webhooks.verify. Without --secret it is read from ${SECRET_ENV}.""",
    )
    add.add_argument("url", help="absolute http:// or https:// URL the relay POSTs to")
    add.add_argument("--secret", help=f"the signing secret (default: ${SECRET_ENV})")
    add.add_argument(
        "--event",
        action="append",
        metavar="TYPE",
        help="an event type to deliver; repeat for several (default: every type)",
    )
    add.add_argument(
        "--workflow",
        action="append",
        type=nonempty,
        metavar="NAME",
        help="deliver only this workflow's events; repeat for several (default: every workflow)",
    )
    listing = command(
        sub,
        "list",
        "every endpoint (secrets are not shown)",
        _list_endpoints,
        "examples:\n  legato webhooks list\n  legato webhooks list --json",
    )
    listing.add_argument("--json", action="store_true", help="print the endpoints as JSON")
    remove = command(
        sub,
        "remove",
        "unsubscribe an endpoint (drops its pending deliveries and dead letters)",
        _remove,
        "examples:\n  legato webhooks remove 3",
    )
    remove.add_argument("id", type=delivery_id, help="the endpoint's id (legato webhooks list)")


def _register_outbox(commands: Any) -> None:
    sub = group(
        commands,
        "outbox",
        "inspect and replay webhook deliveries",
        description="Inspect the outbox: dead letters, pending deliveries; replay dead letters.",
    )
    listing = command(
        sub,
        "list",
        "dead letters, newest first (or --pending deliveries)",
        _list_outbox,
        "examples:\n  legato outbox list\n  legato outbox list --pending --limit 20",
    )
    listing.add_argument(
        "--pending", action="store_true", help="deliveries still being tried, next due first"
    )
    listing.add_argument("--limit", type=limit, default=50, help="at most N rows (default: 50)")
    listing.add_argument("--json", action="store_true", help="print the deliveries as JSON")
    show = command(
        sub,
        "show",
        "one delivery as JSON: event, endpoint, attempts, last error",
        _show,
        "examples:\n  legato outbox show 42",
    )
    show.add_argument("id", type=delivery_id, help="the delivery's id (legato outbox list)")
    replay = command(
        sub,
        "replay",
        "deliver dead letters again, with a fresh attempt budget",
        _replay,
        "examples:\n  legato outbox replay 42 43\n  legato outbox replay --all",
    )
    replay.add_argument("ids", nargs="*", type=delivery_id, metavar="ID", help="dead letters")
    replay.add_argument("--all", action="store_true", help="replay every dead letter")


def _register_relay(commands: Any) -> None:
    defaults = RelaySettings()
    parser = command(
        commands,
        "relay",
        "deliver run lifecycle events from the outbox to webhook endpoints",
        _relay,
        """examples:
  legato relay
  legato relay --max-attempts 20 --request-timeout 5
  legato relay --per-endpoint-concurrency 2

Run one or more anywhere (claims use SKIP LOCKED). Needs the webhooks extra:
pip install 'legato[webhooks]'. Delivery is at least once: dedupe on Legato-Event-Id.
Each endpoint's deliveries go on their own: one that hangs holds only its own
--per-endpoint-concurrency requests (per relay process) until --request-timeout.""",
        log_level="INFO",
    )
    parser.add_argument(
        "--poll-interval", type=seconds, default=1.0, metavar="S", help="poll every S (default: 1)"
    )
    add_startup_timeout(parser)
    parser.add_argument(
        "--request-timeout",
        type=seconds,
        default=defaults.request_timeout,
        metavar="S",
        help=f"HTTP timeout per request (default: {defaults.request_timeout:g})",
    )
    parser.add_argument(
        "--lease",
        type=seconds,
        default=defaults.lease.total_seconds(),
        metavar="S",
        help="a claimed delivery is retried by another relay after S if this one dies "
        f"(default: {defaults.lease.total_seconds():g}; above --request-timeout)",
    )
    parser.add_argument(
        "--max-attempts",
        type=attempts,
        default=defaults.max_attempts,
        metavar="N",
        help=f"dead-letter a delivery after N failed attempts (default: {defaults.max_attempts})",
    )
    parser.add_argument(
        "--retry-delay",
        type=seconds,
        default=defaults.retry_delay.total_seconds(),
        metavar="S",
        help="back-off base, doubled per attempt, with jitter "
        f"(default: {defaults.retry_delay.total_seconds():g})",
    )
    parser.add_argument(
        "--max-retry-delay",
        type=seconds,
        default=defaults.max_retry_delay.total_seconds(),
        metavar="S",
        help=f"back-off cap (default: {defaults.max_retry_delay.total_seconds():g})",
    )
    parser.add_argument(
        "--batch-size",
        type=number_in(int, 1, 1000, "a batch size from 1 to 1000"),
        default=defaults.batch_size,
        metavar="N",
        help=f"deliveries in flight at once, across endpoints (default: {defaults.batch_size})",
    )
    parser.add_argument(
        "--per-endpoint-concurrency",
        type=number_in(int, 1, 1000, "a number of requests from 1 to 1000"),
        default=defaults.per_endpoint_concurrency,
        metavar="N",
        help="at most N requests in flight to one endpoint, so a slow one holds only its own "
        f"deliveries and a small receiver is not flooded (default: "
        f"{defaults.per_endpoint_concurrency})",
    )


def register(commands: Any) -> None:
    _register_webhooks(commands)
    _register_outbox(commands)
    _register_relay(commands)
