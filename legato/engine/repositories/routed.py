"""The per-key statements of a distributed install (Citus) where the single-node one
would not be a single router statement (``legato.schema.layout`` picks them).

Citus sends a statement whole to the one node of its key only when it can see the key
in it: every INSERT takes rows whose ``shard`` comes from a distributed table filtered
by the key (``INSERT ... SELECT ... FROM runs WHERE runs.shard = :in_shard``: a
pushed-down INSERT ... SELECT) or from a multi-row ``VALUES``; an INSERT fed by
``unnest`` alone is computed on the coordinator and its rows pulled through it, and a
data-modifying CTE that inserts is run first, as a subplan of its own. So here a write
that touches several tables is one statement per table, in the caller's transaction,
each routed to the key's node; the batch's rows still travel as array parameters
(one statement shape for any batch size), joined to the rows of ``runs`` they belong
to (``anchored``). Statements with RETURNING are not pushed down INSERT ... SELECTs (Citus
plans them badly), so a caller that needs to know what was written reads the row count.

Every statement here is a variant of a repository function, named in its docstring;
the function's docstring names its caller and its index.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Insert,
    Select,
    Text,
    Uuid,
    any_,
    bindparam,
    case,
    cast,
    column,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
)
from sqlalchemy import Sequence as Sequence_
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from legato.engine.repositories.notify import (
    decide_channel,
    events_channel,
    schema_of,
    tasks_channel,
)
from legato.engine.repositories.params import (
    SHARD_PARAM,
    Unnest,
    in_array,
    rows_of,
    shard_param,
    uuid_array,
)
from legato.schema import (
    DecideQueue,
    Outbox,
    RunEvents,
    Runs,
    RunStatus,
    Signals,
    WebhookEndpoints,
)
from legato.schema.types import uuid7

# The identity sequence of ``outbox.id`` (``legato`` is the schema placeholder the
# engine's schema_translate_map renames).
OUTBOX_IDS = Sequence_("outbox_id_seq", schema=Outbox.table.schema)


@cache
def anchored(
    batch: Unnest[Any], run_id: str = "run_id", **constants: ColumnElement[Any]
) -> Insert:
    """``batch.insert`` routed: each row joined to its run (``runs`` of key ``:in_shard``,
    by the field ``run_id``), its ``shard`` taken from the run, plus ``constants`` as
    ``batch.insert`` takes them. A row of a run not in the key is not written (there is
    none: every row of a batch is of its key)."""
    rows = batch.alias
    values = {batch.targets[name].key: batch.value(name) for name in batch.targets}
    values.update(constants)
    values["shard"] = Runs.shard
    source = (
        select(*values.values())
        .select_from(Runs.table.join(rows, Runs.id == rows.c[run_id]))
        .where(Runs.shard == shard_param())
    )
    return insert(batch.table.table).from_select(list(values), source)


def _of_runs(run_ids: str) -> Any:
    """The runs of key ``:in_shard`` among the array parameter ``run_ids``."""
    return (Runs.shard == shard_param(), in_array(Runs.id, uuid_array(run_ids)))


# --- runs.start_runs / runs.start_one ----------------------------------------------


async def start_runs(
    conn: AsyncConnection,
    shard: int,
    rows: Sequence[dict[str, Any]],
    reason: str,
    *,
    scheduled_now: datetime | None,
    children: Insert | None,
    params: dict[str, Any],
) -> None:
    """``runs.start_runs`` routed: the runs (a multi-row ``VALUES``, or for child runs
    ``children``, an INSERT ... SELECT from their parents' rows), then their first
    history events and their decide_queue rows, each an INSERT ... SELECT from the runs
    just written; in the caller's transaction. Primary keys, led by the key."""
    ids = sorted(row["id"] for row in rows)
    if children is not None:
        await conn.execute(children, params)
    else:
        await conn.execute(insert(Runs.table).values(list(rows)))
    keyed = {SHARD_PARAM: shard, "started_ids": ids, "reason": reason}
    await conn.execute(_first_events(), keyed)
    if scheduled_now is None:
        await conn.execute(_first_decisions(False), keyed)
    else:
        await conn.execute(_first_decisions(True), {**keyed, "now": scheduled_now})
    await wake(conn, events_channel, [f"{run_id}:1" for run_id in ids])
    await wake(conn, decide_channel, [str(shard)])


@cache
def _first_events() -> Insert:
    return insert(RunEvents.table).from_select(
        ["shard", "run_id", "seq", "type"],
        select(Runs.shard, Runs.id, literal(1, BigInteger()), literal("run_started", Text())).where(
            *_of_runs("started_ids")
        ),
    )


@cache
def _first_decisions(scheduled: bool) -> Insert:
    columns = ["shard", "run_id", "reason"]
    values: list[Any] = [Runs.shard, Runs.id, bindparam("reason", type_=Text())]
    if scheduled:
        columns.append("available_at")
        values.append(
            func.coalesce(Runs.scheduled_at, bindparam("now", type_=DateTime(timezone=True)))
        )
    rows = select(*values).where(*_of_runs("started_ids")).order_by(Runs.id)
    return insert(DecideQueue.table).from_select(columns, rows)


@cache
def children_statement(batch: Unnest[Any]) -> Insert:
    """Child runs from ``batch`` (``runs.start_runs`` with ``children``), each with its
    parent's trace context: an INSERT ... SELECT from the parents' rows, whose key the
    children share."""
    rows = batch.alias
    values = {batch.targets[name].key: batch.value(name) for name in batch.targets}
    values.update(
        trace_context=Runs.trace_context,
        status=literal(RunStatus.RUNNING.value, Text()),
        shard=Runs.shard,
    )
    source = (
        select(*values.values())
        .select_from(Runs.table.join(rows, Runs.id == rows.c["parent_run_id"]))
        .where(Runs.shard == shard_param())
    )
    return insert(Runs.table).from_select(list(values), source)


# --- decide_queue.enqueue ------------------------------------------------------------


@cache
def enqueue_statement(timed: bool) -> Insert:
    """``decide_queue.enqueue`` routed: the rows from the runs ``run_ids`` of the key, in
    run-id order, with the same conflict rule."""
    columns = ["shard", "run_id", "reason"]
    values: list[Any] = [Runs.shard, Runs.id, bindparam("reason", type_=Text())]
    if timed:
        columns.append("available_at")
        values.append(bindparam("available_at", type_=DateTime(timezone=True)))
    rows = select(*values).where(*_of_runs("run_ids")).order_by(Runs.id)
    statement = pg_insert(DecideQueue.table).from_select(columns, rows)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[DecideQueue.shard, DecideQueue.run_id],
        set_={
            DecideQueue.reason: excluded.reason,
            DecideQueue.available_at: case(
                (DecideQueue.failures > literal_column("0"), DecideQueue.available_at),
                else_=func.least(DecideQueue.available_at, excluded.available_at),
            ),
        },
    )


