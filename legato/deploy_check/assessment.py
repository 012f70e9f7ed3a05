"""The runs in flight, added one by one and counted per version into a
``DeployReport``. Pure."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from legato.deploy_check.report import (
    DeployReport,
    Finding,
    Risk,
    RunState,
    VersionReport,
)
from legato.deploy_check.version_check import VersionCheck
from legato.flow import App
from legato.flow.spec import INPUT_NODE_ID, WorkflowSpec

EXAMPLE_RUNS = 5


@dataclass
class _Tally:
    runs: int = 0
    quarantined: int = 0
    at_risk: int = 0
    risks: dict[Finding, list[uuid.UUID]] = field(default_factory=dict)
    counts: dict[Finding, int] = field(default_factory=dict)

    def add(self, run_id: uuid.UUID, quarantined: bool, findings: Iterable[Finding]) -> None:
        self.runs += 1
        self.quarantined += quarantined
        found = list(findings)
        self.at_risk += bool(found)
        for finding in found:
            examples = self.risks.setdefault(finding, [])
            if len(examples) < EXAMPLE_RUNS:
                examples.append(run_id)
            self.counts[finding] = self.counts.get(finding, 0) + 1

    def report(self, workflow: str, version: int) -> VersionReport:
        risks = tuple(
            Risk(f.node, f.kind, f.name, f.reason, self.counts[f], tuple(run_ids))
            for f, run_ids in self.risks.items()
        )
        return VersionReport(workflow, version, self.runs, self.quarantined, self.at_risk, risks)


class Assessment:
    """Runs in flight, added one by one, counted per version into a :class:`DeployReport`.

    ``spec_of(name, version)`` gives a version's stored spec (None when it cannot be read:
    every run of that version is then at risk)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._checks: dict[tuple[str, int], VersionCheck | None] = {}
        self._tallies: dict[tuple[str, int], _Tally] = {}

    def needs_spec(self, workflow: str, version: int) -> bool:
        return (workflow, version) not in self._checks

    def add_spec(self, workflow: str, version: int, spec: WorkflowSpec | None) -> None:
        self._checks[(workflow, version)] = None if spec is None else VersionCheck(spec, self.app)

    def add_run(
        self, run_id: uuid.UUID, workflow: str, version: int, quarantined: bool, run: RunState
    ) -> None:
        check = self._checks[(workflow, version)]
        findings = (
            check.assess(run)
            if check is not None
            else [
                Finding(
                    INPUT_NODE_ID,
                    "task",
                    workflow,
                    f"the stored spec of {workflow!r} v{version} cannot be read by this Legato",
                )
            ]
        )
        self._tallies.setdefault((workflow, version), _Tally()).add(run_id, quarantined, findings)

    @cached_property
    def report(self) -> DeployReport:
        return DeployReport(tuple(self._tallies[key].report(*key) for key in sorted(self._tallies)))
