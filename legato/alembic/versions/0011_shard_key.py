"""The shard key: a ``shard`` column on every run-scoped row, first in every key.

Every run-scoped table gets ``shard smallint NOT NULL``, filled from the run id by the
same function ``legato.schema.shards.Shards.of_run`` computes (the run id's low 16 bits
modulo the key count), so runs in flight keep working across the upgrade; the
idempotency keys get the key of their idempotency key, as a new start computes it. The
key leads every primary key, the foreign keys to ``runs`` and the queues' take indexes,
so each hot statement filters every table by one key (docs/schema.md, "Shard keys").

The number of keys is fixed here and recorded in ``installation``: from
``config.attributes["legato_shard_count"]`` (``legato db upgrade --shards N``), else
``LEGATO_SHARD_COUNT``, else 16. ``shard_owners`` holds the loops' leases on keys.

The queue triggers now say which key has work: the payload of a decide or tasks
notification is the key (one notification per key a statement touched).

Backfilling rewrites every run-scoped row: on a large database, run it in a quiet
window (docs/operations.md, "Upgrading to the shard key").

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from legato.alembic.ddl_0001 import (
    QUEUE_STORAGE,
    _literal_text,
    _q,
    create_queue_notify_triggers_v1,
)
from legato.migrations import migration_schema, record_revision
from legato.schema.shards import DEFAULT_SHARD_COUNT, shard_count_setting

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARD_COUNT_ATTRIBUTE = "legato_shard_count"

# Each run-scoped table: (the column its key is computed from, the new primary key).
_KEYED = {
    "runs": ("id", ("shard", "id")),
    "tasks": ("run_id", ("shard", "run_id", "id")),
    "signals": ("run_id", ("shard", "run_id", "id")),
    "run_events": ("run_id", ("shard", "run_id", "seq")),
    "decide_queue": ("run_id", ("shard", "run_id")),
    "task_queue": ("run_id", ("shard", "queue", "task_id")),
    "timers": ("run_id", ("shard", "fire_at", "id")),
    "outbox": ("run_id", ("shard", "id")),
    "idempotency_keys": ("key", ("shard", "namespace", "key")),
}
_OLD_KEYS = {
    "runs": ("id",),
    "tasks": ("run_id", "id"),
    "signals": ("run_id", "id"),
    "run_events": ("run_id", "seq"),
    "decide_queue": ("run_id",),
    "task_queue": ("queue", "task_id"),
    "timers": ("fire_at", "id"),
    "outbox": ("id",),
    "idempotency_keys": ("namespace", "key"),
}
_CHILDREN = ("tasks", "signals", "run_events")  # the tables whose rows reference a run

# name -> (table, columns, WHERE, comment), before and after.
_OLD_INDEXES = {
    "ix_decide_queue_decider": ("decide_queue", "available_at", "quarantined_at IS NULL"),
    "ix_task_queue_dequeue": (
        "task_queue",
        "queue, priority DESC, available_at",
        "lease_expires_at IS NULL",
    ),
    "ix_task_queue_leased": ("task_queue", "lease_expires_at", "lease_expires_at IS NOT NULL"),
    "ix_signals_pending": ("signals", "run_id, id", "consumed_at IS NULL"),
    "ix_outbox_relay_due": ("outbox", "next_attempt_at", "dead_lettered_at IS NULL"),
}
_NEW_INDEXES = {
    name: (table, f"shard, {columns}", where)
    for name, (table, columns, where) in _OLD_INDEXES.items()
}
_COMMENTS = {
    "ix_decide_queue_decider": "decider loop: take runs to decide within one key, oldest first",
    "ix_task_queue_dequeue": "worker loop: claim unleased work within one key and queue",
    "ix_task_queue_leased": "lease sweeper: leased rows of one key by expiry",
    "ix_signals_pending": "decider loop: a run's unconsumed signals",
    "ix_outbox_relay_due": "relay loop: deliveries due within one key, oldest first",
    "ix_tasks_shard_run_id_node_id_iteration_attempt": (
        "decider loop: snapshot load; attempt identity"
    ),
}
_OLD_ATTEMPT_INDEX = "ix_tasks_run_id_node_id_iteration_attempt"
_NEW_ATTEMPT_INDEX = "ix_tasks_shard_run_id_node_id_iteration_attempt"


def shard_count() -> int:
    """The key count this upgrade records (only read when ``installation`` is created)."""
    config = op.get_context().config
    attributes = config.attributes if config is not None else {}
    return shard_count_setting(attributes.get(SHARD_COUNT_ATTRIBUTE)) or DEFAULT_SHARD_COUNT


def _notify_function(schema: str, table: str, channel: str) -> str:
    s = _q(schema)
    return f"""
