"""The static type tests: run mypy --strict on ``cases/`` and compare every error's text.

Each case file marks the errors mypy must report, with the project's configuration
(``legato.mypy`` plugin on):

* ``# E: <message>`` at the end of a line: that line gets exactly this error;
* a comment line ``# E: <message>`` (continued on following ``#    ...`` lines) does the
  same for the next line of code, for messages too long for the line;
* ``# P: <message>`` is an error only the plugin reports.

Every other error (any line, any file) fails the test, so correct wiring pinned with
``assert_type`` stays correct. Without the plugin, every ``E`` line must still be an
error (whatever its text) and no other line may be: the overloads alone catch the
miswiring, only the messages are poorer. The snippets are excluded from the main mypy run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "cases"
ROOT = Path(__file__).parents[2]
FILES = sorted(CASES.glob("*.py"))
# The shared models are checked through the cases' imports (passing them too would make
# mypy see one file under two module names).
CHECKED = [p for p in FILES if not p.name.startswith("_")]
MARK = re.compile(r"#\s*(?P<kind>[EP]):\s*(?P<text>.+?)\s*$")
MORE = re.compile(r"^\s*#\s{4,}(?P<text>.+?)\s*$")
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<msg>.*?)(?:  \[[a-z-]+\])?$")


@dataclass(frozen=True)
class Mark:
    text: str
    plugin_only: bool


def _marks(path: Path) -> dict[int, list[Mark]]:
    marks: dict[int, list[Mark]] = {}
    pending: list[Mark] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        more = MORE.match(line)
        if more and pending:
            last = pending[-1]
            pending[-1] = Mark(f"{last.text} {more['text']}", last.plugin_only)
            continue
        found = MARK.search(line)
        if found and line.lstrip().startswith("#"):
            pending.append(Mark(found["text"], found["kind"] == "P"))
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        here = [*pending, *([Mark(found["text"], found["kind"] == "P")] if found else [])]
        if here:
            marks[number] = here
        pending = []
    return marks


def _mypy(config: Path, cache: Path) -> dict[tuple[str, int], list[str]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--show-error-codes",
            "--hide-error-context",
            "--no-pretty",
            *(str(p) for p in CHECKED),
        ],
        cwd=CASES,
        capture_output=True,
        text=True,
        check=False,
        env={"MYPYPATH": str(CASES), "PYTHONPATH": str(ROOT), "PATH": ""},
    )
    errors: dict[tuple[str, int], list[str]] = {}
    for line in proc.stdout.splitlines():
        m = ERROR.match(line)
        if m:
            errors.setdefault((Path(m["file"]).name, int(m["line"])), []).append(m["msg"])
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert errors or proc.returncode == 0, proc.stdout + proc.stderr
    return errors


@pytest.fixture(scope="module")
def with_plugin() -> dict[tuple[str, int], list[str]]:
    return _mypy(ROOT / "mypy.ini", ROOT / ".mypy_cache")


@pytest.fixture(scope="module")
def without_plugin(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], list[str]]:
    config = tmp_path_factory.mktemp("mypy") / "mypy.ini"
    text = (ROOT / "mypy.ini").read_text()
    plain = re.sub(r"^plugins = .*$", "plugins = pydantic.mypy", text, flags=re.M)
    assert plain != text, "mypy.ini no longer enables the plugin on its own line"
    config.write_text(plain)
    return _mypy(config, ROOT / ".mypy_cache" / "no-plugin")


def _errors_in(errors: dict[tuple[str, int], list[str]], case: str) -> dict[int, list[str]]:
    return {line: msgs for (name, line), msgs in errors.items() if name == case}


@pytest.mark.parametrize("case", [p.name for p in FILES])
def test_mypy_reports_exactly_the_marked_messages(
    case: str, with_plugin: dict[tuple[str, int], list[str]]
) -> None:
    expected = {line: sorted(m.text for m in ms) for line, ms in _marks(CASES / case).items()}
    got = {line: sorted(msgs) for line, msgs in _errors_in(with_plugin, case).items()}
    assert got == expected


@pytest.mark.parametrize("case", [p.name for p in FILES])
def test_without_the_plugin_the_same_lines_are_errors(
    case: str, without_plugin: dict[tuple[str, int], list[str]]
) -> None:
    marks = _marks(CASES / case)
    caught = {line for line, ms in marks.items() if not all(m.plugin_only for m in ms)}
    got = set(_errors_in(without_plugin, case))
    assert caught <= got, f"miswiring the overloads alone miss: lines {sorted(caught - got)}"
    assert got <= set(marks), f"errors on unmarked lines: {sorted(got - set(marks))}"


def test_marks_are_read_from_line_ends_and_comment_blocks() -> None:
    # The parser itself: a mark it silently dropped would let a message regress.
    marks = _marks(CASES / "run.py")
    texts = [m.text for ms in marks.values() for m in ms]
    continued = 'Argument 2 to task "activate" has incompatible type "Node[Signup]"; expected'
    assert f'{continued} "Node[Confirmed]"' in texts
    assert 'Task "ping" takes no inputs; 1 given' in texts
