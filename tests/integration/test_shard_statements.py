"""Every statement the loops and the client send on the hot paths touches one shard key.

The statements are not listed by hand: a workload that exercises every node kind, a
signal, a timer, a retry, a child run, a batched start and a cancel runs on one engine
while every statement it sends is recorded (SQLAlchemy's cursor events, and the
statements the client's driver path compiled). Each one that touches a run-scoped
table is then planned by PostgreSQL (PREPAREd and EXPLAINed under ``force_generic_plan``: the
plan a prepared statement gets whatever its parameters) and walked: every scan of a
run-scoped table must carry ``shard = $n``, every row inserted into one must take its
key from a single scalar parameter, and all of a statement's key parameters must hold
one value. The fan-outs (list_runs, emit by event name, stats, the dashboard,
retention, pruning) carry ``params.FAN_OUT`` in their SQL and are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from legato import Client, RunStatus, Runtime
from legato.engine.repositories.params import FAN_OUT
from tests.e2e import flows
from tests.e2e.flows import Account, Plan
from tests.helpers import eventually

RUN_SCOPED = (
    "runs",
    "tasks",
    "signals",
    "run_events",
    "decide_queue",
    "task_queue",
    "timers",
    "outbox",
    "idempotency_keys",
    "debounces",
    "run_progress",
)
_KEY_CONDITION = re.compile(r"\bshard\)? = \(?\$(\d+)\b")
_KEY_CONSTANT = re.compile(r"\bshard\)? = '?(\d+)'?(?:::smallint)?\b")
_STATEMENTS_NOT_PLANNED = ("BEGIN", "COMMIT", "ROLLBACK", "LISTEN", "UNLISTEN", "SHOW", "SET")


@dataclass(frozen=True)
class Sent:
    sql: str
    params: tuple[Any, ...]


@contextmanager
def recorded(engine: AsyncEngine) -> Iterator[list[Sent]]:
    """Every statement ``engine`` sends through SQLAlchemy inside the block."""
    sent: list[Sent] = []

    def statement(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        sent.append(Sent(sql, tuple(params) if isinstance(params, list | tuple) else ()))

    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", statement)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _conditions(node: dict[str, Any]) -> str:
    keys = ("Index Cond", "Filter", "Recheck Cond", "Join Filter", "Hash Cond", "TID Cond")
    return " ".join(str(node[key]) for key in keys if key in node)


async def _parents(engine: AsyncEngine) -> dict[str, str]:
    """Each run-scoped table and partition -> its run-scoped table."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT c.relname, coalesce(p.relname, c.relname) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
                "LEFT JOIN pg_class p ON p.oid = i.inhparent "
                "WHERE n.nspname = 'legato' AND c.relkind IN ('r', 'p')"
            )
        )
        return {child: parent for child, parent in rows.all() if parent in RUN_SCOPED}


async def _insert_columns(engine: AsyncEngine) -> dict[str, list[str]]:
    """Each table's columns in the order an INSERT's plan lists them (dropped ones too:
    the plan keeps a NULL in their place)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT c.relname, a.attname FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'legato' AND a.attnum > 0 "
                "ORDER BY c.relname, a.attnum"
            )
        )
        columns: dict[str, list[str]] = {}
        for table, column in rows.all():
            columns.setdefault(table, []).append(column)
        return columns


def _problems(
    sent: Sent, plan: dict[str, Any], parents: dict[str, str], columns: dict[str, list[str]]
) -> list[str]:
    """What makes ``sent`` touch more than one key (empty when it touches one)."""
    problems: list[str] = []
    key_values: set[str] = set()

    def note(position: str) -> None:
        index = int(position) - 1
        value = sent.params[index] if index < len(sent.params) else f"${position}"
        key_values.add(repr(value))

    for node in _nodes(plan):
        relation = parents.get(str(node.get("Relation Name", "")))
        if relation is None:
            continue
        if node.get("Node Type") == "ModifyTable":
            if node.get("Operation") == "Insert":
                problems.extend(_insert_problems(node, relation, columns[relation], sent.sql, note))
            continue
        if node.get("Node Type") == "Bitmap Index Scan":
            continue  # its heap scan's Recheck Cond is checked
        conditions = _conditions(node)
        keyed = _KEY_CONDITION.findall(conditions)
        constants = _KEY_CONSTANT.findall(conditions) if not keyed else []
        if not keyed and not constants:
            problems.append(f"{node['Node Type']} on {relation} has no shard = $n: {conditions}")
        for position in keyed:
            note(position)
        key_values.update(constants)
    if len(key_values) > 1:
        problems.append(f"touches {len(key_values)} keys: {sorted(key_values)}")
    return problems


def _insert_problems(
    node: dict[str, Any], relation: str, columns: list[str], sql: str, note: Any
) -> list[str]:
    """An INSERT's rows must take their key from one scalar parameter: the plan's value
    for ``shard`` is that parameter, or a column of a sub-select fed by the statement's
    only ``smallint`` parameter (the key: ``shard_param``), never an array of keys."""
    if re.search(r"::SMALLINT\[\]", sql):
        return [f"INSERT into {relation} takes keys from an array parameter"]
    source = node["Plans"][0] if node.get("Plans") else {}
    output = source.get("Output") or []
    if len(output) != len(columns):
        return [f"INSERT into {relation}: cannot find the value of shard in its plan"]
    value = str(output[columns.index("shard")])
    direct = re.fullmatch(r"\(?\$(\d+)\)?(?:::smallint)?", value)
    if direct is not None:
        note(direct.group(1))
        return []
    scalars = sorted(set(re.findall(r"\$(\d+)::SMALLINT\b", sql)))
    if re.fullmatch(r'"\*SELECT\*"\.\w+', value) and len(scalars) == 1:
        note(scalars[0])
        return []
    return [f"INSERT into {relation} takes its shard from {value!r}, not one parameter"]


async def _generic_plan(conn: AsyncConnection, sql: str) -> dict[str, Any]:
    """The plan ``sql`` gets as a prepared statement whatever its parameters (``$n``
    stay in the plan): PREPAREd, then EXPLAINed under ``force_generic_plan``."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    await driver.execute("SET plan_cache_mode = force_generic_plan")
    await driver.execute(f"PREPARE shard_check AS {sql}")
    try:
        types = await driver.fetchval(
            "SELECT parameter_types FROM pg_prepared_statements WHERE name = 'shard_check'"
        )
        nulls = ", ".join("NULL" for _ in types or ())
        explain = f"EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE shard_check({nulls})"
        if not types:
            explain = "EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE shard_check"
        raw_plan = await driver.fetchval(explain)
    finally:
        await driver.execute("DEALLOCATE shard_check")
    loaded = json.loads(raw_plan) if isinstance(raw_plan, str) else raw_plan
    plan: dict[str, Any] = loaded[0]["Plan"]
    return plan


