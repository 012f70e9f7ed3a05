"""The outbox relay: which lifecycle events a decision writes, and the loop that delivers
them to webhook endpoints over HTTP (httpx, the ``webhooks`` extra).

Events enter ``outbox`` in the transaction of the transition they describe (the decider
loop calls :func:`lifecycle_events` and writes them with ``outbox.publish``, or with its
CTE ``outbox.published`` inside the batch's history INSERT), so an event exists if and
only if its transition committed. The relay claims due deliveries with a lease
(``outbox.claim``), commits, POSTs each on its own — at most ``batch_size`` in flight,
and at most ``per_endpoint_concurrency`` to one endpoint, so a hanging endpoint holds
only its own deliveries — and records each outcome as it comes back: a 2xx deletes the
row; anything else backs it off exponentially with jitter until the
attempt budget is spent, then dead-letters it. A relay killed mid-delivery leaves its
rows leased; once the lease passes another relay delivers them again — at least once,
with the same ``Legato-Event-Id``.

The relay works the shard keys it holds (``HeldShards``): every held key is due on each
poll interval, a tick claims from one due key (round robin), a key whose claim found
deliveries stays due, and outcomes are recorded one statement per key and kind.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import JsonValue
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.engine.decider.backoff import exponential
from legato.engine.decider.model import Action, FinishRun
from legato.engine.loops.held import AllShards, HeldShards
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.repositories import outbox
from legato.errors import ConfigurationError
from legato.outages import is_database_error, one_line
from legato.schema import RunStatus, Shards, uuid7
from legato.webhook_signature import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    EventType,
    sign,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("legato.relay")

# Error types of an attempt or event wait that ran out of time (timer loop, worker,
# decider): a run failing with one of them is `run.timed_out`, not `run.failed`.
MAX_ERROR_CHARS = 500


def lifecycle_events(
    run_id: uuid.UUID, first: bool, actions: Sequence[Action]
) -> list[outbox.Event]:
    """The events of one decision (pure): ``run.started`` on the run's first decision,
    and the finish it makes, if any."""
    events: list[outbox.Event] = []
    if first:
        events.append(outbox.Event(uuid7(), run_id, EventType.STARTED, {"status": "RUNNING"}))
    for action in actions:
        if not isinstance(action, FinishRun):
            continue
        payload: dict[str, JsonValue] = {"status": action.status.value}
        if action.status is RunStatus.SUCCEEDED:
            kind, payload["output"] = EventType.SUCCEEDED, action.output
        elif action.status is RunStatus.CANCELLED:
            kind = EventType.CANCELLED
        else:  # FAILED, or TIMED_OUT by the workflow's execution_timeout
            timed_out = action.status is RunStatus.TIMED_OUT
            kind = EventType.TIMED_OUT if timed_out else EventType.FAILED
            if action.error is not None:
                payload["error"] = action.error.model_dump(mode="json")
        events.append(outbox.Event(uuid7(), run_id, kind, payload))
    return events


def quarantine_event(run_id: uuid.UUID, failures: int, error: str) -> outbox.Event:
    """``run.quarantined``: the decider parked the run after ``failures`` failed decisions."""
    return outbox.Event(
        uuid7(),
        run_id,
        EventType.QUARANTINED,
        {"status": "RUNNING", "failures": failures, "error": error},
    )


def retry_delay(
    attempts: int, base: timedelta, cap: timedelta, rng: random.Random | None = None
) -> timedelta:
    """How long a delivery waits after its ``attempts``-th failure: ``base`` doubled per
    attempt, at most ``cap``, then "equal jitter" — a uniform draw from its upper half —
    so endpoints that failed together (an outage) are not retried in lockstep."""
    ceiling = exponential(base, attempts, cap)
    return ceiling / 2 + ceiling / 2 * (rng or random).random()


def body_of(delivery: outbox.Delivery) -> bytes:
    """The request body: the event as compact JSON, the same on every attempt."""
    event = {
        "id": str(delivery.event_id),
        "type": delivery.event_type,
        "created_at": delivery.created_at.isoformat(),
        "run_id": str(delivery.run_id),
        "workflow": delivery.workflow_name,
        "data": delivery.payload,
    }
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()


def headers_of(delivery: outbox.Delivery, body: bytes, now: float) -> dict[str, str]:
    """The request's headers: the event id to dedupe on, and the signature of this attempt."""
    timestamp = int(now)
    return {
        "Content-Type": "application/json",
        "User-Agent": "legato-relay",
        EVENT_ID_HEADER: str(delivery.event_id),
        EVENT_TYPE_HEADER: delivery.event_type,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(delivery.secret, timestamp, body),
    }


