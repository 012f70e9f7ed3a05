"""Raw DDL of migration 0001: what SQLAlchemy Core cannot express.

Partitions, storage parameters, index comments, the partition functions and the
history NOTIFY trigger. Identifiers are quoted by the dialect's preparer; inside
PL/pgSQL, dynamic names go through ``format('%I')``.

SQL functions and NOTIFY channels carry a ``_v1`` suffix so a later migration
can replace them without a flag day.
"""

from __future__ import annotations

from alembic import op

TASK_QUEUE_PARTITIONS = 8
MONTHS_AHEAD = 3
DAYS_AHEAD = 7

# Hot queue tables: room for HOT updates (a lease stamp does not move the row) and
# autovacuum that keeps up with the churn instead of letting dead tuples pile up.
QUEUE_STORAGE = (
    "fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, "
    "autovacuum_vacuum_cost_limit = 2000, autovacuum_vacuum_threshold = 100"
)

INDEX_COMMENTS = {
    "ix_decide_queue_available_at": "decider loop: claim runs to decide, oldest first",
    "ix_task_queue_dequeue": "worker loop: claim unleased work (leased rows leave the index)",
    "ix_task_queue_leased": "lease sweeper: leased rows by expiry",
    "ix_timers_unclaimed": "timer loop: due, unclaimed timers",
    "ix_tasks_run_id_node_id_iteration_attempt": "decider loop: snapshot load; attempt identity",
    "ix_tasks_open_waits": "Client.emit: open event waits by name",
    "ix_signals_pending": "decider loop: a run's unconsumed signals",
    "ix_runs_active": "partitions.drop: keep months with running runs; runs list --status",
    "ix_runs_workflow_name_id": "Client.list_runs: keyset pagination within a workflow",
    "ix_workflow_definitions_name": "Client.start / deploy: the deployed version of a workflow",
    "ix_workflow_definitions_name_spec_hash": "deploy: find the version of an unchanged spec",
    "ix_idempotency_keys_expires_at": "maintenance loop: prune expired idempotency keys",
    "ix_outbox_deliverable": "outbox relay: deliverable rows only",
    "ix_outbox_dead_letter": "operators: inspect and replay the dead letter",
}


def _q(name: str) -> str:
    return op.get_bind().dialect.identifier_preparer.quote(name)


def sql_literal(value: str) -> str:
    """A schema name as a PL/pgSQL string literal."""
    # Schema names are validated identifiers ([A-Za-z0-9_]), so no quote can occur.
    assert value.replace("_", "").isalnum(), value
    return f"'{value}'"


def upgrade(schema: str) -> None:
    s = _q(schema)
    for index, comment in INDEX_COMMENTS.items():
        op.execute(f"COMMENT ON INDEX {s}.{_q(index)} IS {_literal_text(comment)}")
    op.execute(f"ALTER TABLE {s}.decide_queue SET ({QUEUE_STORAGE})")
    for remainder in range(TASK_QUEUE_PARTITIONS):
        op.execute(
            f"CREATE TABLE {s}.{_q(f'task_queue_h{remainder}')} PARTITION OF {s}.task_queue "
            f"FOR VALUES WITH (MODULUS {TASK_QUEUE_PARTITIONS}, REMAINDER {remainder}) "
            f"WITH ({QUEUE_STORAGE})"
        )

    op.execute(f"""
CREATE FUNCTION {s}.uuid7_bound_v1(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$""")
    op.execute(
        f"COMMENT ON FUNCTION {s}.uuid7_bound_v1(timestamptz) IS "
        "'smallest UUIDv7 at ts: the range bound of the run-scoped partitions'"
    )

    op.execute(f"""
CREATE FUNCTION {s}.uuid7_v1() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT {_uuid7_expression()} $$""")
    op.execute(
        f"COMMENT ON FUNCTION {s}.uuid7_v1() IS "
        "'a new UUIDv7: uuidv7() on PostgreSQL 18, the same layout built by hand before'"
    )
    op.execute(f"ALTER TABLE {s}.signals ALTER COLUMN id SET DEFAULT {s}.uuid7_v1()")

    op.execute(ensure_partitions_function(schema))
    op.execute(
        f"COMMENT ON FUNCTION {s}.ensure_partitions_v1(int, int) IS "
        "'create run-scoped monthly and timer daily partitions ahead; "
        "returns the partitions this call created'"
    )

    op.execute(drop_partitions_function(schema))
    op.execute(
        f"COMMENT ON FUNCTION {s}.drop_partitions_v1(timestamptz, boolean) IS "
        "'retention: drop whole months older than older_than, never one with running runs'"
    )

    op.execute(f"""
CREATE FUNCTION {s}.notify_run_event_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- One notification per run per statement (its newest seq), not one per event:
    -- every notifying commit serialises on PostgreSQL's notify queue lock.
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_events_v1', run_id::text || ':' || max(seq)::text)
       FROM appended
      GROUP BY run_id;
    RETURN NULL;
END;
$$""")
    op.execute(
        f"CREATE TRIGGER run_events_notify_v1 AFTER INSERT ON {s}.run_events "
        "REFERENCING NEW TABLE AS appended "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {s}.notify_run_event_v1()"
    )
    create_queue_notify_triggers_v1(schema)
    op.execute(f"SELECT {s}.ensure_partitions_v1()")


