"""tests/integration/test_outbox.py on the Citus cluster: lifecycle events reach the
subscribed endpoints signed, failures back off and dead-letter and ``legato outbox
replay`` (a process with the test's ``LEGATO_SCHEMA``) makes them due again, a bad
endpoint writes nothing."""

from tests.integration.test_outbox import (
    client,
    runtime,
    test_a_bad_endpoint_is_one_error_line_and_writes_nothing,
    test_failures_back_off_then_dead_letter_and_the_cli_replays,
    test_lifecycle_events_reach_subscribed_endpoints_signed,
)

__all__ = [
    "client",
    "runtime",
    "test_a_bad_endpoint_is_one_error_line_and_writes_nothing",
    "test_failures_back_off_then_dead_letter_and_the_cli_replays",
    "test_lifecycle_events_reach_subscribed_endpoints_signed",
]
