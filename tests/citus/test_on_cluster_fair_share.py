"""tests/integration/test_fair_share.py on the Citus cluster: a trickle is claimed within
a few claims of a backlog, weights share the claims, unusable keys and unkeyed rows, on
a distributed install; and the fair claims (the claim, and a limited fair queue's lock
of its candidates) are single-shard router statements there.

The ordering tests run on a distributed schema of one shard key (``one_key_engine``, as
on one PostgreSQL), so every claim of the queue is the one fair claim they measure."""

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from legato.db import create_engine
from tests import fair_app
from tests.citus.cluster import Cluster
from tests.citus.conftest import drop_schema, install_distributed
from tests.citus.test_router_statements import router_plans
from tests.fair_app import Job, app, limited_flow, tenant_flow
from tests.integration.test_fair_share import (
    _fresh_records,
    test_a_trickle_is_claimed_within_a_few_claims_of_a_backlog_of_1000,
    test_an_unusable_key_fails_its_attempt_in_the_history_not_the_loop,
    test_rows_without_a_key_on_a_fair_queue_are_still_claimed,
    test_weights_share_the_claims_in_proportion,
)
from tests.integration.test_shard_statements import recorded

__all__ = [
    "_fresh_records",
    "test_a_trickle_is_claimed_within_a_few_claims_of_a_backlog_of_1000",
    "test_an_unusable_key_fails_its_attempt_in_the_history_not_the_loop",
    "test_rows_without_a_key_on_a_fair_queue_are_still_claimed",
    "test_weights_share_the_claims_in_proportion",
]


@pytest_asyncio.fixture
async def one_key_engine(citus_cluster: Cluster) -> AsyncIterator[AsyncEngine]:
    """A distributed schema of one shard key on the cluster."""
    schema = f"legato_{uuid.uuid4().hex[:10]}"
    await install_distributed(citus_cluster.url, schema, keys=1)
    engine = create_engine(citus_cluster.url, schema)
    yield engine
    await engine.dispose()
    await drop_schema(citus_cluster.url, schema)


async def test_the_fair_claims_are_single_shard_router_statements(
    citus_engine: AsyncEngine, citus_schema: str
) -> None:
    async with Client(citus_engine, app=app) as client:
        await client.deploy(app)
        tenants = [Job(tenant=f"t{n % 3}", n=n) for n in range(12)]
        limited = [Job(tenant=f"t{n % 2}", n=n, seconds=0.02) for n in range(8)]
        with recorded(citus_engine) as sent:
            async with Runtime(citus_engine, app, concurrency=8, poll_interval=0.1):
                handles = await client.start_many(tenant_flow, tenants)
                handles += await client.start_many(limited_flow, limited)
                results = [await h.result(timeout=60) for h in handles]
    assert results == [job.n for job in tenants + limited]
    assert fair_app.RUNNING["most"] <= 2  # the limited queue's Concurrency(2)
    fair = [s for s in sent if "fair_keys" in s.sql]
    checked = await router_plans(citus_engine, citus_schema, fair)
    # The worker's fair claim and the limited queue's lock of its candidates.
    assert len(checked) >= 2, list(checked)
    failures = {sql: problems for sql, problems in checked.items() if problems}
    assert not failures, "\n".join(
        f"{'; '.join(p)}\n    in: {sql[:400]}" for sql, p in failures.items()
    )