# --- signals.send / signals.send_now --------------------------------------------------


async def send_signal(conn: AsyncConnection, params: dict[str, Any]) -> bool:
    """``signals.send`` routed: the signal row from the run's row when it is RUNNING
    (its id a UUIDv7 made here: Citus cannot push down an INSERT ... SELECT whose column
    default is a SQL function, ``uuid7_v1()``), then, when one was written, the run's
    decision asked for (due at ``:now``); in the caller's transaction. False, writing
    nothing, when the run is not running."""
    added = await conn.execute(_signal_statement(), {**params, "signal_id": uuid7()})
    if added.rowcount == 0:
        return False
    await conn.execute(_signal_decision_statement(), params)
    await wake(conn, decide_channel, [str(params[SHARD_PARAM])])
    return True


@cache
def _signal_statement() -> Insert:
    running = select(
        Runs.shard,
        Runs.id,
        bindparam("signal_id", type_=Uuid()),
        bindparam("name", type_=Text()),
        cast(bindparam("payload", type_=Text()), JSONB),
    ).where(
        Runs.shard == shard_param(),
        Runs.id == bindparam("run_id", type_=Uuid()),
        Runs.status == RunStatus.RUNNING,
    )
    columns = ["shard", "run_id", "id", "name", "payload"]
    return insert(Signals.table).from_select(columns, running)


@cache
def _signal_decision_statement() -> Insert:
    rows = select(Runs.shard, Runs.id, bindparam("reason", type_=Text())).where(
        Runs.shard == shard_param(), Runs.id == bindparam("run_id", type_=Uuid())
    )
    statement = pg_insert(DecideQueue.table).from_select(["shard", "run_id", "reason"], rows)
    return statement.on_conflict_do_update(
        index_elements=[DecideQueue.shard, DecideQueue.run_id],
        set_={
            DecideQueue.reason: statement.excluded.reason,
            DecideQueue.available_at: func.least(
                DecideQueue.available_at, bindparam("now", type_=DateTime(timezone=True))
            ),
        },
    )


# --- decisions.write -------------------------------------------------------------------


async def write_decisions(
    conn: AsyncConnection,
    parts: Sequence[tuple[Any, bool]],
    moved: Any,
    params: dict[str, Any],
    *,
    enqueued: bool,
    history: Sequence[str],
) -> set[uuid.UUID]:
    """``decisions.write`` routed: each part with rows (``(statement, has rows)``, in the
    order the foreign keys need: tasks before their timers and queue rows) one statement,
    then the fenced moves, whose task ids it returns; in the decider's transaction. With
    the wake-ups the triggers would send: the workers' when attempts were ``enqueued``,
    the live tails' for the ``history`` payloads (``<run_id>:<last seq>``)."""
    for statement, has_rows in parts:
        if has_rows:
            await conn.execute(statement, params)
    result = await conn.execute(moved, params)
    if enqueued:
        await wake(conn, tasks_channel, [str(params[SHARD_PARAM])])
    await wake(conn, events_channel, list(history))
    return set(result.scalars())


