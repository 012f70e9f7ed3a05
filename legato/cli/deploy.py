"""``legato deploy --check``: would the app strand a run in flight? (nothing is deployed)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from legato.cli import EXIT_ERROR, connected
from legato.cli.render import table

if TYPE_CHECKING:
    from legato.deploy_check import DeployReport
    from legato.flow import App

EXIT_AT_RISK = EXIT_ERROR


def add_check_options(parser: argparse.ArgumentParser) -> None:
    """``--check`` and ``--json`` on ``legato deploy``."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="deploy nothing: say whether every run in flight could finish with this app's "
        "code (exit status 1 if any would be stranded)",
    )
    parser.add_argument(
        "--json", action="store_true", help="with --check: print the report as one JSON object"
    )


async def run_check(args: argparse.Namespace, app: App) -> int:
    """The check's report on stdout; 0 when no run in flight is at risk, else 1."""
    from legato.deploy_check import check_deploy

    async with connected(args) as client:
        report = await check_deploy(client.engine, app)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print("\n".join(report_lines(report, args.app)))
    return 0 if report.ok else EXIT_AT_RISK


def report_lines(report: DeployReport, app: str) -> list[str]:
    """The versions with runs in flight as a table, each reason under it, then a verdict."""
    if not report.versions:
        return [f"no runs in flight: deploying {app} strands none"]
    rows = [
        [
            v.workflow,
            f"v{v.version}",
            str(v.runs_in_flight),
            str(v.quarantined),
            str(v.runs_at_risk),
        ]
        for v in report.versions
    ]
    lines = table(["WORKFLOW", "VERSION", "IN FLIGHT", "QUARANTINED", "AT RISK"], rows)
    for version in report.versions:
        if not version.risks:
            continue
        lines += ["", f"{version.workflow} v{version.version}:"]
        for risk in version.risks:
            runs = f"{risk.runs} run{'s' if risk.runs != 1 else ''}"
            example = f", e.g. {risk.run_ids[0]}" if risk.run_ids else ""
            lines.append(f"  {risk.kind} {risk.name!r} (node {risk.node!r}): {risk.reason}")
            lines.append(f"    {runs}{example}")
    lines.append("")
    if report.ok:
        lines.append(
            f"ok: every one of {report.runs_in_flight} run(s) in flight can finish with {app}"
        )
    else:
        lines.append(
            f"at risk: {report.runs_at_risk} of {report.runs_in_flight} run(s) in flight would "
            f"be stranded by {app}; keep the old code serving them (see docs/operations.md, "
            '"Changing code under running workflows")'
        )
    return lines