@dataclass(frozen=True)
class RelaySettings:
    """How the relay delivers: ``legato relay``'s options, ``Runtime(relay=...)``."""

    batch_size: int = 50  # deliveries in flight at once, across endpoints
    per_endpoint_concurrency: int = 4  # of which at most this many to one endpoint
    request_timeout: float = 10.0  # seconds per HTTP request
    lease: timedelta = timedelta(seconds=60)  # a claimed delivery's lease
    max_attempts: int = 12  # then the dead letter
    retry_delay: timedelta = timedelta(seconds=5)  # the back-off's base
    max_retry_delay: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.request_timeout <= 0 or self.lease.total_seconds() <= self.request_timeout:
            raise ConfigurationError(
                f"the relay's lease ({self.lease.total_seconds():g}s) must exceed its request "
                f"timeout ({self.request_timeout:g}s, positive), or a slow delivery is claimed "
                "twice"
            )
        if self.max_attempts < 1 or self.batch_size < 1 or self.per_endpoint_concurrency < 1:
            raise ConfigurationError(
                f"max_attempts, batch_size and per_endpoint_concurrency must be at least 1, "
                f"got {self.max_attempts}, {self.batch_size} and {self.per_endpoint_concurrency}"
            )
        if self.retry_delay <= timedelta(0) or self.max_retry_delay < self.retry_delay:
            raise ConfigurationError(
                f"retry_delay must be positive and at most max_retry_delay, got "
                f"{self.retry_delay} and {self.max_retry_delay}"
            )


