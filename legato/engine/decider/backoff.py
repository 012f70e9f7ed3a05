"""Back-off: the one exponential delay every retry in the engine waits (a task's retry,
a failed decision, a webhook delivery, a failed or crashed loop), and the task retry's
delay: a pure function of the policy, the attempt and a deterministic seed."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import TypeVar

from legato.flow.spec import RetrySpec

# Seconds or a timedelta: a timedelta multiplied by a power of two stays exact to the
# microsecond, which a round trip through float seconds would not promise.
Span = TypeVar("Span", float, timedelta)


def exponential(first: Span, failures: int, cap: Span, multiplier: float = 2.0) -> Span:
    """The delay after the ``failures``-th failure in a row: ``first`` after the first
    (and for ``failures`` below 1), times ``multiplier`` per failure after it, at most
    ``cap``."""
    if not first:
        return first  # zero stays zero, however large the factor grows
    try:
        raw = first * multiplier ** max(failures - 1, 0)
    except OverflowError:  # the factor (a float) or the product (a timedelta) outgrew its type
        return cap
    return min(raw, cap)


def base_delay(policy: RetrySpec, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``, before jitter: exponential, capped."""
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    return exponential(policy.initial_interval, attempt, policy.max_interval, policy.multiplier)


def jitter_fraction(seed: str) -> float:
    """A number in [0, 1) derived from ``seed`` (stable across processes and versions)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def retry_delay(policy: RetrySpec, attempt: int, seed: str) -> timedelta:
    """The delay before retrying after attempt ``attempt`` failed.

    ``base_delay`` reduced by up to ``policy.jitter`` of itself, so the result
    lies in ``[base * (1 - jitter), base]`` and never exceeds the cap.
    """
    base = base_delay(policy, attempt)
    delay = base * (1.0 - policy.jitter * jitter_fraction(seed))
    return timedelta(seconds=delay)


def retry_seed(run_id: object, node_id: str, iteration: int, attempt: int) -> str:
    """The jitter seed of one failed attempt."""
    return f"{run_id}/{node_id}/{iteration}/{attempt}"
