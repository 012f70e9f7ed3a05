"""The shard key: which of a fixed number of keys a run, and every row of it, lives under.

Every run-scoped row (``runs``, ``tasks``, ``signals``, ``run_events``, the three
queues, ``outbox``, ``idempotency_keys``) carries a ``shard`` column, first in its
primary key, and every statement on a hot path filters each table it touches by
``shard = $k`` for one ``k``. On one PostgreSQL that costs an equality in an index; on
a distributed PostgreSQL (Citus) the column is the distribution column and each hot
statement routes to one node.

A run's key is written into its id: the low 16 bits of the UUIDv7 (random in an
ordinary UUIDv7) taken modulo the key count. So anything that holds a run id (a
signal, ``Client.get``, a worker's report) knows the key without a lookup, a run id
generated before keys existed has one too (the migration computes the same
function), and a caller-chosen key (a tenant) is honoured by choosing those bits when
the id is generated. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from legato.errors import ConfigurationError, InvalidArgument
from legato.schema.types import uuid7

# 16 keys: a lone process drains 16 per-key queues with full batches under any real
# backlog, and a later move to a distributed PostgreSQL has 16 units to spread over
# its nodes without rewriting a row (docs/scaling.md).
DEFAULT_SHARD_COUNT = 16
MAX_SHARD_COUNT = 256

_LOW_BITS = 0xFFFF
_LOW_SPAN = _LOW_BITS + 1


def check_shard_count(count: object) -> int:
    """``count`` as a key count, or ``ConfigurationError`` naming it; pure."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SHARD_COUNT:
        raise ConfigurationError(
            f"shard count {count!r} must be an int from 1 to {MAX_SHARD_COUNT} "
            f"(default {DEFAULT_SHARD_COUNT}); it is fixed when the schema is created"
        )
    return count


#: The environment variable a new schema's key count is read from (``--shards`` wins).
SHARD_COUNT_ENV = "LEGATO_SHARD_COUNT"


def shard_count_setting(given: object = None) -> int | None:
    """The key count a new schema gets: ``given`` (``--shards``, ``shard_count=``, an
    Alembic attribute), else ``$LEGATO_SHARD_COUNT``, else None (the default). A bad
    value is a ``ConfigurationError`` naming where it came from, raised before any
    migration runs, so a bad setting writes nothing."""
    if given is not None:
        return check_shard_count(given)
    raw = os.environ.get(SHARD_COUNT_ENV)
    if raw is None:
        return None
    try:
        return check_shard_count(int(raw.strip()))
    except (ValueError, ConfigurationError):
        raise ConfigurationError(
            f"{SHARD_COUNT_ENV}={raw[:40]!r} must be a whole number from 1 to "
            f"{MAX_SHARD_COUNT}: the number of shard keys a new schema gets (default "
            f"{DEFAULT_SHARD_COUNT}); fix it or unset it"
        ) from None


def tenant_hash(key: str) -> int:
    """A stable 32-bit hash of a caller's shard key (the first four bytes of its MD5).

    MD5 because PostgreSQL computes the same in SQL (``shard_of_key_v1``) and it never
    changes between versions, unlike ``hashtext``; it spreads keys, it guards nothing.
    """
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


@dataclass(frozen=True)
class Shards:
    """The installation's key count and the functions from ids and tenant keys to keys.

    ``distributed`` is the installation's statement layout. On a distributed PostgreSQL
    (Citus, ``legato.distributed``: the flag is read from its catalog) every hot
    statement touches one key, so it routes to one node, and a loop sends one take,
    claim or flush per key it holds. On
    one PostgreSQL (the default) the loops' takes, claims and report flushes span the
    keys a process holds in one statement, so a tick costs the round trips it cost
    before there were keys (docs/design.md, "The statement layout")."""

    count: int
    distributed: bool = False

    def __post_init__(self) -> None:
        check_shard_count(self.count)

    def all(self) -> range:
        """Every key, in order: what a lone process holds."""
        return range(self.count)

    def of_run(self, run_id: uuid.UUID) -> int:
        """The key of a run (and of every row of it), read from its id."""
        return (run_id.int & _LOW_BITS) % self.count

    def of_key(self, shard_key: str) -> int:
        """The key a caller's ``shard_key`` (a tenant, an account) maps to."""
        if (
            not isinstance(shard_key, str)
            or not shard_key
            or len(shard_key) > 200
            or not shard_key.isprintable()
        ):
            raise InvalidArgument(
                f"shard_key={shard_key!r:.100} must be a non-empty string of at most 200 "
                "printable characters (a tenant or account id), or None to spread runs by "
                "their id"
            )
        return tenant_hash(shard_key) % self.count

    def new_run_id(self, shard: int | None = None) -> uuid.UUID:
        """A fresh UUIDv7 whose key is ``shard`` (any key when None)."""
        run_id = uuid7()
        if shard is None:
            return run_id
        return self.with_shard(run_id, shard)

    def with_shard(self, run_id: uuid.UUID, shard: int) -> uuid.UUID:
        """``run_id`` with its low bits chosen so that its key is ``shard``: the time
        and sequence bits, and so the order of ids, are kept."""
        if not 0 <= shard < self.count:
            raise InvalidArgument(f"shard {shard!r} must be from 0 to {self.count - 1}")
        spread = int.from_bytes(os.urandom(2), "big") % (_LOW_SPAN // self.count)
        return uuid.UUID(int=(run_id.int & ~_LOW_BITS) | (spread * self.count + shard))

    def group(self, run_ids: Iterable[uuid.UUID]) -> dict[int, list[uuid.UUID]]:
        """Run ids by key, each key's ids in order: a batch is written one key at a time."""
        grouped: dict[int, list[uuid.UUID]] = {}
        for run_id in sorted(set(run_ids)):
            grouped.setdefault(self.of_run(run_id), []).append(run_id)
        return dict(sorted(grouped.items()))


def shard_of_run_sql(id_column: str, count: int) -> str:
    """``Shards.of_run`` as a SQL expression over a uuid column (the migration's backfill)."""
    return (
        f"((get_byte(uuid_send({id_column}), 14) << 8 | "
        f"get_byte(uuid_send({id_column}), 15)) % {count})::smallint"
    )