class RelayLoop(Loop):
    """Claims due outbox deliveries and POSTs them to their endpoints, each on its own:
    a tick records the outcomes that came back since the last one, then claims as many
    due deliveries as there is room for — ``batch_size`` in flight in all, at most
    ``per_endpoint_concurrency`` per endpoint — and starts sending them without waiting.
    A finished request frees its room and wakes the loop, so a healthy endpoint's
    deliveries keep flowing while another endpoint hangs until its request timeout."""

    name = "relay"

    def __init__(
        self,
        engine: AsyncEngine,
        settings: RelaySettings = RelaySettings(),
        *,
        shards: Shards,
        held: HeldShards | None = None,
        poll_interval: float = 1.0,
        restarts: RestartPolicy | None = None,
    ) -> None:
        try:
            import httpx  # noqa: F401  (checked here: fail at start, not at the first event)
        except ImportError:
            raise ConfigurationError(
                "the outbox relay needs httpx: pip install 'legato[webhooks]'"
            ) from None
        super().__init__(poll_interval=poll_interval, wakeups=None, channel=None, restarts=restarts)
        self.engine = engine
        self.settings = settings
        self.shards = shards
        self.held: HeldShards = AllShards(shards) if held is None else held
        # Held keys that may have due deliveries, in the order they are claimed from.
        self._due: dict[int, None] = {}
        self._all_due_at = -float("inf")  # when every held key was last made due
        self.delivered = 0
        self._http: httpx.AsyncClient | None = None
        self._in_flight: Counter[int] = Counter()  # requests open, per endpoint id
        self._sending: set[asyncio.Task[None]] = set()
        self._outcomes: list[tuple[outbox.Delivery, str | None]] = []  # to record

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            # Redirects are not followed: a 3xx is a failure the operator should see.
            # The pool is no limit of its own: the claim caps the requests in flight.
            self._http = httpx.AsyncClient(
                timeout=self.settings.request_timeout,
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            )
        return self._http

    async def on_stop(self) -> None:
        # The requests in flight end within the request timeout; their outcomes are
        # recorded so a graceful stop leaves nothing to deliver twice.
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        try:
            await self._record()
        except Exception as error:
            if not is_database_error(error):
                raise
            log.warning(
                "relay: could not record %d delivery outcome(s) while stopping (%s); "
                "they are sent again once their lease passes",
                len(self._outcomes),
                one_line(error),
            )
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def tick(self) -> bool:
        await self._record()
        held = self.held.held()
        now = time.monotonic()
        if now - self._all_due_at >= self.once_a_poll:
            self._all_due_at = now
            for key in held:
                self._due.setdefault(key, None)
        room = self.settings.batch_size - sum(self._in_flight.values())
        if room <= 0 or self.stopping:
            return False
        due = [key for key in self._due if key in held]
        # One key per claim (distributed), or every due key in one claim (one PostgreSQL).
        chosen = due[:1] if self.shards.distributed else due
        self._due = {key: None for key in due if key not in chosen}
        if not chosen:
            return False
        async with self.engine.begin() as conn:
            if self.shards.distributed:
                claimed = await outbox.claim(
                    conn,
                    chosen[0],
                    room,
                    self.settings.lease,
                    self.settings.per_endpoint_concurrency,
                    self._in_flight,
                )
            else:
                claimed = await outbox.claim_held(
                    conn,
                    chosen,
                    room,
                    self.settings.lease,
                    self.settings.per_endpoint_concurrency,
                    self._in_flight,
                )
        for delivery in claimed:
            self._in_flight[delivery.endpoint_id] += 1
            sending = asyncio.create_task(self._deliver(delivery))
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)
        # The key stays due: the endpoints this claim filled are skipped next time, so
        # the others' due deliveries are reached; then the other due keys in turn.
        if claimed:
            self._due.update(dict.fromkeys(chosen))
        return bool(self._due)

    async def _deliver(self, delivery: outbox.Delivery) -> None:
        try:
            error = await self._post(delivery)
        finally:
            self._in_flight[delivery.endpoint_id] -= 1
            if self._in_flight[delivery.endpoint_id] <= 0:
                del self._in_flight[delivery.endpoint_id]
        self._outcomes.append((delivery, error))
        self.nudge()

    async def _record(self) -> None:
        """Write the outcomes that came back in one transaction; they stay to be written
        again if it fails (a delivered row stays leased until then, so it is not sent
        twice meanwhile)."""
        outcomes = list(self._outcomes)
        if not outcomes:
            return
        done: defaultdict[int, list[int]] = defaultdict(list)
        failed: defaultdict[int, list[outbox.Failure]] = defaultdict(list)
        failures: list[tuple[outbox.Delivery, outbox.Failure]] = []
        for d, error in outcomes:
            if error is None:
                done[d.shard].append(d.id)
            else:
                failure = outbox.Failure(d.id, d.attempts, error, self._retry_in(d))
                failed[d.shard].append(failure)
                failures.append((d, failure))
        async with self.engine.begin() as conn:
            for shard in sorted(done.keys() | failed.keys()):
                await outbox.delivered(conn, shard, done[shard])
                await outbox.failed(conn, shard, failed[shard])
        del self._outcomes[: len(outcomes)]
        self.delivered += sum(len(ids) for ids in done.values())
        for d, failure in failures:
            if failure.retry_in is None:
                log.error(
                    "webhook delivery %d (%s of run %s to %s) dead-lettered after %d attempts: "
                    "%s; `legato outbox replay %d` once the endpoint is fixed",
                    d.id, d.event_type, d.run_id, d.url, d.attempts, failure.error, d.id,
                    extra={"run_id": str(d.run_id)},
                )  # fmt: skip
            else:
                log.warning(
                    "webhook delivery %d to %s failed (attempt %d of %d): %s; retrying in %.1fs",
                    d.id, d.url, d.attempts, self.settings.max_attempts, failure.error,
                    failure.retry_in.total_seconds(),
                    extra={"run_id": str(d.run_id)},
                )  # fmt: skip

    def _retry_in(self, delivery: outbox.Delivery) -> timedelta | None:
        """The back-off after this failed attempt, or None: the budget is spent."""
        if delivery.attempts >= self.settings.max_attempts:
            return None
        return retry_delay(
            delivery.attempts, self.settings.retry_delay, self.settings.max_retry_delay
        )

    async def _post(self, delivery: outbox.Delivery) -> str | None:
        """POST one delivery; None when the endpoint answered 2xx, else why not."""
        import httpx

        body = body_of(delivery)
        try:
            response = await self._client().post(
                delivery.url, content=body, headers=headers_of(delivery, body, time.time())
            )
        except httpx.TimeoutException:
            return f"timed out after {self.settings.request_timeout:g}s"
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            return f"{type(error).__name__}: {one_line(error)}"[:MAX_ERROR_CHARS]
        if response.is_success:
            return None
        return f"HTTP {response.status_code}: {response.text[:200]}"[:MAX_ERROR_CHARS]
