"""Options the CLI used to accept and quietly ignore or misreport, now refused with one
``legato: error:`` line naming the flag, before anything is read or written: a
``--timeout`` with nothing waiting, a reversed ``--created-after``/``--created-before``
range, ``--quarantined`` with filters, ``@FILE`` for a JSON option, a ``legato ui``
token no client could send, a webhook URL's bad port; and ``schedules pause|resume`` of
a schedule already in that state, which now changes nothing."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from legato import Client
from legato.cli import main
from legato.engine.loops import schedules as scheduling
from legato.errors import ConfigurationError
from legato.schema import Runs, Schedules
from legato.webhooks import list_endpoints
from tests.integration import schedule_app

# The seeded database of test_cli_errors (the signup workflow deployed, one run waiting
# for its event), one per module: imported, so that pytest finds the fixtures here.
from tests.integration.test_cli_errors import (
    EMAIL,
    LEAVES,
    Done,
    Seeded,
    _help,
    assert_one_error_line,
    database,  # noqa: F401
    legato_here,
    row_counts,
    seeded,  # noqa: F401
)

REVERSED = (
    "--created-after",
    "2026-02-01T00:00:00+00:00",
    "--created-before",
    "2026-01-01T00:00:00+00:00",
)
# An --app that cannot load: the token is refused before it is loaded, and a dashboard
# that accepted the token would stop there rather than serve.
NO_APP = ("--app", "nosuch_module:app")
EMPTY = (
    "--created-after",
    "2026-01-01T00:00:00+00:00",
    "--created-before",
    "2026-01-01T00:00:00+00:00",
)

# (arguments, fragments of the error line, exit status); {run} is the seeded run's id.
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    # --timeout bounds --wait; without --wait nothing waits.
    "start --timeout without --wait": (
        ("runs", "start", "signup", "--input", EMAIL, "--timeout", "5"),
        ("--timeout 5 bounds --wait", "add --wait", "see `legato runs start --help`"),
        2,
    ),
    "cancel RUN --timeout without --wait": (
        ("runs", "cancel", "{run}", "--timeout", "2.5"),
        ("--timeout 2.5 bounds --wait", "see `legato runs cancel --help`"),
        2,
    ),
    "rerun RUN --timeout without --wait": (
        ("runs", "rerun", "{run}", "--timeout", "5"),
        ("--timeout 5 bounds --wait",),
        2,
    ),
    "rerun by filter --timeout --dry-run": (
        ("runs", "rerun", "--workflow", "orders", "--status", "failed", "--timeout", "5"),
        ("--timeout 5 bounds --wait", "with one RUN_ID"),
        2,
    ),
    "cancel by filter --timeout": (
        ("runs", "cancel", "--workflow", "signup", "--timeout", "5", "--yes"),
        ("--timeout 5 bounds --wait",),
        2,
    ),
    # A reversed or empty time range, named by its flags.
    "list reversed range": (
        ("runs", "list", *REVERSED),
        (
            "--created-after 2026-02-01T00:00:00+00:00 is not before "
            "--created-before 2026-01-01T00:00:00+00:00",
            "see `legato runs list --help`",
        ),
        2,
    ),
    "cancel reversed range": (
        ("runs", "cancel", *REVERSED, "--yes"),
        ("--created-after 2026-02-01T00:00:00+00:00 is not before --created-before",),
        2,
    ),
    "resume empty range": (
        ("runs", "resume", *EMPTY, "--dry-run"),
        ("--created-after 2026-01-01T00:00:00+00:00 is not before --created-before",),
        2,
    ),
    "rerun reversed range": (
        ("runs", "rerun", *REVERSED, "--dry-run"),
        ("is not before --created-before",),
        2,
    ),
    # --quarantined lists every quarantined run: filters would be ignored.
    "list --quarantined --workflow": (
        ("runs", "list", "--quarantined", "--workflow", "signup"),
        ("--quarantined lists every quarantined run and takes no filters", "(got --workflow)"),
        2,
    ),
    "list --quarantined --status --created-after": (
        (
            "runs",
            "list",
            "--quarantined",
            "--status",
            "running",
            "--created-after",
            "2026-01-01T00:00:00+00:00",
        ),
        ("takes no filters", "--status", "--created-after"),
        2,
    ),
    "list --quarantined --before": (
        ("runs", "list", "--quarantined", "--before", "{run}"),
        ("takes no filters", "(got --before)"),
        2,
    ),
    # @FILE is no JSON: only @- (stdin) is read.
    "start --input @file": (
        ("runs", "start", "signup", "--input", "@nosuchfile.json"),
        (
            "--input '@nosuchfile.json'",
            "only --input @- (read stdin) is supported",
            "--input @- < nosuchfile.json",
        ),
        1,
    ),
    "signal --payload @file": (
        ("runs", "signal", "{run}", "signup.confirmed", "--payload", "@my payload.json"),
        ("only --payload @- (read stdin)", "--payload @- < 'my payload.json'"),
        1,
    ),
    "emit --payload @": (
        ("runs", "emit", "signup.confirmed", "--payload", "@"),
        ("--payload @- < FILE",),
        1,
    ),
    # A token no HTTP client could send (the token itself is never printed).
    "ui --token with a newline": (
        ("ui", "--token", "tok\nen", *NO_APP),
        ("--token has the unprintable character U+000A at position 4 of 6", "printable ASCII"),
        1,
    ),
    "ui --token ending in a space": (
        ("ui", "--token", "token ", *NO_APP),
        ("--token has the character ' ' at position 6 of 6",),
        1,
    ),
    "ui --token with a tab": (("ui", "--token", "a\tb", *NO_APP), ("U+0009",), 1),
    "ui --token with a semicolon": (("ui", "--token", "a;b", *NO_APP), ("';'",), 1),
    "ui --token beyond ASCII": (
        ("ui", "--token", "clé", *NO_APP),
        ("non-ASCII character U+00E9",),
        1,
    ),
    # A webhook URL with a port that is no port.
    "webhooks add port 99999": (
        ("webhooks", "add", "https://x.example:99999/h", "--secret", "s"),
        (
            "webhook URL 'https://x.example:99999/h' has a bad port '99999'",
            "a whole number from 1 to 65535",
        ),
        1,
    ),
    "webhooks add port abc": (
        ("webhooks", "add", "https://x.example:abc/h", "--secret", "s"),
        ("has a bad port 'abc'",),
        1,
    ),
    "webhooks add long URL": (
        ("webhooks", "add", "https://x.example/" + "a" * 3000, "--secret", "s"),
        ("[3,018 characters]", "at most 2048 characters"),
        1,
    ),
}


async def _state(db: Seeded) -> tuple[dict[str, int], list[object], int]:
    """What a refused command must leave alone: the row counts, the seeded run's row
    (cancel and rerun would touch it) and the webhook endpoints."""
    async with db.engine.connect() as conn:
        run = (
            await conn.execute(
                select(Runs.status, Runs.cancel_requested_at, Runs.updated_at).where(
                    Runs.id == uuid.UUID(db.run_id)
                )
            )
        ).one()
    return await row_counts(db.engine), list(run), len(await list_endpoints(db.engine))


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_contradiction_is_one_line_and_changes_nothing(
    case: str,
    seeded: Seeded,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args, fragments, rc = CASES[case]
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)  # no confirmation prompt
    before = await _state(seeded)
    done = await legato_here(capsys, *(arg.replace("{run}", seeded.run_id) for arg in args))
    assert_one_error_line(done, *fragments, rc=rc)
    assert "tok\\nen" not in done.err and "clé" not in done.err  # a token is a secret
    assert await _state(seeded) == before


async def test_the_token_comes_from_the_environment_too(
    seeded: Seeded,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEGATO_UI_TOKEN", " s3cret")
    done = await legato_here(capsys, "ui", "--host", "0.0.0.0", *NO_APP)
    assert_one_error_line(done, "LEGATO_UI_TOKEN has the character ' ' at position 1 of 7", rc=1)
    assert "s3cret" not in done.err


def test_create_app_refuses_the_same_tokens() -> None:
    from legato.ui import create_app
    from legato.ui.security import check_token

    for token in ("tok\nen", "tok\r\nX-Evil: 1", "  padded  ", "a b", "\x7f"):
        with pytest.raises(ConfigurationError, match="token has the"):
            create_app(None, token=token)  # type: ignore[arg-type]  # refused before use
    for token in ("s3cret", "A-Za-z0-9._~+/=", "!#$%&'()*,-:<>?@[]^`{|}"):
        assert check_token(token) == token


def _timeouts() -> set[tuple[str, ...]]:
    return {command for command in LEAVES if "--timeout S" in _help(*command)}


def test_every_command_taking_timeout_waits_or_refuses_it_without_wait() -> None:
    # watch and stream always wait; start, cancel and rerun wait with --wait only, and
    # refuse --timeout without it (the cases above). A new one must join one of these.
    assert _timeouts() == {
        ("runs", "watch"),
        ("runs", "stream"),
        ("runs", "start"),
        ("runs", "cancel"),
        ("runs", "rerun"),
    }
    for waits in (("runs", "watch"), ("runs", "stream")):
        assert "--wait" not in _help(*waits)
    for command in (("runs", "start"), ("runs", "cancel"), ("runs", "rerun")):
        assert "without --wait it is refused" in " ".join(_help(*command).split())


async def test_watch_says_how_to_follow_on_after_its_timeout(
    seeded: Seeded,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = await legato_here(capsys, "runs", "watch", seeded.run_id, "--timeout", "0.2")
    assert done.rc == 2, done
    assert done.out.startswith(f"watching run {seeded.run_id}")
    errors = done.err.splitlines()
    assert len(errors) == 1, done.err
    assert errors[0].startswith(f"legato: error: run {seeded.run_id} is still running after 0.2s")
    assert "follow it again with a longer --timeout" in errors[0]


async def test_a_waiting_timeout_is_still_accepted(
    seeded: Seeded,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The refusal is of --timeout alone: with --wait it bounds the wait, as before.
    done = await legato_here(
        capsys, "runs", "start", "signup", "--input", EMAIL, "--wait", "--timeout", "0.1"
    )
    assert done.rc == 1 and "bounds --wait" not in done.err, done  # the run is still running
    listed = await legato_here(capsys, "runs", "list", "--quarantined", "--limit", "5")
    assert listed == Done(0, "no quarantined runs\n", "")


async def _schedule_row(engine: AsyncEngine, name: str) -> tuple[object, ...]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(Schedules.paused, Schedules.next_fire_at, Schedules.updated_at).where(
                    Schedules.name == name
                )
            )
        ).one()
    return tuple(row)


async def test_pause_and_resume_of_a_schedule_already_so_change_nothing(
    engine: AsyncEngine, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with Client(engine) as client:
        await client.deploy(schedule_app.app)
    db = ("--database-url", database_url)
    active = await _schedule_row(engine, "all")

    resumed = await legato_here(capsys, "schedules", "resume", "all", *db)
    assert resumed.rc == 0 and resumed.err == "", resumed
    assert resumed.out.startswith("schedule all is not paused: nothing changed"), resumed
    assert await _schedule_row(engine, "all") == active
    assert await scheduling.resume(engine, "all") is None
    assert await _schedule_row(engine, "all") == active

    paused = await legato_here(capsys, "schedules", "pause", "all", *db)
    assert paused == Done(0, "schedule all paused\n", "")
    stopped = await _schedule_row(engine, "all")
    assert stopped[0] is True
    again = await legato_here(capsys, "schedules", "pause", "all", *db)
    assert again == Done(0, "schedule all is already paused: nothing changed\n", "")
    assert await scheduling.pause(engine, "all") is False
    assert await _schedule_row(engine, "all") == stopped

    resumed = await legato_here(capsys, "schedules", "resume", "all", *db)
    assert resumed.rc == 0 and "resumed; next fire" in resumed.out, resumed
    assert (await _schedule_row(engine, "all"))[0] is False


def test_the_refusals_need_no_database(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked before connecting: with no database at all, the refusal is still the line.
    for key in ("LEGATO_DATABASE_URL", "LEGATO_UI_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for args, fragment in (
        (("runs", "list", "--quarantined", "--node", "x"), "takes no filters"),
        (("runs", "start", "signup", "--timeout", "1"), "bounds --wait"),
        (("runs", "resume", *REVERSED), "is not before --created-before"),
    ):
        assert main(list(args)) == 2
        assert fragment in capsys.readouterr().err
