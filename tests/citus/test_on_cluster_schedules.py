"""tests/integration/test_schedules.py on the Citus cluster: ticks, catch-up, pause and
resume, trigger, the schedule loop starting runs in their keys."""

from tests.integration.test_schedules import *  # noqa: F403
