"""Run mypy on the miswired snippets in ``cases/`` and check it reports exactly the marked errors.

A line ending in ``# E: <text>`` must get a mypy error containing ``<text>``; any
other error fails the test too. The snippets are excluded from the main mypy run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "cases"
ROOT = Path(__file__).parents[2]
MARK = re.compile(r"#\s*E:\s*(.+?)\s*$")
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<msg>.*)$")


def _expected(path: Path) -> dict[int, str]:
    marks = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        found = MARK.search(line)
        if found:
            marks[number] = found.group(1)
    return marks


@pytest.fixture(scope="module")
def mypy_errors() -> dict[tuple[str, int], list[str]]:
    files = sorted(str(p) for p in CASES.glob("*.py") if not p.name.startswith("_"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "mypy.ini"),
            "--no-error-summary",
            "--show-error-codes",
            "--hide-error-context",
            *files,
        ],
        cwd=CASES,
        capture_output=True,
        text=True,
        check=False,
        env={"MYPYPATH": str(CASES), "PATH": ""},
    )
    errors: dict[tuple[str, int], list[str]] = {}
    for line in proc.stdout.splitlines():
        m = ERROR.match(line)
        if m:
            errors.setdefault((Path(m["file"]).name, int(m["line"])), []).append(m["msg"])
    assert errors or proc.returncode == 0, proc.stdout + proc.stderr
    return errors


@pytest.mark.parametrize(
    "case", sorted(p.name for p in CASES.glob("*.py") if not p.name.startswith("_"))
)
def test_case_reports_the_marked_errors(
    case: str, mypy_errors: dict[tuple[str, int], list[str]]
) -> None:
    expected = _expected(CASES / case)
    assert expected, f"{case} marks no expected error"
    got = {line: msgs for (name, line), msgs in mypy_errors.items() if name == case}
    for line, text in expected.items():
        assert any(text in msg for msg in got.get(line, [])), (
            f"{case}:{line}: expected an error containing {text!r}, got {got.get(line)}"
        )
    unexpected = {line: msgs for line, msgs in got.items() if line not in expected}
    assert not unexpected, f"{case}: unexpected errors {unexpected}"
