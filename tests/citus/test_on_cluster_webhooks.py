"""tests/integration/test_outbox.py on the Citus cluster: lifecycle events reach the
subscribed endpoints signed, a bad endpoint writes nothing. (Its CLI tests run
``legato`` without the test's ``LEGATO_SCHEMA``, so they stay single-node.)"""

from tests.integration.test_outbox import (
    client,
    runtime,
    test_a_bad_endpoint_is_one_error_line_and_writes_nothing,
    test_lifecycle_events_reach_subscribed_endpoints_signed,
)

__all__ = [
    "client",
    "runtime",
    "test_a_bad_endpoint_is_one_error_line_and_writes_nothing",
    "test_lifecycle_events_reach_subscribed_endpoints_signed",
]
