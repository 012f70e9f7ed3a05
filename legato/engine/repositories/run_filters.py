"""The conditions on ``runs`` a ``RunFilter`` sets: the one place a filter becomes SQL,
shared by the fan-outs that list or count runs (``runs.list_runs``, ``runs.count_runs``)
and the dashboard's runs list (``ui_queries.list_runs``). Pure: builds expressions, runs
nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Select, literal, select, type_coerce
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

from legato.models import RunFilter
from legato.schema import Runs, Tasks
from legato.schema.enums import TaskState
from legato.schema.types import uuid7_bound


def conditions_of(chosen: RunFilter) -> list[ColumnElement[bool]]:
    """The conditions on ``runs`` that ``chosen`` sets (``runs.list_runs``,
    ``runs.count_runs`` and the dashboard's runs list, ``ui_queries.list_runs``)."""
    conditions: list[ColumnElement[bool]] = []
    if chosen.workflow is not None:
        conditions.append(Runs.workflow_name == chosen.workflow)
    if chosen.version is not None:
        conditions.append(Runs.workflow_version == chosen.version)
    if chosen.status is not None:
        conditions.append(Runs.status == chosen.status)
    if chosen.created_after is not None:
        conditions.append(Runs.id >= uuid7_bound(_ms(chosen.created_after)))
    if chosen.created_before is not None:
        conditions.append(Runs.id < uuid7_bound(_ms(chosen.created_before)))
    if chosen.error_type is not None:
        conditions.append(type_coerce(Runs.error, JSONB)["type"].astext == chosen.error_type)
    if chosen.node is not None:
        conditions.append(_attempt_of(chosen.node, FAILED_STATES).exists())
        conditions.append(~_attempt_of(chosen.node, (TaskState.COMPLETED,)).exists())
    return conditions


FAILED_STATES = (TaskState.FAILED, TaskState.TIMED_OUT)


def _attempt_of(node: str, states: Sequence[TaskState]) -> Select[int]:
    return select(literal(1)).where(
        Tasks.shard == Runs.shard,
        Tasks.run_id == Runs.id,
        Tasks.node_id == node,
        Tasks.state.in_(states),
    )


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
