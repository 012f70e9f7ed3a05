"""On the cluster, every hot statement is a single-shard router statement.

The workload of ``tests/integration/test_shard_statements.py`` (every node kind, a
signal, a timer, a retry, a child run, a batched start, a cancel), with two subscribed
webhook endpoints (one for every workflow, one for a workflow) and a start on the
caller's own connection, runs on a distributed
install while every statement is recorded with its parameters (SQLAlchemy's cursor
events: on a distributed install nothing takes the client's driver path). Each statement
on a run-scoped table that is not a marked fan-out (``params.FAN_OUT``) is EXPLAINed on
the coordinator with the values it was sent with, under the session's own
``force_custom_plan``; its plan must be one Citus task (``Task Count: 1``) with no
subplan evaluated on the coordinator first (``Distributed Subplan``) and no rows pulled
through it (``pull to coordinator``, ``repartition``).
"""

from __future__ import annotations

import re

import asyncpg
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from legato import Client, Runtime, webhooks
from legato.engine.repositories.params import FAN_OUT
from legato.runtime import Roles
from tests.citus.cluster import Cluster
from tests.e2e import flows
from tests.helpers import eventually
from tests.integration.test_shard_statements import (
    _STATEMENTS_NOT_PLANNED,
    RUN_SCOPED,
    Sent,
    recorded,
    run_workload,
)
from tests.webhook_receiver import receiver

_COORDINATOR_WORK = ("Distributed Subplan", "pull to coordinator", "repartition")


def router_problems(plan: list[str]) -> list[str]:
    """What keeps a Citus EXPLAIN (its text lines) from being one router task; pure."""
    text = "\n".join(plan)
    problems = [f"the plan has {mark!r}" for mark in _COORDINATOR_WORK if mark in text]
    counts = re.findall(r"Task Count: (\d+)", text)
    if not counts:
        problems.append("no Citus task: planned on the coordinator")
    problems += [f"{count} tasks (shards)" for count in counts if count != "1"]
    return problems


def test_router_problems_reads_citus_plans() -> None:
    router = ["Custom Scan (Citus Adaptive)", "  Task Count: 1", "  Tasks Shown: All"]
    assert router_problems(router) == []
    assert router_problems(["Custom Scan (Citus Adaptive)", "  Task Count: 9"]) == [
        "9 tasks (shards)"
    ]
    pulled = [
        "Custom Scan (Citus INSERT ... SELECT)",
        "  INSERT/SELECT method: pull to coordinator",
    ]
    assert "the plan has 'pull to coordinator'" in router_problems(pulled)
    assert router_problems(["Seq Scan on runs"]) == ["no Citus task: planned on the coordinator"]


async def router_plans(engine: AsyncEngine, schema: str, sent: list[Sent]) -> dict[str, list[str]]:
    """Each distinct statement of ``sent`` on a run-scoped table of ``schema`` that is
    not a marked fan-out, EXPLAINed on the coordinator with the values it was sent with:
    what keeps its plan from being one router task (``router_problems``)."""
    checked: dict[str, list[str]] = {}
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        session = raw.driver_connection
        assert session is not None
        for statement in sent:
            sql = statement.sql.strip()
            if sql.upper().startswith(_STATEMENTS_NOT_PLANNED) or FAN_OUT in sql:
                continue
            if sql in checked or not any(
                re.search(rf"\b{schema}\.{table}\b", sql) for table in RUN_SCOPED
            ):
                continue
            try:
                plan = await session.fetch(f"EXPLAIN {sql}", *statement.params)
            except asyncpg.PostgresError as refused:
                checked[sql] = [f"Citus cannot plan it with its values: {refused}"]
                continue
            checked[sql] = router_problems([str(row[0]) for row in plan])
    return checked


async def _start_in_callers_transaction(engine: AsyncEngine, url: str) -> list[Sent]:
    """A start on the caller's own connection (an engine of the application's, which no
    Legato client adopted): what that engine sent."""
    callers = create_async_engine(make_url(url).set(drivername="postgresql+asyncpg"))
    try:
        with recorded(callers) as sent:
            async with Client(engine, app=flows.app) as client:
                async with callers.begin() as conn:
                    handle = await client.start(flows.sleepy, "mine", connection=conn)
                assert (await client.get_run(handle.run_id)).run.input == "mine"
    finally:
        await callers.dispose()
    return sent


async def test_every_hot_statement_is_a_single_shard_router_statement(
    citus_engine: AsyncEngine, citus_schema: str, citus_cluster: Cluster
) -> None:
    # Subscribed endpoints, so the decisions' lifecycle events are written to the outbox
    # (``routed.publish``) and the relay claims and reports them.
    async with receiver() as everything, receiver() as some:
        await webhooks.add_endpoint(citus_engine, everything.url, "secret")
        await webhooks.add_endpoint(citus_engine, some.url, "secret", workflows=["sleepy"])
        relay = Runtime(
            citus_engine,
            flows.app,
            roles=Roles(decider=False, worker=False, timer=False, deploy=False, relay=True),
            poll_interval=0.2,
        )
        with recorded(citus_engine) as sent:
            await relay.start()
            try:
                driven = await run_workload(citus_engine, timeout=60)
                sent += await _start_in_callers_transaction(citus_engine, citus_cluster.url)
                await eventually(lambda: bool(some.unique()), "a delivery to the 2nd endpoint")
            finally:
                await relay.stop()
    assert {r.event["workflow"] for r in some.unique().values()} == {"sleepy"}
    assert len(everything.unique()) > len(some.unique())
    # On a distributed install the client's start and signal are several statements in
    # a transaction (``legato.engine.repositories.routed``): none takes the driver path.
    assert not driven, driven
    checked = await router_plans(citus_engine, citus_schema, sent)
    assert len(checked) >= 20, f"only {len(checked)} statements on run-scoped tables"
    outbox = f"INSERT INTO {citus_schema}.outbox "
    assert any(sql.startswith(outbox) for sql in checked), "no outbox insert was checked"
    failures = {sql: problems for sql, problems in checked.items() if problems}
    assert not failures, f"{len(failures)} of {len(checked)} hot statements are not routed:\n" + (
        "\n".join(f"{'; '.join(p)}\n    in: {sql[:400]}" for sql, p in failures.items())
    )
