"""The body of ``start_run_v1()`` (migration 0013), shared by the migrations that define
it: 0013 creates it, 0018 replaces it with stricter checks of ``delay``, the name and
the keys, 0022 with the checks of the input's shape. A migration's
function must not change when this module does, so each variant is a parameter and
0013's text is what the defaults give."""

from __future__ import annotations

from legato.alembic.ddl_0001 import _q

# 0013's check: a negative delay is refused (an infinite one slipped through).
NEGATIVE_DELAY_CHECK = """\
    IF start_run_v1.delay IS NOT NULL AND start_run_v1.delay < interval '0' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() delay %s is negative', start_run_v1.delay),
            HINT = 'pass a delay of zero or more (interval ''10 minutes''), '
                   || 'or NULL to start now';
    END IF;
"""

# 0018's: an infinite delay (either sign) or one past the Client's longest duration
# (legato.limits.MAX_DURATION, 3660 days) is refused too, naming the value.
FINITE_DELAY_CHECK = """\
    IF start_run_v1.delay IS NOT NULL
       AND (NOT isfinite(start_run_v1.delay) OR start_run_v1.delay < interval '0'
            OR start_run_v1.delay > interval '3660 days') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() delay %s is %s', start_run_v1.delay,
                             CASE WHEN NOT isfinite(start_run_v1.delay) THEN 'not finite'
                                  WHEN start_run_v1.delay < interval '0' THEN 'negative'
                                  ELSE 'over the 3660-day limit' END),
            HINT = 'pass a finite delay of zero or more, at most 3660 days '
                   || '(interval ''10 minutes''), or NULL to start now';
    END IF;
"""

# 0018's: the names and keys Client.start refuses are refused here too: a workflow name
# over 200 characters or with a control character (so no message repeats a huge name),
# and keys with a control character.
PRINTABLE_CHECK = """\
    IF char_length(workflow) > 200 OR workflow ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() workflow %s is not a workflow name: '
                             || 'names are 1 to 200 printable characters',
                             quote_literal(left(workflow, 80))),
            HINT = 'pass the name a workflow was deployed under: start_run_v1(''signup'', ...)';
    END IF;
    IF start_run_v1.shard_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() shard_key %s contains a control character',
                             quote_literal(left(start_run_v1.shard_key, 80))),
            HINT = 'pass a tenant or account id of printable characters, '
                   || 'or NULL to spread runs by their id';
    END IF;
    IF start_run_v1.idempotency_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() idempotency_key %s contains a control '
                             || 'character', quote_literal(left(start_run_v1.idempotency_key, 80))),
            HINT = 'derive the key from what makes the start unique, in printable characters '
                   || '(''order:'' || NEW.id), or pass NULL';
    END IF;
"""


# 0022's: an input Client.start refuses is refused here too: nested deeper than 100
# levels (legato.limits.MAX_JSON_DEPTH; json.loads recurses once a level, so a deeper one
# stopped every decider that loaded the run), or holding a number of 4,300 digits or more
# before its point (Python's limit on converting text to int: no reader could load it).
JSON_SHAPE_CHECK = """\
    IF jsonb_path_exists(start_run_v1.input, 'strict $.**{100 to last} ? '
                         '(@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() input of workflow %s nests arrays and '
                             || 'objects more than 100 levels deep', quote_literal(workflow)),
            HINT = 'pass a flatter value, or store the document in a table of your own and '
                   || 'pass its id';
    END IF;
    IF jsonb_path_exists(start_run_v1.input, 'strict $.** ? (@.type() == "number" '
                         '&& (@ >= 1e4299 || @ <= -1e4299))') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() input of workflow %s holds a number of '
                             || 'more than 4299 digits', quote_literal(workflow)),
            HINT = 'pass such a number as a string';
    END IF;
"""