CREATE FUNCTION {s}.{_q(f"notify_{table}_v2")}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The payload names the key with new work, so a loop takes from that key only;
    -- one notification per key the statement touched (a hot statement touches one).
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_{channel}_v1', keys.shard::text)
       FROM (SELECT DISTINCT shard FROM changed) AS keys;
    RETURN NULL;
END;
$$"""


# (trigger, table, event, function) of the v2 wake-up triggers.
_TRIGGERS = (
    ("task_queue_notify_v2", "task_queue", "INSERT", "notify_task_queue_v2"),
    ("decide_queue_insert_notify_v2", "decide_queue", "INSERT", "notify_decide_queue_v2"),
    ("decide_queue_update_notify_v2", "decide_queue", "UPDATE", "notify_decide_queue_v2"),
)


def upgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    count = shard_count()
    op.create_table(
        "installation",
        sa.Column("id", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("shard_count", sa.SmallInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id", name=op.f("ck_installation_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_installation")),
        schema=schema,
    )
    op.execute(f"INSERT INTO {s}.installation (shard_count) VALUES ({count})")
    op.create_table(
        "shard_owners",
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("shards", postgresql.ARRAY(sa.SmallInteger()), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("role", "owner", name=op.f("pk_shard_owners")),
        schema=schema,
    )
    op.execute(f"ALTER TABLE {s}.shard_owners SET ({QUEUE_STORAGE})")
    op.execute(f"""
CREATE FUNCTION {s}.shard_of_run_v1(run_id uuid, shard_count int) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((get_byte(uuid_send(run_id), 14) << 8 | get_byte(uuid_send(run_id), 15))
            % shard_count)::smallint
$$""")
    op.execute(f"""
