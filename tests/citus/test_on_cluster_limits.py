"""tests/e2e/test_limits.py on the Citus cluster."""

from tests.e2e.conftest import _fresh_flow_counters, client, runtime
from tests.e2e.test_limits import *  # noqa: F403

__all__ = ["_fresh_flow_counters", "client", "runtime"]