def create_queue_notify_triggers_v1(schema: str) -> None:
    """The queue wake-up triggers as 0001 created them (0011's downgrade restores them).

    Work queued for a loop wakes it with no extra statement from whoever queued it:
    an insert into task_queue NOTIFYs the workers, an insert or update of decide_queue
    the deciders. Statement triggers: one notification per statement, and PostgreSQL
    folds identical notifications of one transaction."""
    s = _q(schema)
    for table, channel in (("task_queue", "tasks"), ("decide_queue", "decide")):
        op.execute(f"""
CREATE FUNCTION {s}.{_q(f"notify_{table}_v1")}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_{channel}_v1', '');
    RETURN NULL;
END;
$$""")
        events = "INSERT" if table == "task_queue" else "INSERT OR UPDATE"
        op.execute(
            f"CREATE TRIGGER {_q(f'{table}_notify_v1')} AFTER {events} ON {s}.{_q(table)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {s}.{_q(f'notify_{table}_v1')}()"
        )


def ensure_partitions_function(schema: str) -> str:
    """``ensure_partitions_v1`` as 0001 created it (0002's downgrade restores it)."""
    s = _q(schema)
    return f"""
CREATE OR REPLACE FUNCTION {s}.ensure_partitions_v1(months_ahead int DEFAULT {MONTHS_AHEAD},
                                         days_ahead int DEFAULT {DAYS_AHEAD})
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    sch constant text := {sql_literal(schema)};
    month_start timestamptz;
    day_start timestamptz;
    tbl text;
    part text;
    storage text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(sch || '.partitions'));
    FOR i IN 0..months_ahead LOOP
        month_start := (date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
                       + make_interval(months => i);
        FOREACH tbl IN ARRAY ARRAY['runs', 'tasks', 'signals', 'run_events'] LOOP
            part := tbl || '_p' || to_char(month_start AT TIME ZONE 'UTC', 'YYYYMM');
            CONTINUE WHEN to_regclass(format('%I.%I', sch, part)) IS NOT NULL;
            storage := CASE WHEN tbl = 'tasks' THEN ' WITH (fillfactor = 80)' ELSE '' END;
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                               sch, part, sch, tbl,
                               {s}.uuid7_bound_v1(month_start),
                               {s}.uuid7_bound_v1(month_start + interval '1 month')) || storage;
                RETURN NEXT part;
            EXCEPTION WHEN duplicate_table OR invalid_object_definition OR unique_violation THEN
                -- someone else got there first: they report it, not us
            END;
        END LOOP;
    END LOOP;
    FOR i IN 0..days_ahead LOOP
        day_start := (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
                     + make_interval(days => i);
        part := 'timers_p' || to_char(day_start AT TIME ZONE 'UTC', 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('%I.%I', sch, part)) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.timers FOR VALUES FROM (%L) TO (%L)',
                           sch, part, sch, day_start, day_start + interval '1 day');
            RETURN NEXT part;
        EXCEPTION WHEN duplicate_table OR invalid_object_definition OR unique_violation THEN
        END;
    END LOOP;
END;
$$"""


