"""``legato deploy | dev | decider | worker | timer | runs ...`` as real processes on a real
PostgreSQL, and ``examples/demo.py`` end to end."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from examples.orders import app as orders_app
from examples.signup import Signup, signup
from examples.signup import app as signup_app
from legato import Client, RunStatus, Runtime
from legato.cli import main
from legato.schema import Runs, Signals
from tests.helpers import spawn_legato

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Done:
    rc: int
    out: str
    err: str


async def _spawn(database_url: str, *args: str) -> asyncio.subprocess.Process:
    return await spawn_legato(
        *args, env={"LEGATO_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    )


async def legato(database_url: str, *args: str, timeout: float = 30) -> Done:
    process = await _spawn(database_url, *args)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


async def legato_here(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """The same command in this process (for the cases a subprocess adds nothing to)."""
    capsys.readouterr()
    rc = await asyncio.to_thread(main, list(args))
    captured = capsys.readouterr()
    return Done(rc, captured.out, captured.err)


def one_line_error(done: Done, *fragments: str) -> None:
    """Exit 1, nothing on stdout, a single ``legato: error: ...`` line naming the problem."""
    assert done.rc == 1, done
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("legato: error: "), done.err
    for fragment in fragments:
        assert fragment in lines[0], done.err


async def _read_until(stream: asyncio.StreamReader, marker: str, timeout: float = 30) -> str:
    seen = ""
    async with asyncio.timeout(timeout):
        while marker not in seen:
            line = await stream.readline()
            if not line:
                raise AssertionError(f"stream ended before {marker!r}; got {seen!r}")
            seen += line.decode()
    return seen


async def _stop(process: asyncio.subprocess.Process, timeout: float = 20) -> tuple[int, str]:
    """SIGTERM, then the exit status and what it wrote to stderr."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(timeout):
            _, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, err.decode()


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine) as c:
        yield c


async def test_deploy_prints_each_version(database_url: str, client: Client) -> None:
    first = await legato(database_url, "deploy", "--app", "examples.signup:app")
    assert first.rc == 0, first
    assert first.out.strip() == "signup → v1"
    assert await client.deploy(signup_app) == {"signup": 1}  # unchanged spec, same version


async def test_start_show_and_list(
    database_url: str, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    await client.deploy(signup_app)
    started = await legato(
        database_url, "runs", "start", "signup", "--input", '{"email": "ada@example.com"}'
    )
    assert started.rc == 0, started
    run_id = uuid.UUID(started.out.strip())
    assert (await client.get_run(run_id)).run.input == {"email": "ada@example.com"}

    shown, listed = await asyncio.gather(
        legato(database_url, "runs", "show", str(run_id)),
        legato(database_url, "runs", "list", "--workflow", "signup", "--status", "running"),
    )
    assert shown.rc == 0, shown
    assert f"run       {run_id}" in shown.out
    assert "workflow  signup v1" in shown.out
    assert "status    RUNNING" in shown.out
    assert "run_started" in shown.out
    assert listed.rc == 0, listed
    assert str(run_id) in listed.out and "RUNNING" in listed.out
    empty = await legato_here(
        capsys, "runs", "list", "--database-url", database_url, "--workflow", "x"
    )
    assert empty.out.strip() == "no runs"


async def test_start_with_app_validates_the_input(
    database_url: str, engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato(
        database_url, "runs", "start", "signup", "--app", "examples.signup:app", "--input", "{}"
    )
    one_line_error(done, "invalid input", "email")
    unknown = await legato_here(
        capsys, "runs", "start", "nosuch", "--input", "1", "--database-url", database_url
    )
    one_line_error(unknown, "unknown workflow 'nosuch'")
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(Runs.table))).scalar() == 0


async def test_cancel(
    database_url: str, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with Runtime(client.engine, signup_app, poll_interval=0.2, grace_period=2):
        cancelled = await legato(database_url, "runs", "cancel", str(handle.run_id), "--wait")
        assert cancelled.rc == 0, cancelled
        assert cancelled.out.strip() == f"run {handle.run_id} CANCELLED"
    assert (await client.get_run(handle.run_id)).run.status is RunStatus.CANCELLED

    finished = await legato(database_url, "runs", "cancel", str(handle.run_id))
    unknown = await legato_here(
        capsys, "runs", "cancel", str(uuid.uuid4()), "--database-url", database_url
    )
    garbage = await legato_here(
        capsys, "runs", "cancel", "not-a-run", "--database-url", database_url
    )
    one_line_error(finished, str(handle.run_id), "already CANCELLED")
    one_line_error(unknown, "no run")
    one_line_error(garbage, "not a run id", "'not-a-run'")


async def test_signal_with_invalid_json_writes_nothing(
    database_url: str, client: Client, engine: AsyncEngine
) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    done = await legato(
        database_url, "runs", "signal", str(handle.run_id), "signup.confirmed", "--payload", "{bad"
    )
    one_line_error(done, "--payload is not valid JSON")
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(Signals.table))).scalar() == 0
    await client.signal(handle.run_id, "signup.confirmed", {"code": "c0de"})


