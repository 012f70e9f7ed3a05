"""Retry delays: a pure function of the policy, the attempt and a deterministic seed."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from legato.flow.spec import RetrySpec


def base_delay(policy: RetrySpec, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``, before jitter: exponential, capped."""
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    if policy.initial_interval == 0:
        return 0.0
    try:
        raw = policy.initial_interval * policy.multiplier ** (attempt - 1)
    except OverflowError:
        return policy.max_interval
    return min(raw, policy.max_interval)


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
