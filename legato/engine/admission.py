"""Which available attempts a worker's limits admit: concurrency slots and rate tokens.

A worker whose tasks and queues declare no limit never builds an :class:`Admission`
and claims with the one-statement ``task_queue.claim``. With limits, a claim (of one
shard key and queue) is one transaction: lock up to ``window`` candidates of that key
and queue (best first), create and lock the free
slots and the buckets they need, admit candidates in order while their slots and
tokens last (:func:`admit`, pure), lease the admitted and hand them their slots,
write the buckets back. Everything not admitted stays queued, unlocked at commit,
in its place: it is taken by a later claim once a slot frees or a token refills.
Slots and buckets are global (not run-scoped): a limit counts every key's attempts.
A fair queue's candidates come in the fair claim's order (``fair_claims``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from legato.engine.repositories import concurrency, fair_claims, rate_limits, task_queue
from legato.engine.repositories.concurrency import SlotKey
from legato.flow import App
from legato.flow.tasks import concurrency_name, queue_limit_name, rate_name


@dataclass(frozen=True)
class Needs:
    """What admitting one candidate takes: a slot of each limit, a token of each bucket."""

    slots: Mapping[SlotKey, int]  # (limit, key) -> the limit's size
    tokens: Mapping[SlotKey, tuple[int, timedelta]]  # (bucket, key) -> (count, per)


def refill(tokens: float, elapsed: timedelta, count: int, per: timedelta) -> float:
    """A token bucket's level after ``elapsed``: ``count`` tokens per ``per``, never more
    than ``count`` (the burst). A negative ``elapsed`` (another claim's clock ran ahead)
    adds nothing."""
    gained = max(elapsed.total_seconds(), 0.0) * count / per.total_seconds()
    return min(float(count), tokens + gained)


def admit(
    needs: Sequence[Needs],
    free: Mapping[SlotKey, Sequence[int]],
    tokens: Mapping[SlotKey, float],
    want: int,
) -> tuple[list[tuple[int, list[tuple[str, str, int]]]], dict[SlotKey, float]]:
    """Admit candidates in order (best first) while ``want`` lasts: a candidate is
    admitted when every slot it needs has a free unit and every bucket it needs holds a
    whole token; otherwise it waits and later candidates are still considered (a full
    key does not block other keys). A bucket missing from ``tokens`` (another claim is
    spending it) admits nothing. Returns (candidate index, its slots) pairs and the
    buckets' levels after spending."""
    remaining = {key: list(slots) for key, slots in free.items()}
    left = dict(tokens)
    admitted: list[tuple[int, list[tuple[str, str, int]]]] = []
    for index, need in enumerate(needs):
        if len(admitted) >= want:
            break
        if any(not remaining.get(key) for key in need.slots):
            continue
        if any(left.get(key, 0.0) < 1.0 for key in need.tokens):
            continue
        taken = [(name, key, remaining[(name, key)].pop(0)) for name, key in need.slots]
        for key in need.tokens:
            left[key] -= 1.0
        admitted.append((index, taken))
    return admitted, left


class Admission:
    """The limits of the tasks a worker serves, and its limited claim."""

    def __init__(self, app: App, queues: Sequence[str], task_names: Sequence[str]) -> None:
        self.app = app
        self.queues = list(queues)
        self.task_names = list(task_names)
        self.queue_limits = {q: n for q, n in app.queue_limits.items() if q in self.queues}
        self.fair_queues = {t.queue for t in app.tasks.values() if t.fair_share is not None}

    @classmethod
    def of(cls, app: App, queues: Sequence[str], task_names: Sequence[str]) -> Admission | None:
        """The worker's admission, or None when nothing it serves is limited."""
        limited = any(q in app.queue_limits for q in queues) or any(
            t.concurrency is not None or t.rate_limit is not None
            for name, t in app.tasks.items()
            if name in task_names and t.queue in queues
        )
        return cls(app, queues, task_names) if limited else None

    def needs(self, candidate: task_queue.Candidate) -> Needs:
        definition = self.app.tasks[candidate.task_name]
        slots: dict[SlotKey, int] = {}
        tokens: dict[SlotKey, tuple[int, timedelta]] = {}
        queue_limit = self.queue_limits.get(candidate.queue)
        if queue_limit is not None:
            slots[(queue_limit_name(candidate.queue), "")] = queue_limit
        limit, name = definition.concurrency, concurrency_name(definition)
        if limit is not None and name is not None:
            slots[(name, definition.key_of(limit.key, candidate.input))] = limit.limit
        rate, bucket = definition.rate_limit, rate_name(definition)
        if rate is not None and bucket is not None:
            tokens[(bucket, definition.key_of(rate.key, candidate.input))] = (rate.count, rate.per)
        return Needs(slots=slots, tokens=tokens)

    def window(self, want: int) -> int:
        """How many candidates a claim wanting ``want`` looks at: more than it takes, so
        attempts waiting on a full key do not hide those behind them."""
        return max(4 * want, 64)

    async def claim(
        self,
        conn: AsyncConnection,
        shard: int,
        queue: str,
        owner: str,
        want: int,
        lease: timedelta,
    ) -> list[task_queue.Claimed]:
        """Lease up to ``want`` attempts of key ``shard`` in ``queue`` the limits admit
        (worker loop, in a transaction of its own; see the module docstring)."""
        lock = fair_claims if queue in self.fair_queues else task_queue
        candidates = await lock.lock_candidates(
            conn, shard, queue, self.task_names, self.window(want)
        )
        if not candidates:
            return []
        needs = [self.needs(c) for c in candidates]
        sizes = {key: size for need in needs for key, size in need.slots.items()}
        rates = {key: rate for need in needs for key, rate in need.tokens.items()}
        await concurrency.ensure(conn, sizes)
        free = await concurrency.lock_free(conn, sizes)
        await rate_limits.ensure(conn, {key: count for key, (count, _) in rates.items()})
        buckets = await rate_limits.lock(conn, list(rates))
        levels = {
            key: refill(b.tokens, b.now - b.updated_at, *rates[key]) for key, b in buckets.items()
        }
        admitted, left = admit(needs, free, levels, want)
        claimed = await task_queue.lease(
            conn,
            shard,
            [(candidates[i].queue, candidates[i].task_id) for i, _ in admitted],
            owner,
            lease,
        )
        started = {c.task_id for c in claimed}
        await concurrency.take(
            conn,
            [
                (*slot, candidates[i].task_id)
                for i, slots in admitted
                if candidates[i].task_id in started
                for slot in slots
            ],
            owner,
            lease,
        )
        await rate_limits.store(
            conn,
            {
                key: replace(
                    bucket, tokens=left[key], updated_at=max(bucket.now, bucket.updated_at)
                )
                for key, bucket in buckets.items()
            },
        )
        return claimed