async def test_a_missing_app_module_is_one_line(database_url: str) -> None:
    done = await legato(database_url, "deploy", "--app", "nosuch.module:app")
    one_line_error(done, "no module named 'nosuch'")


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("examples.signup:nope", "has no 'nope'"),
        ("examples.signup:Signup", "is the class Signup, not a legato.App"),
        ("examples.signup", "expected module:attribute"),
        ("examples.nosuch:app", "no module named 'examples.nosuch'"),
    ],
)
async def test_app_loading_errors(
    database_url: str, spec: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato_here(capsys, "deploy", "--app", spec, "--database-url", database_url)
    one_line_error(done, fragment)


async def test_unmigrated_database_is_refused(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato_here(capsys, "runs", "list", "--database-url", empty_database_url)
    one_line_error(done, "legato db upgrade")


@pytest.mark.parametrize("role", ["decider", "worker", "timer", "relay"])
async def test_a_process_on_an_unmigrated_database_says_only_the_error(
    empty_database_url: str, role: str
) -> None:
    """No "running" line first: it is logged once every loop runs."""
    app = ("--app", "examples.signup:app") if role in ("decider", "worker") else ()
    done = await legato(empty_database_url, role, *app, "--startup-timeout", "5")
    one_line_error(done, "legato db upgrade")


async def test_dev_runs_a_signup_while_watch_tails_it(database_url: str, client: Client) -> None:
    dev = await _spawn(
        database_url, "dev", "--app", "examples.signup:app", "--poll-interval", "0.2"
    )
    try:
        assert dev.stdout is not None
        banner = await _read_until(dev.stdout, "deployed signup v1")
        assert "legato dev: database postgresql" in banner

        handle = await client.start("signup", {"email": "ada@example.com"})
        run_id = str(handle.run_id)
        watch = await _spawn(database_url, "runs", "watch", run_id, "--timeout", "60")
        assert watch.stdout is not None
        await _read_until(watch.stdout, "event_wait_started")
        await client.signal(handle.run_id, "signup.confirmed", {"code": "x"})
        async with asyncio.timeout(30):
            rest, _ = await watch.communicate()
        tail = rest.decode()
        assert watch.returncode == 0, tail
        for event in ("event_received", "task_completed       activate", "run_succeeded"):
            assert event in tail
        assert tail.strip().endswith(f"run {run_id} SUCCEEDED")
    finally:
        rc, err = await _stop(dev)
    assert rc == 0, err
    assert "dev stopped" in err


async def test_decider_worker_and_timer_processes_run_an_order(
    database_url: str, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three processes, each one role: the order needs all of them (tasks, retries, a sleep)."""
    await client.deploy(orders_app)
    common = ("--poll-interval", "0.2")
    processes = [
        await _spawn(database_url, "decider", "--app", "examples.orders:app", *common),
        await _spawn(database_url, "worker", "--app", "examples.orders:app", *common),
        await _spawn(database_url, "timer", *common),
    ]
    try:
        order = '{"order_id": "o-7", "lines": [{"sku": "tea", "quantity": 3}], "express": false}'
        url = ("--database-url", database_url)
        done = await legato_here(
            capsys, "runs", "start", "orders", "--input", order, "--wait", "--timeout", "40", *url
        )
        assert done.rc == 0, done
        run_id, output = done.out.strip().splitlines()
        assert '"charge_attempts": 3' in output and '"carrier": "post"' in output
        shown = await legato_here(capsys, "runs", "show", run_id, *url)
        assert "retry_scheduled      charge #3" in shown.out
        assert "sleep_started" in shown.out
    finally:
        stopped = [await _stop(p) for p in processes]
    for rc, err in stopped:
        assert rc == 0, err
        assert "stopped" in err


async def test_demo_runs_to_completion() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "demo.py"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(120):
            out, err = await process.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "signup finished: Active(user_id='ada'" in text
    assert "event_received       signup.confirmed" in text
    assert text.count("run_succeeded") == 2
    assert "retry_scheduled      charge #2" in text
    assert "done: the temporary PostgreSQL is stopped" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("relay", "--retry-delay", "10", "--max-retry-delay", "1"), "--retry-delay 10 must be"),
        (("relay", "--lease", "5", "--request-timeout", "10"), "--lease 5 must be longer than"),
    ],
)
async def test_relay_options_that_do_not_go_together_are_named_as_flags(
    database_url: str, args: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato_here(capsys, *args, "--database-url", database_url)
    one_line_error(done, says)


@pytest.mark.parametrize(
    ("role", "flag"),
    [(role, "--shard-lease") for role in ("decider", "worker", "timer", "dev")]
    + [(role, "--lease") for role in ("worker", "dev")],
)
async def test_a_lease_under_a_second_is_a_usage_error(
    role: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato_here(capsys, role, "--app", "examples.signup:app", flag, "0.001")
    assert done.rc == 2, done
    assert "not a lease of at least 1 second: '0.001'" in done.err


async def test_dev_checks_its_data_dir_before_starting_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEGATO_DATABASE_URL", raising=False)
    done = await legato_here(capsys, "dev", "--app", "examples.signup:app", "--data-dir", __file__)
    one_line_error(done, f"--data-dir {__file__!r} cannot be a directory here")


async def test_dev_refuses_a_data_dir_beside_a_database_url(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done = await legato_here(
        capsys, "dev", "--app", "examples.signup:app", "--data-dir", "/tmp/x",
        "--database-url", database_url,
    )  # fmt: skip
    one_line_error(done, "--data-dir '/tmp/x' is for the embedded PostgreSQL")


async def test_dev_with_its_metrics_port_taken_writes_nothing(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = await legato_here(
            capsys, "dev", "--app", "examples.signup:app", "--metrics-port", port,
            "--database-url", empty_database_url,
        )  # fmt: skip
    one_line_error(done, f"--metrics-port {port}")
    check = await legato_here(capsys, "db", "check", "--database-url", empty_database_url)
    assert check.rc == 1 and "legato db upgrade" in check.out  # not migrated
