"""What the deploy check reads of a run (``RunState``), what it finds in one run
(``Finding``), and the report the findings are counted into (``Risk`` per reason,
``VersionReport`` per version, ``DeployReport``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from legato.enums import TaskState

RiskKind = Literal["task", "map", "handler", "event", "child"]


@dataclass(frozen=True)
class Risk:
    """One reason some runs of a version would be stranded by the new code.

    ``node`` is the node of the version's spec (``$on_failure`` for the failure
    handler), ``kind`` what it needs of the new app (a task, an event's models, a child
    workflow), ``name`` the task, event or workflow name, ``runs`` how many runs in
    flight it strands and ``run_ids`` up to five of them.
    """

    node: str
    kind: RiskKind
    name: str
    reason: str
    runs: int
    run_ids: tuple[uuid.UUID, ...]

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "node": self.node,
            "kind": self.kind,
            "name": self.name,
            "reason": self.reason,
            "runs": self.runs,
            "run_ids": [str(run_id) for run_id in self.run_ids],
        }


@dataclass(frozen=True)
class VersionReport:
    """One workflow version with runs in flight: how many, how many the new code would
    strand (``runs_at_risk``), and why (``risks``)."""

    workflow: str
    version: int
    runs_in_flight: int
    quarantined: int
    runs_at_risk: int
    risks: tuple[Risk, ...]

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "workflow": self.workflow,
            "version": self.version,
            "runs_in_flight": self.runs_in_flight,
            "quarantined": self.quarantined,
            "runs_at_risk": self.runs_at_risk,
            "risks": [risk.to_json() for risk in self.risks],
        }


@dataclass(frozen=True)
class DeployReport:
    """Every workflow version with runs in flight, by name then version; ``ok`` when the
    new code strands none of them."""

    versions: tuple[VersionReport, ...]

    @property
    def ok(self) -> bool:
        return self.runs_at_risk == 0

    @property
    def runs_in_flight(self) -> int:
        return sum(v.runs_in_flight for v in self.versions)

    @property
    def runs_at_risk(self) -> int:
        return sum(v.runs_at_risk for v in self.versions)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "ok": self.ok,
            "runs_in_flight": self.runs_in_flight,
            "runs_at_risk": self.runs_at_risk,
            "versions": [version.to_json() for version in self.versions],
        }


@dataclass(frozen=True)
class Finding:
    """One reason one run would be stranded (what :class:`Risk` counts)."""

    node: str
    kind: RiskKind
    name: str
    reason: str


@dataclass(frozen=True)
class RunState:
    """What a run has stored: its input, each node's latest row ``(state, output)`` by
    (node id, iteration), and its unconsumed signals ``(name, payload)``, oldest first."""

    input: JsonValue
    rows: Mapping[tuple[str, int], tuple[TaskState, JsonValue]]
    signals: Sequence[tuple[str, JsonValue]] = ()