CREATE FUNCTION {s}.shard_of_key_v1(shard_key text, shard_count int) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (('x' || left(md5(shard_key), 8))::bit(32)::bigint % shard_count)::smallint
$$""")
    op.execute(
        f"COMMENT ON FUNCTION {s}.shard_of_run_v1(uuid, int) IS "
        "'the shard key of a run: its id''s low 16 bits modulo the key count'"
    )
    op.execute(
        f"COMMENT ON FUNCTION {s}.shard_of_key_v1(text, int) IS "
        "'the shard key of a tenant or idempotency key: its md5''s first 32 bits modulo the count'"
    )

    for table, (source, _) in _KEYED.items():
        function = "shard_of_key_v1" if source == "key" else "shard_of_run_v1"
        op.execute(f"ALTER TABLE {s}.{_q(table)} ADD COLUMN shard smallint")
        op.execute(f"UPDATE {s}.{_q(table)} SET shard = {s}.{function}({_q(source)}, {count})")
        op.execute(f"ALTER TABLE {s}.{_q(table)} ALTER COLUMN shard SET NOT NULL")

    for child in _CHILDREN:
        op.execute(f"ALTER TABLE {s}.{_q(child)} DROP CONSTRAINT {_q(f'fk_{child}_run_id_runs')}")
    for table, (_, key) in _KEYED.items():
        _replace_primary_key(schema, table, key)
    for child in _CHILDREN:
        op.execute(
            f"ALTER TABLE {s}.{_q(child)} ADD CONSTRAINT {_q(f'fk_{child}_shard_run_id_runs')} "
            f"FOREIGN KEY (shard, run_id) REFERENCES {s}.runs (shard, id) ON DELETE CASCADE"
        )
    op.execute(f"DROP INDEX {s}.{_q(_OLD_ATTEMPT_INDEX)}")
    op.execute(
        f"CREATE UNIQUE INDEX {_q(_NEW_ATTEMPT_INDEX)} ON {s}.tasks "
        "(shard, run_id, node_id, iteration, attempt)"
    )
    _replace_indexes(schema, _NEW_INDEXES)
    for index, comment in _COMMENTS.items():
        op.execute(f"COMMENT ON INDEX {s}.{_q(index)} IS {_literal_text(comment)}")

    for table in ("task_queue", "decide_queue"):
        op.execute(f"DROP TRIGGER {_q(f'{table}_notify_v1')} ON {s}.{_q(table)}")
        op.execute(f"DROP FUNCTION {s}.{_q(f'notify_{table}_v1')}()")
    op.execute(_notify_function(schema, "task_queue", "tasks"))
    op.execute(_notify_function(schema, "decide_queue", "decide"))
    for trigger, table, event, function in _TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {_q(trigger)} AFTER {event} ON {s}.{_q(table)} "
            f"REFERENCING NEW TABLE AS changed "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {s}.{_q(function)}()"
        )
    record_revision(revision)


def _replace_primary_key(schema: str, table: str, columns: Sequence[str]) -> None:
    s = _q(schema)
    op.execute(f"ALTER TABLE {s}.{_q(table)} DROP CONSTRAINT {_q(f'pk_{table}')}")
    op.execute(
        f"ALTER TABLE {s}.{_q(table)} ADD CONSTRAINT {_q(f'pk_{table}')} "
        f"PRIMARY KEY ({', '.join(_q(column) for column in columns)})"
    )


def _replace_indexes(schema: str, indexes: dict[str, tuple[str, str, str]]) -> None:
    s = _q(schema)
    for name, (table, columns, where) in indexes.items():
        op.execute(f"DROP INDEX {s}.{_q(name)}")
        op.execute(f"CREATE INDEX {_q(name)} ON {s}.{_q(table)} ({columns}) WHERE {where}")


def downgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    for trigger, table, _, _ in _TRIGGERS:
        op.execute(f"DROP TRIGGER {_q(trigger)} ON {s}.{_q(table)}")
    for table in ("task_queue", "decide_queue"):
        op.execute(f"DROP FUNCTION {s}.{_q(f'notify_{table}_v2')}()")
    create_queue_notify_triggers_v1(schema)
    _replace_indexes(schema, _OLD_INDEXES)
    op.execute(f"DROP INDEX {s}.{_q(_NEW_ATTEMPT_INDEX)}")
    op.execute(
        f"CREATE UNIQUE INDEX {_q(_OLD_ATTEMPT_INDEX)} ON {s}.tasks "
        "(run_id, node_id, iteration, attempt)"
    )
    for child in _CHILDREN:
        op.execute(
            f"ALTER TABLE {s}.{_q(child)} DROP CONSTRAINT {_q(f'fk_{child}_shard_run_id_runs')}"
        )
    for table, key in _OLD_KEYS.items():
        _replace_primary_key(schema, table, key)
    for child in _CHILDREN:
        op.execute(
            f"ALTER TABLE {s}.{_q(child)} ADD CONSTRAINT {_q(f'fk_{child}_run_id_runs')} "
            f"FOREIGN KEY (run_id) REFERENCES {s}.runs (id) ON DELETE CASCADE"
        )
    for table in _KEYED:
        op.execute(f"ALTER TABLE {s}.{_q(table)} DROP COLUMN shard")
    op.execute(f"DROP FUNCTION {s}.shard_of_key_v1(text, int)")
    op.execute(f"DROP FUNCTION {s}.shard_of_run_v1(uuid, int)")
    op.drop_table("shard_owners", schema=schema)
    op.drop_table("installation", schema=schema)
    record_revision(down_revision)
