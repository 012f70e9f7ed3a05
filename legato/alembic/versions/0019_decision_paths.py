"""The decision's paths: a queue row written leased wakes no worker, and the decider
takes, locks and reads a batch in one call.

* The task_queue trigger's function notifies only for unleased rows. A decision that
  hands an attempt to the worker of its own process writes the queue row leased to it
  (``legato.engine.transport.handoff``): no worker can claim it, so the NOTIFY the
  trigger sent for it woke every other process's worker for an empty claim, and made
  the decision's commit take PostgreSQL's notify lock (which serialises the commits of
  notifying transactions). Rows due within a second and unleased still notify, once
  per key, as in 0016.
* ``decider_take_v1(keys, lim, since)``: a single-node decider's take, lock and read in
  one round trip (``decider_take.take_and_load``). Three statements, as the decider
  sent them one by one, each in a snapshot of its own taken after the one before it:
  the take of the oldest due decide rows of the keys (``FOR UPDATE SKIP LOCKED`` in a
  materialized CTE, then deleted by primary key), from ``since`` on when it is given
  (the decider's floor: its index range starts there, so rows a held snapshot keeps
  from vacuum below it are not walked); the taken runs locked ``FOR NO KEY UPDATE`` in
  id order with each one's last history seq; their attempts and unconsumed signals. It
  returns the runs' rows (``part`` 0, each with the oldest ``available_at`` taken) and
  then the snapshot's (``part`` 1) in one row shape, each filling its own columns.
* ``decider_sleeps_v2(keys, since)``: 0018's ``decider_sleeps_v1`` with the decider's
  floor: its look for due work starts where the decider's takes do, so it does not walk
  what a held snapshot keeps below them either (a row stamped before the floor is
  found by the take from the oldest row the decider makes once per poll interval).
  ``decider_sleeps_v1`` stays for the processes of the version before during a deploy.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

from legato.alembic.ddl_0001 import _q
from legato.migrations import migration_schema, record_revision

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_start_path = importlib.import_module("legato.alembic.versions.0016_start_path")
_decider_sleep = importlib.import_module("legato.alembic.versions.0018_decider_sleep")

# The run part's columns, then the snapshot part's (``runs._select``, its seq and the
# take's failures; ``tasks._snapshot_statement``): the function's result, in order.
TAKE_COLUMNS = """
    part smallint,
    id uuid, workflow_name text, workflow_version integer, status text, input jsonb,
    output jsonb, error jsonb, parent_run_id uuid, cancel_requested_at timestamptz,
    created_at timestamptz, finished_at timestamptz, timed_out_at timestamptz,
    input_unchecked boolean, trace_context jsonb, last_seq bigint, failures integer,
    taken_from timestamptz,
    task_run_id uuid, which integer, task_id uuid, node_id text, iteration integer,
    attempt integer, kind text, state text, task_name text, queue text,
    task_output jsonb, task_error jsonb, observed boolean, task_created_at timestamptz,
    started_at timestamptz, task_finished_at timestamptz, cached boolean"""

_NO_RUN = "NULL::uuid, NULL::text, NULL::integer, NULL::text, NULL::jsonb, NULL::jsonb, " + (
    "NULL::jsonb, NULL::uuid, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, "
    "NULL::timestamptz, NULL::boolean, NULL::jsonb, NULL::bigint, NULL::integer, "
    "NULL::timestamptz"
)


def _take_function(schema: str, by_key_arrays: bool = False) -> str:
    """``decider_take_v1``, or with ``by_key_arrays`` ``decider_take_v2`` (0021): the
    taken rows deleted through the primary key by arrays of their keys and run ids (an
    index condition whatever the statistics), not by a join with the taken rows."""
    s = _q(schema)
    name = "decider_take_v2" if by_key_arrays else "decider_take_v1"
    deleted = (
        f"""DELETE FROM {s}.decide_queue AS d
         WHERE d.shard = ANY (keys)
           AND d.run_id = ANY (ARRAY(SELECT taken.run_id FROM taken))"""
        if by_key_arrays
        else f"""DELETE FROM {s}.decide_queue AS d
         USING taken
         WHERE d.shard = taken.shard AND d.run_id = taken.run_id"""
    )
    how = "through the primary key by key arrays" if by_key_arrays else "by primary key"
    return f"""
CREATE FUNCTION {s}.{name}(keys smallint[], lim integer, since timestamptz)
RETURNS TABLE ({TAKE_COLUMNS})
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    failed integer[];
    held smallint[];  -- the keys of the taken runs
    oldest timestamptz;  -- the oldest available_at taken
