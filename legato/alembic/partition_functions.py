"""The partition functions as migration 0002 made them (UTC arithmetic, the retention
guard), over a given set of monthly tables: 0002 creates them for the run tables of its
day, and a migration that adds a monthly table (0015's ``run_progress``) replaces them
with that table included, its downgrade restoring the previous set.
"""

from __future__ import annotations

from alembic import op

from legato.alembic import ddl_0001

# SQLSTATE of the refusal; ``partitions.drop`` turns it into a ConfigurationError.
RETENTION_REFUSED = "22023"  # invalid_parameter_value

# Monthly tables partitioned by run id, and the ones among them that reference ``runs``
# in the order retention drops them (referencing tables first).
MONTHLY_0002 = ("runs", "tasks", "signals", "run_events")
CHILDREN_0002 = ("run_events", "signals", "tasks")


def _q(name: str) -> str:
    return op.get_bind().dialect.identifier_preparer.quote(name)


def ensure_function(schema: str, monthly: tuple[str, ...] = MONTHLY_0002) -> str:
    """``ensure_partitions_v1`` creating the months ahead of every table of ``monthly``."""
    s = _q(schema)
    months, days = ddl_0001.MONTHS_AHEAD, ddl_0001.DAYS_AHEAD
    return f"""
CREATE OR REPLACE FUNCTION {s}.ensure_partitions_v1(months_ahead int DEFAULT {months},
                                                    days_ahead int DEFAULT {days})
RETURNS SETOF text
LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
    sch constant text := {ddl_0001.sql_literal(schema)};
    -- UTC wall-clock values: month and day steps never depend on a time zone.
    this_month constant timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
    today constant timestamp := date_trunc('day', now() AT TIME ZONE 'UTC');
    month_start timestamp;
    day_start timestamp;
    tbl text;
    part text;
    storage text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(sch || '.partitions'));
    FOR i IN 0..months_ahead LOOP
        month_start := this_month + make_interval(months => i);
        FOREACH tbl IN ARRAY ARRAY[{_array(monthly)}] LOOP
            part := tbl || '_p' || to_char(month_start, 'YYYYMM');
            CONTINUE WHEN to_regclass(format('%I.%I', sch, part)) IS NOT NULL;
            storage := CASE WHEN tbl = 'tasks' THEN ' WITH (fillfactor = 80)' ELSE '' END;
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                               sch, part, sch, tbl,
                               {s}.uuid7_bound_v1(month_start AT TIME ZONE 'UTC'),
                               {s}.uuid7_bound_v1((month_start + interval '1 month')
                                                  AT TIME ZONE 'UTC')) || storage;
                RETURN NEXT part;
            EXCEPTION WHEN duplicate_table OR invalid_object_definition OR unique_violation THEN
                -- someone else got there first: they report it, not us
            END;
        END LOOP;
    END LOOP;
    FOR i IN 0..days_ahead LOOP
        day_start := today + make_interval(days => i);
        part := 'timers_p' || to_char(day_start, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('%I.%I', sch, part)) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.timers FOR VALUES FROM (%L) TO (%L)',
                           sch, part, sch, day_start AT TIME ZONE 'UTC',
                           (day_start + interval '1 day') AT TIME ZONE 'UTC');
            RETURN NEXT part;
        EXCEPTION WHEN duplicate_table OR invalid_object_definition OR unique_violation THEN
        END;
    END LOOP;
END;
$$"""


def drop_function(schema: str, children: tuple[str, ...] = CHILDREN_0002) -> str:
    """``drop_partitions_v1`` dropping ``children`` (in order), then ``runs``, by month."""
    s = _q(schema)
    return f"""
CREATE OR REPLACE FUNCTION {s}.drop_partitions_v1(older_than timestamptz,
                                                  dry_run boolean DEFAULT false)
RETURNS TABLE (partition text, action text)
LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
    sch constant text := {ddl_0001.sql_literal(schema)};
    this_month constant timestamptz :=
        date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    rec record;
    suffix text;
    has_rows boolean;
BEGIN
    -- Retention never reaches the current month: its runs are still being written.
    IF older_than IS NULL OR older_than > this_month THEN
        RAISE EXCEPTION 'retention cut-off % is after the start of the current month (%)',
                        coalesce(older_than::text, 'NULL'), this_month
              USING ERRCODE = '{RETENTION_REFUSED}',
                    HINT = 'give a date no later than the first day of this month (UTC)';
    END IF;
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
        CONTINUE WHEN (to_date(suffix, 'YYYYMM') + interval '1 month') AT TIME ZONE 'UTC'
                      > older_than;
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
{_drop_children(children)}
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
        CONTINUE WHEN (to_date(suffix, 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
                      > least(older_than, now() - interval '1 day');
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


def _array(tables: tuple[str, ...]) -> str:
    return ", ".join(ddl_0001.sql_literal(table) for table in tables)


def _drop_children(children: tuple[str, ...]) -> str:
    return "\n".join(
        f"            EXECUTE format('DROP TABLE IF EXISTS %I.%I', sch, "
        f"{ddl_0001.sql_literal(table + '_p')} || suffix);"
        for table in children
    )
