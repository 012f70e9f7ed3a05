"""What the test suites share: waiting on a condition, running the CLI, counting rows,
writing a marker file another process polls for."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato.schema.tables import TableColumns

ROOT = Path(__file__).resolve().parents[1]


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    *,
    timeout: float = 15,
    interval: float = 0.05,
) -> None:
    """Return as soon as ``check()`` is true; raise ``TimeoutError`` naming ``what`` if it
    is still false after ``timeout`` seconds. ``check`` may be sync or async."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = check()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


@contextmanager
def engine_events(engine: AsyncEngine, *hooks: tuple[str, Callable[..., None]]) -> Iterator[None]:
    """Listen to ``engine``'s SQLAlchemy events (each ``(name, hook)``) for the block."""
    for name, hook in hooks:
        event.listen(engine.sync_engine, name, hook)
    try:
        yield
    finally:
        for name, hook in hooks:
            event.remove(engine.sync_engine, name, hook)


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` so that a process polling for it never reads it half written
    (``write_text`` is not atomic; a rename is): through ``<path>.partial``."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.rename(path)


@dataclass(frozen=True)
class Outcome:
    """A finished ``legato`` command."""

    status: int
    stdout: str
    stderr: str


# The shell's ``LEGATO_*`` variables, as they were when the tests started.
_SHELL_SETTINGS = {key: value for key, value in os.environ.items() if key.startswith("LEGATO_")}


async def spawn_legato(
    *args: str, env: Mapping[str, str] | None = None, stderr: int = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """Start ``python -m legato ARGS`` as a user would, from the repository root, with
    ``env`` added; stdout is a pipe, and so is stderr unless ``stderr`` says otherwise
    (``asyncio.subprocess.STDOUT`` to interleave them). The ``LEGATO_*`` variables of the
    shell that started the tests are not inherited (a developer's settings must not
    change a test); those a test or fixture set are (the Citus tests' ``LEGATO_SCHEMA``:
    the commands and processes they start use the cluster's schema)."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("LEGATO_") or _SHELL_SETTINGS.get(key) != value
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "legato",
        *args,
        cwd=ROOT,
        env={**inherited, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )


async def run_legato(*args: str, database_url: str | None = None, timeout: float = 60) -> Outcome:
    """Run ``python -m legato ARGS`` to its end (``spawn_legato``); ``database_url`` is
    passed as ``--database-url``."""
    url = ("--database-url", database_url) if database_url else ()
    process = await spawn_legato(*args, *url)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return Outcome(process.returncode, stdout.decode(), stderr.decode())


@contextmanager
def started_processes() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start(module, *args, env=None)`` runs ``python -m MODULE ARGS`` from the repository
    root with ``env`` added to this process's environment; on exit, any of them still
    alive is killed (a test that failed midway leaves no process behind)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        module: str, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=ROOT, env={**os.environ, **(env or {})}
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()


async def count_rows(engine: AsyncEngine, table: TableColumns, *where: ColumnElement[bool]) -> int:
    """``SELECT count(*) FROM table WHERE ...``."""
    async with engine.connect() as conn:
        result = await conn.execute(select(func.count()).select_from(table.table).where(*where))
        return int(result.scalar_one())