BEGIN
    -- The take: the oldest due rows of the keys from ``since`` on, skipping those a
    -- report or another decider holds (ix_decide_queue_decider, one range per key,
    -- bounded below by ``since``), deleted {how}.
    WITH taken AS MATERIALIZED (
        SELECT q.shard, q.run_id
          FROM {s}.decide_queue AS q
         WHERE q.shard = ANY (keys)
           AND q.available_at >= coalesce(since, '-infinity'::timestamptz)
           AND q.available_at <= now()
           AND q.quarantined_at IS NULL
         ORDER BY q.available_at
         LIMIT lim
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        {deleted}
     RETURNING d.shard, d.run_id, d.failures, d.available_at
    )
    SELECT array_agg(gone.run_id ORDER BY gone.run_id),
           array_agg(gone.failures ORDER BY gone.run_id),
           array_agg(DISTINCT gone.shard),
           min(gone.available_at)
      INTO ids, failed, held, oldest
      FROM gone;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    -- A new snapshot: the runs locked in id order, each with its last history seq
    -- (primary keys); a writer of a taken run's rows waits on its decide row until this
    -- transaction ends, so what the statements below read stays what it decides on.
    RETURN QUERY
    SELECT 0::smallint,
           r.id, r.workflow_name, r.workflow_version, r.status, r.input, r.output,
           r.error, r.parent_run_id, r.cancel_requested_at, r.created_at, r.finished_at,
           r.timed_out_at, r.input_unchecked, r.trace_context,
           (SELECT coalesce(max(e.seq), 0)
              FROM {s}.run_events AS e
             WHERE e.shard = r.shard AND e.run_id = r.id),
           failed[array_position(ids, r.id)],
           oldest,
           NULL::uuid, NULL::integer, NULL::uuid, NULL::text, NULL::integer,
           NULL::integer, NULL::text, NULL::text, NULL::text, NULL::text, NULL::jsonb,
           NULL::jsonb, NULL::boolean, NULL::timestamptz, NULL::timestamptz,
           NULL::timestamptz, NULL::boolean
      FROM {s}.runs AS r
     WHERE r.shard = ANY (held) AND r.id = ANY (ids)
     ORDER BY r.id
       FOR NO KEY UPDATE OF r;
    -- Their attempts in creation order and their unconsumed signals oldest first; a
    -- signal rides in the attempt's columns (ix_tasks_shard_run_id_node_id_iteration_
    -- attempt; ix_signals_pending).
    RETURN QUERY
    SELECT 1::smallint, {_NO_RUN}, snapshot.*
      FROM (SELECT t.run_id AS run_id, 0 AS which, t.id AS id, t.node_id AS node_id,
                   t.iteration AS iteration, t.attempt AS attempt, t.kind, t.state,
                   t.task_name, t.queue, t.output, t.error, t.observed,
                   t.created_at AS created_at, t.started_at, t.finished_at, t.cached
              FROM {s}.tasks AS t
             WHERE t.shard = ANY (held) AND t.run_id = ANY (ids)
            UNION ALL
            SELECT g.run_id, 1, g.id, NULL, NULL, NULL, NULL, NULL, g.name, NULL,
                   g.payload, NULL, false, NULL, g.created_at, NULL, false
              FROM {s}.signals AS g
             WHERE g.shard = ANY (held) AND g.run_id = ANY (ids)
               AND g.consumed_at IS NULL) AS snapshot
     -- A signal's created_at rides in started_at: NULL sorts last, so its order is its id's.
     ORDER BY snapshot.run_id, snapshot.which, snapshot.created_at, snapshot.node_id,
              snapshot.iteration, snapshot.attempt, snapshot.id;
END;
$$"""


def upgrade() -> None:
    schema = migration_schema()
    op.execute(
        _start_path._queue_function(
            schema, "task_queue", "tasks", due_only=True, unleased_only=True
        )
    )
    op.execute(_take_function(schema))
    op.execute(_decider_sleep._sleeps_function(schema, floor=True))
    op.execute(
        f"COMMENT ON FUNCTION {_q(schema)}.decider_sleeps_v2(smallint[], timestamptz) IS "
        "'a decider about to sleep, looking from its floor: busy, work, or asleep'"
    )
    op.execute(
        f"COMMENT ON FUNCTION {_q(schema)}.decider_take_v1(smallint[], integer, timestamptz) IS "
        "'a single-node decider''s take, lock and read of a batch, in one call'"
    )
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    op.execute(f"DROP FUNCTION {_q(schema)}.decider_sleeps_v2(smallint[], timestamptz)")
    op.execute(f"DROP FUNCTION {_q(schema)}.decider_take_v1(smallint[], integer, timestamptz)")
    op.execute(_start_path._queue_function(schema, "task_queue", "tasks", due_only=True))
    record_revision(down_revision)