async def _check(engine: AsyncEngine, statements: list[Sent]) -> tuple[int, list[str]]:
    parents = await _parents(engine)
    columns = await _insert_columns(engine)
    checked = 0
    failures: list[str] = []
    seen: set[str] = set()
    async with engine.connect() as conn:
        for sent in statements:
            sql = sent.sql.strip()
            if sql.upper().startswith(_STATEMENTS_NOT_PLANNED) or sql in seen or FAN_OUT in sql:
                continue
            if not any(re.search(rf"\blegato\.{table}\b", sql) for table in RUN_SCOPED):
                continue
            seen.add(sql)
            plan = await _generic_plan(conn, sql)
            checked += 1
            failures.extend(
                f"{problem}\n    in: {sql[:300]}"
                for problem in _problems(sent, plan, parents, columns)
            )
    return checked, failures


async def run_workload(engine: AsyncEngine, timeout: float = 30) -> list[str]:
    """The workload of the module's docstring on ``engine`` (record it with ``recorded``):
    returns the SQL its client sent on the driver path, which SQLAlchemy does not see
    (tests/citus/test_router_statements.py runs it on the cluster too)."""
    # In the distributed layout (a Citus installation's), forced when on one PostgreSQL.
    runtime = Runtime(engine, flows.app, poll_interval=0.2, grace_period=2.0, distributed=True)
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
            # One tenant's key: a client on one PostgreSQL starts a batch spanning keys
            # in one statement of the single-node layout; per key, the statement is the
            # one a distributed install sends for each key of a batch.
            handles += await client.start_many(flows.sleepy, ["a", "b", "c", "d"], shard_key="t")
            waiting = await client.start(flows.strict_approval, "ship")
            await client.signal(waiting.run_id, "approval", flows.Approval(approved=True))
            for handle in [*handles, waiting]:
                await handle.result(timeout=timeout)
            doomed = await client.start(flows.late_wait, "never")
            await client.cancel(doomed.run_id)
            await eventually(
                lambda: _finished(client, doomed.run_id),
                "the cancelled run to finish",
                timeout=timeout,
            )
            return client._driver.compiled()
    finally:
        await runtime.stop()


async def test_every_hot_statement_touches_one_shard_key(engine: AsyncEngine) -> None:
    """In the distributed layout (a Citus installation's), forced here on one PostgreSQL."""
    with recorded(engine) as sent:
        driven = await run_workload(engine)
    # The one-at-a-time start and the signal go through the driver path.
    assert driven, "the signal should take the driver path"
    sent += [Sent(sql, ()) for sql in driven]
    checked, failures = await _check(engine, sent)
    assert checked >= 20, f"only {checked} statements on run-scoped tables were recorded"
    assert not failures, f"{len(failures)} of {checked} statements span keys:\n" + "\n".join(
        failures
    )


async def _finished(client: Client, run_id: Any) -> bool:
    details = await client.get_run(run_id)
    return details.run.status is not RunStatus.RUNNING
