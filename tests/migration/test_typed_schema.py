"""Queries built from ``legato.schema`` are typed: a misspelt column is a mypy error."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """\
from typing import assert_type

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncConnection

from legato.schema import Runs, RunStatus

statement = select(Runs.{column})
assert_type(statement, Select[RunStatus])


async def status_of(conn: AsyncConnection) -> RunStatus:
    status = (await conn.execute(select(Runs.status))).scalar_one()
    assert_type(status, RunStatus)
    return status
"""


def _mypy(path: Path) -> tuple[str, int]:
    # The project's own configuration (strict) and cache, so a warm run takes a second.
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(ROOT / "mypy.ini"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            str(path),
        ]
    )
    return stdout + stderr, status


def test_misspelt_column_is_a_mypy_error(tmp_path: Path) -> None:
    good = tmp_path / "good_query.py"
    good.write_text(SNIPPET.format(column="status"))
    output, status = _mypy(good)
    assert status == 0, output

    typo = tmp_path / "typo_query.py"
    typo.write_text(SNIPPET.format(column="staus"))
    output, status = _mypy(typo)
    assert status == 1, output
    errors = [line for line in output.splitlines() if ": error:" in line]
    typo_errors = [line for line in errors if '"staus"' in line]
    assert len(typo_errors) == 1, output
    assert "typo_query.py:8:" in typo_errors[0]
    assert typo_errors[0].endswith("[attr-defined]")
    # The only other complaint is the consequence: the statement's type is lost.
    assert all("[attr-defined]" in line or "[assert-type]" in line for line in errors), output
