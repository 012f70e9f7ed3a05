"""On the cluster, every hot statement is a single-shard router statement.

The workload of ``tests/integration/test_shard_statements.py`` (every node kind, a
signal, a timer, a retry, a child run, a batched start, a cancel) runs on a distributed
install while every statement is recorded with its parameters (SQLAlchemy's cursor
events and the client's driver path). Each statement on a run-scoped table that is not
a marked fan-out (``params.FAN_OUT``) is EXPLAINed on the coordinator with the values it
was sent with, under the session's own ``force_custom_plan``; its plan must be one Citus
task (``Task Count: 1``) with no subplan evaluated on the coordinator first
(``Distributed Subplan``) and no rows pulled through it (``pull to coordinator``,
``repartition``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client, Runtime
from legato.engine.repositories.params import FAN_OUT
from legato.engine.transport import driver
from tests.e2e import flows
from tests.e2e.flows import Account, Plan
from tests.helpers import eventually
from tests.integration.test_shard_statements import (
    _STATEMENTS_NOT_PLANNED,
    RUN_SCOPED,
    Sent,
    _finished,
    recorded,
)

_COORDINATOR_WORK = ("Distributed Subplan", "pull to coordinator", "repartition")

# The hot statements Citus does not route yet, each by how its SQL begins, with its
# repository function and why: the rows of a batched INSERT ... SELECT FROM unnest(...)
# (``params.Unnest``) are computed on the coordinator and pulled through it, and a
# data-modifying CTE over them becomes a subplan; a statement joining a coordinator
# table with a distributed one runs the coordinator's part first. They still touch one
# key (tests/integration/test_shard_statements.py) and so one worker, at the price of
# a round trip from the coordinator more. Routing them (multi-row VALUES instead of
# unnest on a distributed install) is the work left; the test fails when one of them
# becomes routed, so this list only shrinks.
NOT_YET_ROUTED = {
    "WITH started AS": "runs.start: the run, its first event and queue row from unnest",
    "WITH inserted_tasks AS": "decisions.write: the decision's new tasks from unnest",
    "INSERT INTO {schema}.decide_queue (shard, run_id, reason) SELECT": (
        "decide_queue.enqueue: a batch of runs from unnest"
    ),
    "WITH freed_slots AS": "concurrency.release (report): slots on the coordinator",
    "WITH target AS": "signals.send: the signal row beside the run lookup",
}


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


async def _workload(engine: AsyncEngine, sent: list[Sent], monkeypatch: pytest.MonkeyPatch) -> None:
    run = driver.DriverStatements._run

    async def recording(self: Any, fairy: Any, compiled: Any, args: list[Any], params: Any) -> Any:
        sent.append(Sent(compiled.sql, tuple(args)))
        return await run(self, fairy, compiled, args, params)

    monkeypatch.setattr(driver.DriverStatements, "_run", recording)
    runtime = Runtime(engine, flows.app, poll_interval=0.2, grace_period=2.0)
    await runtime.start()
    try:
        async with Client(engine, app=flows.app) as client:
            handles: list[Any] = [
                await client.start(flows.sleepy, "nap"),
                await client.start(flows.branching, Account(name="ada", plan=Plan.PRO)),
                await client.start(flows.fanout, "one two three"),
                await client.start(flows.parent, 3),
                await client.start(flows.retrying, "again"),
                await client.start(flows.approval, "times out"),
            ]
            handles += await client.start_many(flows.sleepy, ["a", "b", "c", "d"])
            waiting = await client.start(flows.strict_approval, "ship")
            await client.signal(waiting.run_id, "approval", flows.Approval(approved=True))
            for handle in [*handles, waiting]:
                await handle.result(timeout=60)
            doomed = await client.start(flows.late_wait, "never")
            await client.cancel(doomed.run_id)
            await eventually(
                lambda: _finished(client, doomed.run_id), "the cancelled run to finish", timeout=60
            )
    finally:
        await runtime.stop()


async def test_every_hot_statement_is_a_single_shard_router_statement(
    citus_engine: AsyncEngine, citus_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with recorded(citus_engine) as sent:
        await _workload(citus_engine, sent, monkeypatch)
    checked: dict[str, list[str]] = {}
    async with citus_engine.connect() as conn:
        raw = await conn.get_raw_connection()
        session = raw.driver_connection
        assert session is not None
        for statement in sent:
            sql = statement.sql.strip()
            if sql.upper().startswith(_STATEMENTS_NOT_PLANNED) or FAN_OUT in sql:
                continue
            if sql in checked or not any(
                re.search(rf"\b{citus_schema}\.{table}\b", sql) for table in RUN_SCOPED
            ):
                continue
            plan = await session.fetch(f"EXPLAIN {sql}", *statement.params)
            checked[sql] = router_problems([str(row[0]) for row in plan])
    known = {head.format(schema=citus_schema): why for head, why in NOT_YET_ROUTED.items()}

    def listed(sql: str) -> str | None:
        return next((head for head in known if sql.startswith(head)), None)

    failures = {sql: p for sql, p in checked.items() if p and listed(sql) is None}
    routed_now = {listed(sql) for sql, p in checked.items() if not p} - {None}
    unseen = set(known) - {listed(sql) for sql in checked}
    assert not routed_now, f"routed now, drop from NOT_YET_ROUTED: {routed_now}"
    assert not unseen, f"not sent any more, drop from NOT_YET_ROUTED: {unseen}"
    assert len(checked) >= 20, f"only {len(checked)} statements on run-scoped tables"
    assert not failures, f"{len(failures)} of {len(checked)} hot statements are not routed:\n" + (
        "\n".join(f"{'; '.join(p)}\n    in: {sql[:400]}" for sql, p in failures.items())
    )
