"""``check_deploy`` and ``legato deploy --check`` against runs left in flight on a real
PostgreSQL: each run of ``shipment`` has reserved and waits for ``shipment.approved``."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import (
    App,
    Client,
    DeployReport,
    IncompatibleDatabase,
    InvalidArgument,
    Roles,
    RunFailed,
    Runtime,
    TaskState,
    check_deploy,
    create_engine,
)
from legato.cli import main
from tests.integration import deploy_check_apps as apps

RUNS = 3
APPS = "tests.integration.deploy_check_apps"


async def _start_and_leave_waiting(engine: AsyncEngine) -> list[uuid.UUID]:
    """RUNS runs of ``shipment``, each with ``reserve`` done and its event wait open,
    then no process left running: they stay in flight."""
    roles = Roles(decider=True, worker=True, timer=False)
    async with (
        Runtime(engine, apps.current, roles=roles, poll_interval=0.1, grace_period=5),
        Client(engine, app=apps.current) as client,
    ):
        handles = [
            await client.start(apps.shipment, apps.Order(order_id=f"o-{i}", amount=10 * i))
            for i in range(RUNS)
        ]
        async with asyncio.timeout(30):
            for handle in handles:
                while True:
                    states = {
                        t.node_id: t.state for t in (await client.get_run(handle.run_id)).tasks
                    }
                    reserved = states.get("reserve") is TaskState.COMPLETED
                    if reserved and "shipment.approved" in states:
                        break
                    await asyncio.sleep(0.05)
    return [handle.run_id for handle in handles]


@pytest.fixture
async def in_flight(engine: AsyncEngine) -> list[uuid.UUID]:
    return await _start_and_leave_waiting(engine)


def _only_version(report: DeployReport) -> tuple[int, int, list[tuple[str, str, str]]]:
    assert [(v.workflow, v.version) for v in report.versions] == [("shipment", 1)]
    version = report.versions[0]
    risks: list[tuple[str, str, str]] = [(r.node, r.kind, r.reason) for r in version.risks]
    for risk in version.risks:
        assert risk.runs == RUNS and len(risk.run_ids) == RUNS
    return version.runs_in_flight, version.runs_at_risk, risks


async def test_a_removed_task(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.removed)
    assert not report.ok
    assert _only_version(report) == (
        RUNS,
        RUNS,
        [("ship", "task", "task 'ship' is not in the new app: no worker will run it")],
    )
    assert set(report.versions[0].risks[0].run_ids) == set(in_flight)


async def test_a_new_required_input_field(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.required_field)
    assert _only_version(report) == (
        RUNS,
        RUNS,
        [
            (
                "notify",
                "task",
                "task 'notify' input 1 refuses the run's input: priority: Field required",
            )
        ],
    )


async def test_a_task_on_another_queue(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.moved)
    assert _only_version(report) == (
        RUNS,
        RUNS,
        [
            (
                "ship",
                "task",
                "task 'ship' moved from queue 'shipping' to 'shipping-eu': this version queues "
                "its attempts on 'shipping', which workers serving 'shipping-eu' do not claim",
            )
        ],
    )


async def test_compatible_code(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    report = await check_deploy(engine, apps.compatible)
    assert report.ok
    assert _only_version(report) == (RUNS, 0, [])
    assert report.to_json() == {
        "ok": True,
        "runs_in_flight": RUNS,
        "runs_at_risk": 0,
        "versions": [
            {
                "workflow": "shipment",
                "version": 1,
                "runs_in_flight": RUNS,
                "quarantined": 0,
                "runs_at_risk": 0,
                "risks": [],
            }
        ],
    }
    assert (await check_deploy(engine, apps.current)).ok  # the code they run today


async def test_nothing_in_flight(engine: AsyncEngine) -> None:
    report = await check_deploy(engine, apps.removed)
    assert report.ok and report.versions == ()


async def test_finished_runs_do_not_count(engine: AsyncEngine, in_flight: list[uuid.UUID]) -> None:
    async with Client(engine) as client:
        await client.cancel(in_flight[0])
        async with Runtime(engine, apps.current, roles=Roles(decider=True, worker=False)):
            with pytest.raises(RunFailed, match="cancelled"):
                await client.result(in_flight[0], timeout=30)
    report = await check_deploy(engine, apps.removed, page_size=1)  # pages of one run
    assert report.runs_in_flight == RUNS - 1 and report.runs_at_risk == RUNS - 1


async def test_bad_arguments_and_an_unmigrated_database(
    engine: AsyncEngine, empty_database_url: str
) -> None:
    with pytest.raises(InvalidArgument, match=r"takes a legato\.App"):
        await check_deploy(engine, "tests:app")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="page_size"):
        await check_deploy(engine, App(), page_size=0)
    bare = create_engine(empty_database_url)
    try:
        with pytest.raises(IncompatibleDatabase, match="legato db upgrade"):
            await check_deploy(bare, App())
    finally:
        await bare.dispose()


# -- the command ---------------------------------------------------------------------------


async def _legato(
    capsys: pytest.CaptureFixture[str], database_url: str, *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = await asyncio.to_thread(main, [*args, "--database-url", database_url])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


async def test_the_command(
    capsys: pytest.CaptureFixture[str], database_url: str, in_flight: list[uuid.UUID]
) -> None:
    rc, out, err = await _legato(
        capsys, database_url, "deploy", "--check", "--app", f"{APPS}:removed"
    )
    assert rc == 1, err
    lines = out.splitlines()
    assert lines[0].split() == ["WORKFLOW", "VERSION", "IN", "FLIGHT", "QUARANTINED", "AT", "RISK"]
    assert lines[1].split() == ["shipment", "v1", str(RUNS), "0", str(RUNS)]
    assert "  task 'ship' (node 'ship'): task 'ship' is not in the new app" in out
    assert f"at risk: {RUNS} of {RUNS} run(s) in flight would be stranded" in out

    rc, out, err = await _legato(
        capsys, database_url, "deploy", "--check", "--json", "--app", f"{APPS}:moved"
    )
    assert rc == 1, err
    report = json.loads(out)
    assert report["ok"] is False and report["runs_at_risk"] == RUNS
    [risk] = report["versions"][0]["risks"]
    assert risk["node"] == "ship" and risk["kind"] == "task" and risk["runs"] == RUNS
    assert sorted(risk["run_ids"]) == sorted(str(run_id) for run_id in in_flight)

    for variant in ("compatible", "current"):
        rc, out, err = await _legato(
            capsys, database_url, "deploy", "--check", "--json", "--app", f"{APPS}:{variant}"
        )
        assert rc == 0, err
        assert json.loads(out)["ok"] is True

    rc, out, err = await _legato(
        capsys, database_url, "deploy", "--check", "--app", f"{APPS}:compatible"
    )
    assert rc == 0, err
    assert f"ok: every one of {RUNS} run(s) in flight can finish" in out

    # The check deployed nothing: new runs by name still start version 1.
    engine = create_engine(database_url)
    try:
        async with Client(engine) as client:
            handle = await client.start("shipment", {"order_id": "o-x", "amount": 1})
            assert (await client.get_run(handle.run_id)).run.workflow_version == 1
    finally:
        await engine.dispose()


async def test_command_errors(
    capsys: pytest.CaptureFixture[str], database_url: str, empty_database_url: str
) -> None:
    for args, fragment in [
        (["--app", "nosuch.module:app"], "no module named 'nosuch'"),
        (["--app", f"{APPS}:Order"], "not a legato.App"),
    ]:
        rc, out, err = await _legato(capsys, database_url, "deploy", "--check", *args)
        assert (rc, out) == (1, ""), err
        [line] = err.strip().splitlines()
        assert line.startswith("legato: error: ") and fragment in line, err
    rc, out, err = await _legato(
        capsys, empty_database_url, "deploy", "--check", "--app", f"{APPS}:current"
    )
    assert (rc, out) == (1, "")
    [line] = err.strip().splitlines()
    assert line.startswith("legato: error: ") and "legato db upgrade" in line, err
    rc, out, err = await _legato(
        capsys, database_url, "deploy", "--json", "--app", f"{APPS}:current"
    )
    assert (rc, out) == (1, "")
    assert err.startswith("legato: error: --json goes with --check")
