"""tests/integration/test_cli_runtime.py's commands and processes on the Citus cluster:
``legato decider``, ``worker`` and ``timer`` as real processes run an order to its end,
``legato runs start | show | list``. The processes get the test's schema by
``LEGATO_SCHEMA`` (``tests.helpers.spawn_legato`` passes a fixture's settings on)."""

from tests.integration.test_cli_runtime import (
    client,
    test_decider_worker_and_timer_processes_run_an_order,
    test_start_show_and_list,
)

__all__ = [
    "client",
    "test_decider_worker_and_timer_processes_run_an_order",
    "test_start_show_and_list",
]
