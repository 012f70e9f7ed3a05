"""Retry delays: exponential, capped, jittered within bounds, deterministic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from legato.engine.decider import base_delay, retry_delay
from legato.flow.spec import RetrySpec


def test_exponential_then_capped() -> None:
    policy = RetrySpec(attempts=10, initial_interval=1, multiplier=2, max_interval=10, jitter=0)
    assert [base_delay(policy, n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert retry_delay(policy, 3, "seed").total_seconds() == 4


def test_jitter_is_deterministic_per_seed() -> None:
    policy = RetrySpec(initial_interval=10, jitter=0.5)
    assert retry_delay(policy, 1, "a") == retry_delay(policy, 1, "a")
    assert len({retry_delay(policy, 1, str(i)) for i in range(20)}) > 1


policies = st.builds(
    RetrySpec,
    attempts=st.integers(1, 50),
    initial_interval=st.floats(0, 100),
    multiplier=st.floats(1, 10),
    max_interval=st.floats(0, 10_000),
    jitter=st.floats(0, 1),
)


@given(policy=policies, seed=st.text(max_size=20))
def test_delays_are_monotone_capped_and_within_jitter(policy: RetrySpec, seed: str) -> None:
    previous = 0.0
    for attempt in range(1, 40):
        base = base_delay(policy, attempt)
        assert base >= previous
        assert base <= max(policy.max_interval, 0)
        previous = base
        delay = retry_delay(policy, attempt, f"{seed}/{attempt}").total_seconds()
        assert base * (1 - policy.jitter) - 1e-6 <= delay <= base + 1e-6