def drop_partitions_function(schema: str) -> str:
    """``drop_partitions_v1`` as 0001 created it (0002's downgrade restores it)."""
    s = _q(schema)
    return f"""
CREATE OR REPLACE FUNCTION {s}.drop_partitions_v1(older_than timestamptz,
                                                  dry_run boolean DEFAULT false)
RETURNS TABLE (partition text, action text)
LANGUAGE plpgsql AS $$
DECLARE
    sch constant text := {sql_literal(schema)};
    rec record;
    suffix text;
    month_end timestamptz;
    has_rows boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(sch || '.partitions'));
    FOR rec IN
        SELECT c.relname::text AS relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = format('%I.runs', sch)::regclass
         ORDER BY c.relname
    LOOP
        suffix := substring(rec.relname FROM '_p([0-9]{{6}})$');
        CONTINUE WHEN suffix IS NULL;
        month_end := (to_timestamp(suffix, 'YYYYMM') AT TIME ZONE 'UTC') + interval '1 month';
        month_end := month_end AT TIME ZONE 'UTC';
        CONTINUE WHEN month_end > older_than;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE status = %L)',
                       sch, rec.relname, 'RUNNING') INTO has_rows;
        IF has_rows THEN
            partition := rec.relname; action := 'kept: it still has running runs';
            RAISE NOTICE 'keeping partition %: it still has running runs', rec.relname;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT dry_run THEN
            -- Referencing tables first, so their foreign keys never see orphans.
            EXECUTE format('DROP TABLE IF EXISTS %I.%I', sch, 'run_events_p' || suffix);
            EXECUTE format('DROP TABLE IF EXISTS %I.%I', sch, 'signals_p' || suffix);
            EXECUTE format('DROP TABLE IF EXISTS %I.%I', sch, 'tasks_p' || suffix);
            EXECUTE format('ALTER TABLE %I.runs DETACH PARTITION %I.%I', sch, sch, rec.relname);
            EXECUTE format('DROP TABLE %I.%I', sch, rec.relname);
        END IF;
        partition := rec.relname;
        action := CASE WHEN dry_run THEN 'would drop' ELSE 'dropped' END;
        RETURN NEXT;
    END LOOP;
    FOR rec IN
        SELECT c.relname::text AS relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = format('%I.timers', sch)::regclass
         ORDER BY c.relname
    LOOP
        suffix := substring(rec.relname FROM '_p([0-9]{{8}})$');
        CONTINUE WHEN suffix IS NULL;
        CONTINUE WHEN ((to_timestamp(suffix, 'YYYYMMDD') AT TIME ZONE 'UTC') + interval '1 day')
                      AT TIME ZONE 'UTC' > least(older_than, now() - interval '1 day');
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I)', sch, rec.relname) INTO has_rows;
        IF has_rows THEN
            partition := rec.relname; action := 'kept: it still has timers to fire';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT dry_run THEN
            EXECUTE format('DROP TABLE %I.%I', sch, rec.relname);
        END IF;
        partition := rec.relname;
        action := CASE WHEN dry_run THEN 'would drop' ELSE 'dropped' END;
        RETURN NEXT;
    END LOOP;
END;
$$"""


def _uuid7_expression() -> str:
    """PostgreSQL 18's own ``uuidv7()``; before 18, a random UUID whose first 48 bits
    are the Unix time in milliseconds and whose version nibble is 7."""
    version = int(op.get_bind().exec_driver_sql("SHOW server_version_num").scalar_one())
    if version >= 180000:
        return "uuidv7()"
    return (
        "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing "
        "substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
        "FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
    )


def _literal_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def downgrade(schema: str) -> None:
    s = _q(schema)
    for table in ("task_queue", "decide_queue"):
        op.execute(f"DROP TRIGGER IF EXISTS {_q(f'{table}_notify_v1')} ON {s}.{_q(table)}")
        op.execute(f"DROP FUNCTION IF EXISTS {s}.{_q(f'notify_{table}_v1')}()")
    op.execute(f"DROP TRIGGER IF EXISTS run_events_notify_v1 ON {s}.run_events")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.notify_run_event_v1()")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.drop_partitions_v1(timestamptz, boolean)")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.ensure_partitions_v1(int, int)")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.uuid7_bound_v1(timestamptz)")
    op.execute(f"ALTER TABLE {s}.signals ALTER COLUMN id DROP DEFAULT")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.uuid7_v1()")