# --- outbox.publish ------------------------------------------------------------------


async def publish(conn: AsyncConnection, lifecycle: dict[str, Any]) -> None:
    """``outbox.publish`` routed, in the caller's transaction: first the endpoints
    subscribed to each event's type, each pair with an outbox id drawn there (a read of
    the reference table ``webhook_endpoints``, which Citus runs on the coordinator's own
    placement; with no endpoint, the usual case, nothing more is sent); then the pairs
    of runs of key ``:in_shard`` whose workflow the endpoint takes, anchored to their
    runs. Two statements because Citus routes an INSERT ... SELECT only when it has
    neither the identity default (a sequence's values are drawn on the coordinator, so
    the rows are pulled through it) nor a reference table (then it plans one task per
    shard). ``webhook_endpoints`` whole; the runs' primary key, led by the key."""
    matched = (await conn.execute(_subscribed_statement(), {"types": lifecycle["types"]})).all()
    if not matched:
        return
    # ``lifecycle`` is ``outbox.published_params``: one entry per event in each array.
    events = [place - 1 for place, _, _, _ in matched]

    def each(name: str) -> list[Any]:
        return [lifecycle[name][event] for event in events]

    await conn.execute(
        _published_statement(),
        {
            SHARD_PARAM: lifecycle[SHARD_PARAM],
            "ids": [id for _, _, _, id in matched],
            "event_ids": each("event_ids"),
            "endpoint_ids": [endpoint for _, endpoint, _, _ in matched],
            "run_ids": each("run_ids"),
            "types": each("types"),
            "payloads": each("payloads"),
            "workflows": [None if w is None else json.dumps(list(w)) for _, _, w, _ in matched],
        },
    )


@cache
def _subscribed_statement() -> Select[Any]:
    wanted = (
        func.unnest(bindparam("types", type_=ARRAY(Text())))
        .table_valued(column("type", Text()), with_ordinality="place")
        .render_derived(name="wanted")
    )
    return (
        select(
            wanted.c.place,
            WebhookEndpoints.id,
            WebhookEndpoints.workflows,
            OUTBOX_IDS.next_value(),
        )
        .select_from(wanted)
        .join(WebhookEndpoints.table, wanted.c.type == any_(WebhookEndpoints.event_types))
        .order_by(wanted.c.place, WebhookEndpoints.id)
    )


@cache
def _published_statement() -> Insert:
    pairs = rows_of(
        "pairs",
        id=bindparam("ids", type_=ARRAY(BigInteger())),
        event_id=uuid_array("event_ids"),
        endpoint_id=bindparam("endpoint_ids", type_=ARRAY(BigInteger())),
        run_id=uuid_array("run_ids"),
        type=bindparam("types", type_=ARRAY(Text())),
        payload=bindparam("payloads", type_=ARRAY(Text())),
        workflows=bindparam("workflows", type_=ARRAY(Text())),
    )
    source = (
        select(
            pairs.c.id,
            pairs.c.event_id,
            pairs.c.endpoint_id,
            pairs.c.run_id,
            Runs.workflow_name,
            pairs.c.type,
            cast(pairs.c.payload, JSONB),
            Runs.shard,
        )
        .select_from(Runs.table.join(pairs, Runs.id == pairs.c.run_id))
        .where(
            Runs.shard == shard_param(),
            or_(
                pairs.c.workflows.is_(None),
                cast(pairs.c.workflows, JSONB).has_key(Runs.workflow_name),
            ),
        )
    )
    columns = ["id", "event_id", "endpoint_id", "run_id", "workflow_name", "event_type"]
    return insert(Outbox.table).from_select([*columns, "payload", "shard"], source)


# --- wake-ups ------------------------------------------------------------------------


async def wake(conn: AsyncConnection, channel: Callable[[str], str], payloads: list[str]) -> None:
    """NOTIFY ``channel`` once per payload from the coordinator's own session, inside the
    caller's transaction: delivered when it commits, never for a rollback. What the
    queue and history triggers send on one PostgreSQL; on a distributed install they
    are not installed (Citus would run them on the nodes, inside transactions it then
    cannot PREPARE), and a NOTIFY of the coordinator's session does not stop a
    two-phase commit: the coordinator commits its own transaction, it prepares only the
    nodes'. One statement that touches no table."""
    if payloads:
        await conn.execute(
            _wake_statement(), {"channel": channel(schema_of(conn)), "payloads": payloads}
        )


@cache
def _wake_statement() -> Select[Any]:
    each = rows_of("wake", payload=bindparam("payloads", type_=ARRAY(Text())))
    return select(func.pg_notify(bindparam("channel", type_=Text()), each.c.payload)).select_from(
        each
    )
