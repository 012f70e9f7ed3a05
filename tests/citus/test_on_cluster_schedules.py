"""tests/integration/test_schedules.py's in-process run timeout on the Citus cluster
(its other tests start ``legato`` processes without the test's ``LEGATO_SCHEMA``; the
schedule loop on the cluster: test_cluster_schedules.py)."""

from tests.integration.test_schedules import (
    test_run_timeout_fails_a_stuck_run_timed_out_and_cancels_its_attempt,
)

__all__ = ["test_run_timeout_fails_a_stuck_run_timed_out_and_cancels_its_attempt"]
