"""Migrate from an installed wheel, not the source tree: the package's resources must ship.

Alembic resolves ``script_location = legato:alembic`` through package resources, a
code path lightly tested upstream; a missing ``versions/`` or ``script.py.mako`` in
the wheel would only show up here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from legato import migrations
from legato.db import create_engine

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built into a wheel from a copy of the tree and installed into a directory."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "legato", source / "legato", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = work / "dist"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    _run(
        *pip, "wheel", "--no-deps", "--no-build-isolation", str(source), "-w", str(wheels), cwd=work
    )
    (wheel,) = wheels.glob("legato-*.whl")
    target = work / "site"
    _run(*pip, "install", "--no-deps", "--target", str(target), str(wheel), cwd=work)
    return target


async def test_upgrade_from_installed_wheel(installed: Path, empty_database_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    env.pop("LEGATO_SCHEMA", None)
    cwd = installed.parent  # not the source tree: ``-m`` puts the cwd on sys.path
    location = _run(
        sys.executable,
        "-c",
        "import legato, legato.alembic; print(legato.__file__); print(legato.alembic.__file__)",
        cwd=cwd,
        env=env,
    ).split()
    assert all(Path(path).is_relative_to(installed) for path in location), location
    assert not (installed / "legato" / "alembic" / "versions" / "__init__.py").is_symlink()

    output = _run(
        sys.executable,
        "-m",
        "legato",
        "db",
        "upgrade",
        "--database-url",
        empty_database_url,
        "--schema",
        "from_wheel",
        cwd=cwd,
        env=env,
    )
    assert migrations.head_revision() in output

    engine = create_engine(empty_database_url, "from_wheel")
    try:
        state = await migrations.state(engine, "from_wheel")
    finally:
        await engine.dispose()
    assert state.up_to_date
