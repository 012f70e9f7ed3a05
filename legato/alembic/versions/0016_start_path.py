"""The start and signal paths: no foreign-key check the engine guarantees itself, and a
NOTIFY only when it can wake someone, at most a few per statement.

* ``run_events`` and ``signals`` lose their foreign keys onto partitioned ``runs``.
  Every row of theirs is written by a statement that has its run in hand: a start
  inserts the run and its first event in one statement, the decider appends under
  the run's row lock, a signal is inserted only for the RUNNING run its statement
  selected. Runs are never deleted row by row; retention drops a month's partitions
  of runs, tasks, signals and run_events together (and never one with running runs).
  The checks cost a start most of its server time (an RI probe per row through the
  partitioned parent: 24 of the 34 ms of a 500-run ``start_many``), so they go;
  docs/design.md records why. ``tasks`` keeps its key: it is not on the start path.
* The ``run_events`` trigger no longer notifies a run's first event (``run_started``,
  seq 1, written by the start itself): nobody can be following a run that did not
  exist, so a start sends only the deciders' NOTIFY. Its other notifications go out
  as one per up to 100 runs of the statement (payload ``<run_id>:<seq>`` items joined
  by spaces), not one per run: every notifying commit serialises on PostgreSQL's
  notify queue lock, and a decision batch appends to many runs at once.
* The queue triggers notify only the keys that got rows due within a second: a
  scheduled start or a retry's backoff wakes no one sooner, and the loops' polls take
  such rows when they are due.

Trigger names are unchanged (``legato.distributed`` drops them by name on Citus): the
functions behind them are replaced.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from legato.alembic.ddl_0001 import _q
from legato.migrations import migration_schema, record_revision

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The children whose foreign key onto runs goes (migration 0011 named them).
_UNCHECKED = ("run_events", "signals")
# (table, channel) of the queue wake-up functions 0011 made (notify_<table>_v2).
_QUEUES = (("task_queue", "tasks"), ("decide_queue", "decide"))
# How many runs one run_events notification names (its payload stays far below
# PostgreSQL's 8000-byte limit: 100 items of at most 58 characters).
EVENTS_PER_NOTIFY = 100


def _events_function(schema: str, first_events: bool) -> str:
    s = _q(schema)
    if first_events:  # 0001's body
        body = """
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_events_v1', run_id::text || ':' || max(seq)::text)
       FROM appended
      GROUP BY run_id;"""
    else:
        body = f"""
    -- A run's first event is its start's: no one follows a run before it exists.
    -- One notification per {EVENTS_PER_NOTIFY} runs, not one per run: every notifying
    -- commit serialises on PostgreSQL's notify queue lock.
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_events_v1', string_agg(item, ' '))
       FROM (SELECT run_id::text || ':' || max(seq)::text AS item,
                    (row_number() OVER () - 1) / {EVENTS_PER_NOTIFY} AS chunk
               FROM appended
              GROUP BY run_id
             HAVING max(seq) > 1) AS items
      GROUP BY chunk;"""
    return f"""
CREATE OR REPLACE FUNCTION {s}.notify_run_event_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN{body}
    RETURN NULL;
END;
$$"""


def _queue_function(
    schema: str, table: str, channel: str, due_only: bool, unleased_only: bool = False
) -> str:
    """The queue trigger's function; ``unleased_only`` (0019, task_queue): rows written
    leased to a worker (a hand-off) wake no one."""
    s = _q(schema)
    conditions = []
    if due_only:
        # clock_timestamp(), not now(): a long transaction's start is no guide to what
        # is due at its commit; a second's slack covers the senders' clocks.
        conditions.append("available_at <= clock_timestamp() + interval '1 second'")
    if unleased_only:
        conditions.append("lease_expires_at IS NULL")
    due = f"\n              WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"""
CREATE OR REPLACE FUNCTION {s}.{_q(f"notify_{table}_v2")}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The payload names the key with new work, so a loop takes from that key only;
    -- one notification per key the statement touched (a hot statement touches one).
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_{channel}_v1', keys.shard::text)
       FROM (SELECT DISTINCT shard FROM changed{due}) AS keys;
    RETURN NULL;
END;
$$"""


def upgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    for child in _UNCHECKED:
        op.execute(
            f"ALTER TABLE {s}.{_q(child)} DROP CONSTRAINT {_q(f'fk_{child}_shard_run_id_runs')}"
        )
    op.execute(_events_function(schema, first_events=False))
    for table, channel in _QUEUES:
        op.execute(_queue_function(schema, table, channel, due_only=True))
    record_revision(revision)


def downgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    for table, channel in _QUEUES:
        op.execute(_queue_function(schema, table, channel, due_only=False))
    op.execute(_events_function(schema, first_events=True))
    for child in _UNCHECKED:
        op.execute(
            f"ALTER TABLE {s}.{_q(child)} ADD CONSTRAINT {_q(f'fk_{child}_shard_run_id_runs')} "
            f"FOREIGN KEY (shard, run_id) REFERENCES {s}.runs (shard, id) ON DELETE CASCADE"
        )
    record_revision(down_revision)
