"""The options of ``@task`` that are values of their own: the ``Retry`` policy and
the ``Concurrency``, ``RateLimit`` and ``Cache`` a task declares, each checked when it
is made (``check_key_arity`` checks a key against the task's inputs once the task is
known)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from legato.errors import TaskDefinitionError
from legato.flow.fair_share import FairShare
from legato.flow.spec import RetrySpec
from legato.limits import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MULTIPLIER,
    MAX_DURATION,
    MAX_RATE_COUNT,
    check_name,
)


@dataclass(frozen=True)
class Retry:
    """Retry policy: ``attempts`` in all (1 = no retry), exponential backoff with cap and jitter.

    The delay before attempt ``n + 1`` is ``backoff * multiplier ** (n - 1)``,
    capped at ``max_backoff``, then reduced by up to ``jitter`` (a fraction) —
    deterministically, from the run, node, iteration and attempt. An exception
    is retried when it is an instance of ``retry_on`` and not of ``dont_retry_on``.
    """

    attempts: int = 3
    backoff: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_backoff: timedelta = timedelta(minutes=5)
    jitter: float = 0.2
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    dont_retry_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        _check_retry(self)

    def to_spec(self) -> RetrySpec:
        return RetrySpec(
            attempts=self.attempts,
            initial_interval=self.backoff.total_seconds(),
            multiplier=self.multiplier,
            max_interval=self.max_backoff.total_seconds(),
            jitter=self.jitter,
        )


def _check_retry(retry: Retry) -> None:
    def fail(option: str, rule: str) -> TaskDefinitionError:
        value = getattr(retry, option)
        return TaskDefinitionError(f"Retry({option}={value!r}): {option} {rule}")

    if not is_int(retry.attempts) or not 1 <= retry.attempts <= MAX_ATTEMPTS:
        raise fail("attempts", f"must be an int >= 1 (1 means no retry), at most {MAX_ATTEMPTS}")
    for option in ("backoff", "max_backoff"):
        value = getattr(retry, option)
        if not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_DURATION:
            raise fail(option, f"must be a datetime.timedelta from 0 to {MAX_DURATION.days} days")
    if retry.max_backoff < retry.backoff:
        raise fail("max_backoff", f"must be at least backoff={retry.backoff!r}, the first wait")
    if not _is_number(retry.multiplier) or not 1 <= retry.multiplier <= MAX_BACKOFF_MULTIPLIER:
        raise fail(
            "multiplier", f"must be a finite number >= 1, at most {MAX_BACKOFF_MULTIPLIER:g}"
        )
    if not _is_number(retry.jitter) or not 0 <= retry.jitter <= 1:
        raise fail("jitter", "must be a fraction between 0 and 1")
    for option in ("retry_on", "dont_retry_on"):
        value = getattr(retry, option)
        if not isinstance(value, tuple) or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in value
        ):
            raise fail(option, "must be a tuple of exception classes")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# A concurrency limit is one ``concurrency_slots`` row per unit.
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` attempts of the task leased at once, across all workers.

    With ``key``, per value of ``key(*inputs)`` (called with the task's inputs, its
    result made a string with ``str``): ``Concurrency(1, key=lambda c: c.customer_id)``
    runs one attempt per customer at a time. Tasks giving one ``name`` share one limit
    (each must declare the same ``limit``); without it, the limit is the task's own.
    """

    limit: int
    key: Callable[..., object] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not is_int(self.limit) or not 1 <= self.limit <= MAX_LIMIT:
            raise TaskDefinitionError(
                f"Concurrency(limit={self.limit!r}): limit must be an int from 1 to {MAX_LIMIT}"
            )
        _check_key_and_name("Concurrency", self.key, self.name)


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` attempts of the task started per ``per``, across all workers:
    a token bucket holding up to ``count`` tokens, refilled at ``count / per``.

    ``key`` and ``name`` as for :class:`Concurrency`: one bucket per key value, shared
    by the tasks giving one ``name``.
    """

    count: int
    per: timedelta
    key: Callable[..., object] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not is_int(self.count) or not 1 <= self.count <= MAX_RATE_COUNT:
            raise TaskDefinitionError(
                f"RateLimit(count={self.count!r}): count must be an int >= 1, "
                f"at most {MAX_RATE_COUNT}"
            )
        if not _positive_duration(self.per):
            raise TaskDefinitionError(
                f"RateLimit(per={self.per!r}): per must be a positive datetime.timedelta of "
                f"at most {MAX_DURATION.days} days"
            )
        _check_key_and_name("RateLimit", self.key, self.name)


@dataclass(frozen=True)
class Cache:
    """Reuse the task's output for ``expires`` instead of running it again.

    Outputs are keyed by the task's name and ``key(*inputs)`` (made a string with
    ``str``); without ``key``, by a hash of the task's JSON inputs, so equal inputs hit.
    """

    expires: timedelta
    key: Callable[..., object] | None = None

    def __post_init__(self) -> None:
        if not _positive_duration(self.expires):
            raise TaskDefinitionError(
                f"Cache(expires={self.expires!r}): expires must be a positive "
                f"datetime.timedelta of at most {MAX_DURATION.days} days"
            )
        _check_key_and_name("Cache", self.key, None)


def _positive_duration(value: object) -> bool:
    return isinstance(value, timedelta) and timedelta(0) < value <= MAX_DURATION


def _check_key_and_name(option: str, key: object, name: object) -> None:
    if key is not None and not callable(key):
        raise TaskDefinitionError(f"{option}(key={key!r}): key must be a function of the inputs")
    if name is not None:
        check_name(f"{option}: name", name, TaskDefinitionError)


def check_key_arity(
    label: str, limit: Concurrency | RateLimit | Cache | FairShare, arity: int
) -> None:
    """A limit's, cache's or fair share's ``key`` (and a fair share's ``weight`` function)
    is called with the task's inputs: one that cannot take them would fail on every
    attempt, far from the declaration."""
    functions = {"key": limit.key}
    if isinstance(limit, FairShare) and callable(limit.weight):
        functions["weight"] = limit.weight
    for option, function in functions.items():
        if function is None:
            continue
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):  # a builtin without a signature: not checkable
            continue
        try:
            signature.bind(*range(arity))
        except TypeError as error:
            raise TaskDefinitionError(
                f"{label}: {type(limit).__name__}({option}={function!r}) cannot take the "
                f"task's {arity} input(s) ({error}): {option} is called with the inputs, as "
                f"{option}(*inputs)"
            ) from None
