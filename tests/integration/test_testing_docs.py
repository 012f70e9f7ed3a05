"""docs/testing.md's examples, run as written: a user's project made of the page's code
blocks alone, tested by pytest in a subprocess.

A code block of the page whose first line is ``# file: PATH`` is (part of) the file PATH
of that project; blocks naming one path are joined in page order. The test writes them
into an empty directory with the code they test (examples/signup.py, the file the page
links to) and nothing else: no conftest, configuration or ``sys.path`` entry but what
the page shows, and Legato itself importable as if installed. pytest runs there against
this session's PostgreSQL server, which the plugin takes from
``LEGATO_TEST_DATABASE_URL`` (the first place it looks). Every test function the blocks
define must pass: a broken example, a configuration line the page leaves out or a
fixture it misnames fails this test.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"
_BLOCK = re.compile(r"^```[a-z]*\n# file: (?P<path>\S+)\n(?P<body>.*?)^```$", re.S | re.M)


def documented_files(page: str) -> dict[str, str]:
    """The page's ``# file:`` blocks as path -> content (marker lines kept: comments)."""
    blocks: dict[str, list[str]] = {}
    for block in _BLOCK.finditer(page):
        blocks.setdefault(block["path"], []).append(f"# file: {block['path']}\n{block['body']}")
    return {path: "\n\n".join(parts) for path, parts in blocks.items()}


def defined_tests(files: dict[str, str]) -> set[tuple[str, str]]:
    """(module name, function name) of each test the Python files define."""
    return {
        (Path(path).stem, node.name)
        for path, text in files.items()
        if path.endswith(".py")
        for node in ast.parse(text).body
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name.startswith("test")
    }


def passed(report: Path) -> tuple[set[tuple[str, str]], list[str]]:
    """(module name, test name) of each test that passed in a JUnit XML report, and the
    names of those that did not."""
    ok: set[tuple[str, str]] = set()
    not_ok: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        key = (case.get("classname", "").rsplit(".", 1)[-1], case.get("name", ""))
        if any(case.find(tag) is not None for tag in ("failure", "error", "skipped")):
            not_ok.append(".".join(key))
        else:
            ok.add(key)
    return ok, not_ok


async def test_the_testing_pages_examples_pass_from_a_fresh_project(
    tmp_path: Path, pg_server_url: str
) -> None:
    page = PAGE.read_text()
    files = documented_files(page)
    assert {"pyproject.toml", "conftest.py"} <= set(files), sorted(files)
    marked = sum(text.count("# file: ") for path, text in files.items() if path.endswith(".py"))
    assert marked == page.count("```python\n"), "a Python block of the page names no file"
    expected = defined_tests(files)

    project = tmp_path / "project"
    files["examples/signup.py"] = (ROOT / "examples" / "signup.py").read_text()
    for path, text in files.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(text)
    installed = tmp_path / "site-packages"  # Legato alone, not this checkout's examples
    installed.mkdir()
    (installed / "legato").symlink_to(ROOT / "legato", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATO_", "PYTEST_"))}
    env |= {"LEGATO_TEST_DATABASE_URL": pg_server_url, "PYTHONPATH": str(installed)}

    report = tmp_path / "report.xml"
    pytest = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        f"--junitxml={report}",
        cwd=project,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(pytest.communicate(), 240)
    finally:
        if pytest.returncode is None:
            pytest.kill()
            await pytest.wait()
    output = out.decode()
    assert pytest.returncode == 0, output
    ok, not_ok = passed(report)
    assert not not_ok, output
    assert ok == expected, output
    assert "Warning" not in output, output  # pytest-asyncio warns of missing options
