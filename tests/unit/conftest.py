"""Hypothesis profiles for the unit suite: ``ci`` (default) keeps it under a minute on 2 cores."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("LEGATO_HYPOTHESIS_PROFILE", "ci"))
