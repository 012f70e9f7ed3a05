"""A decide NOTIFY only when a decider sleeps: ``decider_sleep``, one flag per shard key.

PostgreSQL serialises the commits of transactions that have notified (each takes the
database's notify lock before its commit record and holds it through the flush), so a
NOTIFY per start caps concurrent starts near one client's rate. A decider that is
awake polls and takes on its own; only one that sleeps on LISTEN needs the NOTIFY.

* ``decider_sleep(shard, asleep)``: a decider that found nothing to do sets ``asleep``
  for the keys it holds (``decider_sleeps_v1``), then sleeps until a NOTIFY or its poll.
* The decide_queue triggers' function notifies a key only if its flag is set, and
  clears it in the same statement: of many concurrent starts, the first wakes the
  deciders, the others find the flag cleared and send nothing; a decider that never
  sleeps (a busy one) costs its starters no NOTIFY at all.
* No lost wake-up (docs/design.md, "A NOTIFY only for a sleeping decider"): each
  writer of decide_queue holds a shared advisory lock per key it wrote (from its
  trigger to its commit), taken before it reads the flag; ``decider_sleeps_v1`` takes
  the exclusive lock of every key without waiting (any writer in flight: ``busy``, the
  decider looks again shortly), then, in a new snapshot, looks for due work (``work``)
  before setting the flags (``asleep``). A writer that read the flag before the
  decider's exclusive lock committed before the decider looked; one that read it after
  waited for the decider's commit and sees the flag set.
* ``start_run_v1()`` refuses an infinite delay (``'infinity'``, ``'-infinity'``) and one
  over 3660 days as it refused a negative one, naming the value; and, as ``Client.start``
  does, a workflow name over 200 characters or with a control character and keys with a
  control character.

Citus (``legato.distributed``) drops the decide triggers and its routed statements
notify themselves; its deciders do not use the flags.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from legato.alembic.ddl_0001 import QUEUE_STORAGE, _q
from legato.alembic.sql_start import (
    FINITE_DELAY_CHECK,
    NEGATIVE_DELAY_CHECK,
    PRINTABLE_CHECK,
    start_run_function,
)
from legato.migrations import migration_schema, record_revision

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _lock_class(schema: str) -> str:
    """The advisory lock space of the flags: (this expression, the key)."""
    literal = (schema + ".decider_sleep").replace("'", "''")
    return f"hashtext('{literal}')"


def _notify_function(schema: str) -> str:
    s = _q(schema)
    return f"""
CREATE OR REPLACE FUNCTION {s}.notify_decide_queue_v2() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    due smallint[];
    sent bigint;
BEGIN
    -- The keys that got rows due within a second (0016): a later row wakes no one.
    SELECT array_agg(DISTINCT shard ORDER BY shard) INTO due
      FROM changed
     WHERE available_at <= clock_timestamp() + interval '1 second';
    IF due IS NULL THEN
        RETURN NULL;
    END IF;
    -- Held to this transaction's commit: a decider cannot set a key's flag (and then
    -- look for work that this commit is about to add) between this read and the commit.
    PERFORM pg_advisory_xact_lock_shared({_lock_class(schema)}, key)
       FROM unnest(due) AS key
      ORDER BY key;
    -- A new snapshot, after the locks: a flag set by a decider that held them is seen.
    WITH woken AS (
        UPDATE {s}.decider_sleep AS d
           SET asleep = false
         WHERE d.shard = ANY (due) AND d.asleep
     RETURNING d.shard
    )
    SELECT count(pg_notify(TG_TABLE_SCHEMA || '_decide_v1', woken.shard::text))
      INTO sent
      FROM woken;
    RETURN NULL;
END;
$$"""


def _sleeps_function(
    schema: str, floor: bool = False, changed_only: bool = False, create: str = "CREATE"
) -> str:
    """``decider_sleeps_v1``; with ``floor`` (migration 0019), ``decider_sleeps_v2``,
    whose look for due work starts at the decider's floor ``since``; with
    ``changed_only`` (migration 0020), one that writes only the flags not yet set."""
    s = _q(schema)
    signature = (
        "decider_sleeps_v2(keys smallint[], since timestamptz)"
        if floor
        else "decider_sleeps_v1(keys smallint[])"
    )
    from_floor = (
        "\n                  AND q.available_at >= coalesce(since, '-infinity'::timestamptz)"
        if floor
        else ""
    )
    on_conflict = (
        f"""DO NOTHING;
    UPDATE {s}.decider_sleep AS d SET asleep = true
     WHERE d.shard = ANY (keys) AND NOT d.asleep;"""
        if changed_only
        else """DO UPDATE SET asleep = true
     WHERE NOT d.asleep;"""
    )
    flags = f"""INSERT INTO {s}.decider_sleep AS d (shard, asleep)
    SELECT k, true FROM unnest(keys) AS k
        ON CONFLICT ON CONSTRAINT pk_decider_sleep {on_conflict}"""
    return f"""
{create} FUNCTION {s}.{signature} RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key smallint;
BEGIN
    -- Never waits: a writer of decide_queue in flight holds its key's shared lock, and
    -- its commit may add work the look below cannot see yet.
    FOREACH key IN ARRAY keys LOOP
        IF NOT pg_try_advisory_xact_lock({_lock_class(schema)}, key) THEN
            RETURN 'busy';
        END IF;
    END LOOP;
    -- A new snapshot, after the locks: every writer that read a flag before them has
    -- committed. The take's predicate (decide_queue.take), served by its index.
    IF EXISTS (SELECT 1
                 FROM {s}.decide_queue AS q
                WHERE q.shard = ANY (keys){from_floor}
                  AND q.available_at <= now()
                  AND q.quarantined_at IS NULL) THEN
        RETURN 'work';
    END IF;
    {flags}
    RETURN 'asleep';
END;
$$"""


def _previous_notify_function(schema: str) -> str:
    start_path = importlib.import_module("legato.alembic.versions.0016_start_path")
    return str(start_path._queue_function(schema, "decide_queue", "decide", due_only=True))


def upgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    op.create_table(
        "decider_sleep",
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("asleep", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("shard", name=op.f("pk_decider_sleep")),
        schema=schema,
    )
    op.execute(f"ALTER TABLE {s}.decider_sleep SET ({QUEUE_STORAGE})")
    op.execute(_sleeps_function(schema))
    op.execute(
        f"COMMENT ON FUNCTION {s}.decider_sleeps_v1(smallint[]) IS "
        "'a decider about to sleep: busy, work, or asleep (the keys flagged)'"
    )
    op.execute(_notify_function(schema))
    op.execute(
        start_run_function(
            schema,
            create="CREATE OR REPLACE",
            delay_check=FINITE_DELAY_CHECK,
            printable_check=PRINTABLE_CHECK,
        )
    )
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    op.execute(
        start_run_function(schema, create="CREATE OR REPLACE", delay_check=NEGATIVE_DELAY_CHECK)
    )
    op.execute(_previous_notify_function(schema))
    op.execute(f"DROP FUNCTION {s}.decider_sleeps_v1(smallint[])")
    op.drop_table("decider_sleep", schema=schema)
    record_revision(down_revision)
