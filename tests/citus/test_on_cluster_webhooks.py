"""tests/integration/test_outbox.py on the Citus cluster: lifecycle events reach the
subscribed endpoints signed, failures back off and dead-letter (the relay's clock a
parameter), replay."""

from tests.integration.test_outbox import *  # noqa: F403
