"""Use an installed wheel, not the source tree: the package's resources must ship.

Alembic resolves ``script_location = legato:alembic`` through package resources, a
code path lightly tested upstream; a missing ``versions/`` or ``script.py.mako`` in
the wheel would only show up here. The wheel also carries its licence, and mypy run
from a user's project sees Legato's types through ``py.typed``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from legato import migrations
from legato.db import create_engine

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = """
from pydantic import BaseModel

from legato import App, Flow, Node, TaskContext, task, workflow


class Order(BaseModel):
    order_id: str


@task()
async def ship(ctx: TaskContext, order: Order) -> str:
    return order.order_id


@workflow("ship")
def shipping(flow: Flow[Order]) -> Node[str]:
    return flow.run(ship, flow.input)


app = App([shipping])
"""

# The same module wired wrongly: the task takes an Order, the flow's input is a str.
MISWIRED = USER_MODULE.replace("flow: Flow[Order]", "flow: Flow[str]")


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
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "legato", source / "legato", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = work / "dist"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    build = subprocess.run(
        # -v: pip shows the backend's warnings only when verbose.
        [*pip, "wheel", "-v", "--no-deps", "--no-build-isolation", str(source), "-w", str(wheels)],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, f"{build.stdout}\n{build.stderr}"
    # setuptools warns on every build about a table-form ``license``; SPDX silences it.
    output = build.stdout + build.stderr
    assert "Running command" in output  # the backend's output is there to inspect
    assert "SetuptoolsDeprecationWarning" not in output, output
    (wheel,) = wheels.glob("legato-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode()
        licences = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert licences, archive.namelist()
        assert "Apache License" in archive.read(licences[0]).decode()
    assert "License-Expression: Apache-2.0" in headers
    assert "Classifier: Typing :: Typed" in headers
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


def _mypy(module: str, installed: Path, project: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict over a user's module, with Legato importable only from the wheel."""
    (project / "shipping.py").write_text(module)
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "shipping.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_mypy_sees_the_installed_package(installed: Path, tmp_path: Path) -> None:
    clean = _mypy(USER_MODULE, installed, tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    miswired = _mypy(MISWIRED, installed, tmp_path)
    assert miswired.returncode == 1, miswired.stdout + miswired.stderr
    assert 'shipping.py:18: error: Cannot infer value of type parameter "A1"' in miswired.stdout