def start_run_function(
    schema: str,
    *,
    create: str = "CREATE",
    delay_check: str = NEGATIVE_DELAY_CHECK,
    printable_check: str = "",
    json_check: str = "",
) -> str:
    """The ``start_run_v1()`` definition: ``create`` is ``CREATE`` (0013) or ``CREATE OR
    REPLACE`` (0018, 0022), ``delay_check`` the block refusing a bad delay,
    ``printable_check`` the block refusing names and keys ``Client.start`` refuses (0018;
    none in 0013), ``json_check`` the block refusing inputs no reader can load (0022)."""
    s = _q(schema)
    # The limits are the Client's defaults as of this migration (legato.limits,
    # Client.max_payload_bytes, Client.idempotency_retention), written out: a
    # migration's function must not change when the package's constants do.
    return f"""
{create} FUNCTION {s}.start_run_v1(
    workflow text,
    input jsonb DEFAULT 'null',
    idempotency_key text DEFAULT NULL,
    delay interval DEFAULT NULL,
    shard_key text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deployed_version int;
    key_count int;
    new_shard smallint;
    new_id uuid;
    low int;
    starts_at timestamptz;
    existing uuid;
BEGIN
    IF workflow IS NULL OR workflow = '' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() needs a workflow name, got %s',
                             quote_nullable(workflow)),
            HINT = 'pass the name a workflow was deployed under: start_run_v1(''signup'', ...)';
    END IF;
{delay_check}{printable_check}    IF start_run_v1.shard_key IS NOT NULL
       AND (start_run_v1.shard_key = '' OR char_length(start_run_v1.shard_key) > 200) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() shard_key %s must be a non-empty string '
                             || 'of at most 200 characters',
                             quote_literal(left(start_run_v1.shard_key, 80))),
            HINT = 'pass a tenant or account id, or NULL to spread runs by their id';
    END IF;
    IF start_run_v1.idempotency_key IS NOT NULL
       AND (start_run_v1.idempotency_key = ''
            OR octet_length(start_run_v1.idempotency_key) > 512) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('legato: start_run_v1() idempotency_key %s must be a non-empty '
                             || 'string of at most 512 bytes',
                             quote_literal(left(start_run_v1.idempotency_key, 80))),
            HINT = 'derive the key from what makes the start unique '
                   || '(''order:'' || NEW.id), or pass NULL';
    END IF;
    IF octet_length(coalesce(start_run_v1.input, 'null')::text) > 1048576 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'program_limit_exceeded',
            MESSAGE = format('legato: start_run_v1() input of workflow %s is %s bytes, over the '
                             || '1048576-byte limit',
                             quote_literal(workflow), octet_length(start_run_v1.input::text)),
            HINT = 'store the large value in a table of your own and pass its id';
    END IF;
{json_check}
    SELECT d.version INTO deployed_version
      FROM {s}.workflow_definitions AS d
     WHERE d.name = workflow AND d.deployed;
    IF deployed_version IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'undefined_object',
            MESSAGE = format('legato: unknown workflow %s: no deployed version',
                             quote_literal(workflow)),
            HINT = 'deploy it with `legato deploy --app module:app` (a decider deploys '
                   || 'its app at start); deployed now: '
                   || coalesce((SELECT string_agg(d.name, ', ' ORDER BY d.name)
                                  FROM {s}.workflow_definitions AS d WHERE d.deployed),
                               'none');
    END IF;

    SELECT i.shard_count INTO key_count FROM {s}.installation AS i;
    new_id := {s}.uuid7_v1();
    IF coalesce(start_run_v1.shard_key, start_run_v1.idempotency_key) IS NULL THEN
        new_shard := {s}.shard_of_run_v1(new_id, key_count);
    ELSE
        -- Shards.of_key, then Shards.with_shard: the id keeps its time and sequence
        -- bits, and its low 16 bits are a random multiple of the count plus the key.
        new_shard := {s}.shard_of_key_v1(
            coalesce(start_run_v1.shard_key, start_run_v1.idempotency_key), key_count);
        low := floor(random() * (65536 / key_count))::int * key_count + new_shard;
        new_id := encode(
            set_byte(set_byte(uuid_send(new_id), 14, low >> 8), 15, low & 255), 'hex')::uuid;
    END IF;

    IF start_run_v1.idempotency_key IS NOT NULL THEN
        -- Concurrent starts with one key wait on the primary key's unique check, as
        -- Client.start's do: exactly one run is created, the others return its id.
        INSERT INTO {s}.idempotency_keys (shard, namespace, key, run_id, expires_at)
        VALUES (new_shard, workflow, start_run_v1.idempotency_key, new_id,
                now() + interval '30 days')
        ON CONFLICT ON CONSTRAINT pk_idempotency_keys DO NOTHING;
        IF NOT FOUND THEN
            SELECT k.run_id INTO existing
              FROM {s}.idempotency_keys AS k
             WHERE k.shard = new_shard AND k.namespace = workflow
               AND k.key = start_run_v1.idempotency_key;
            RETURN existing;
        END IF;
    END IF;

    IF start_run_v1.delay IS NOT NULL AND start_run_v1.delay > interval '0' THEN
        starts_at := now() + start_run_v1.delay;
    END IF;
    INSERT INTO {s}.runs (shard, id, workflow_name, workflow_version, status, input,
                          idempotency_key, scheduled_at, input_unchecked)
    VALUES (new_shard, new_id, workflow, deployed_version, 'RUNNING',
            coalesce(start_run_v1.input, 'null'), start_run_v1.idempotency_key, starts_at, true);
    INSERT INTO {s}.run_events (shard, run_id, seq, type)
    VALUES (new_shard, new_id, 1, 'run_started');
    -- The decide_queue trigger NOTIFYs the deciders with the key: delivered on commit.
    INSERT INTO {s}.decide_queue (shard, run_id, reason, available_at)
    VALUES (new_shard, new_id, 'started from sql', coalesce(starts_at, now()));
    RETURN new_id;
END;
$$"""
