"""Schedules as pure logic: ticks, time zones, catch-up plans and declaration errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel

from legato import CatchUp, InvalidSchedule
from legato.context import TaskContext
from legato.flow import Flow, Node, task, workflow
from legato.flow.ticks import (
    Policy,
    Timing,
    idempotency_key,
    next_tick,
    plan,
    ticks_back,
)

MINUTE = Timing(cron="* * * * *", every=None)
EVERY_10S = Timing(cron=None, every=timedelta(seconds=10))
T = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_interval_ticks_count_from_the_epoch() -> None:
    assert next_tick(EVERY_10S, T + timedelta(seconds=3)) == T + timedelta(seconds=10)
    assert next_tick(EVERY_10S, T) == T + timedelta(seconds=10)  # strictly after
    assert ticks_back(EVERY_10S, T + timedelta(seconds=25), T, 10) == [
        T + timedelta(seconds=20),
        T + timedelta(seconds=10),
        T,
    ]


def test_cron_in_a_time_zone_fires_at_local_wall_clock_time() -> None:
    paris = Timing(cron="0 9 * * *", every=None, timezone="Europe/Paris")
    # 09:00 in Paris is 07:00 UTC in summer and 08:00 UTC in winter.
    assert next_tick(paris, T) == datetime(2025, 6, 2, 7, 0, tzinfo=UTC)
    assert next_tick(paris, datetime(2025, 1, 1, tzinfo=UTC)) == datetime(
        2025, 1, 1, 8, 0, tzinfo=UTC
    )


def test_cron_across_a_dst_gap_fires_once_after_it() -> None:
    paris = Timing(cron="30 2 * * *", every=None, timezone="Europe/Paris")
    # 2025-03-30 02:30 does not exist in Paris: the tick is 03:00 local (01:00 UTC).
    assert next_tick(paris, datetime(2025, 3, 29, 12, tzinfo=UTC)) == datetime(
        2025, 3, 30, 1, 0, tzinfo=UTC
    )


def test_cron_at_a_repeated_local_time_fires_once_at_its_first_occurrence() -> None:
    paris = Timing(cron="30 2 * * *", every=None, timezone="Europe/Paris")
    first = next_tick(paris, datetime(2025, 10, 25, 12, tzinfo=UTC))
    assert first == datetime(2025, 10, 26, 0, 30, tzinfo=UTC)  # 02:30 CEST
    assert next_tick(paris, first) == datetime(2025, 10, 27, 1, 30, tzinfo=UTC)


def test_cron_ticks_back_include_the_upper_bound() -> None:
    assert ticks_back(MINUTE, T, T - timedelta(minutes=2), 10) == [
        T,
        T - timedelta(minutes=1),
        T - timedelta(minutes=2),
    ]
    assert ticks_back(MINUTE, T + timedelta(seconds=30), T, 1) == [T]


def _plan(catch_up: CatchUp, missed: int, late: timedelta, **kw: object) -> list[int]:
    """Minutes (relative to T) fired when ``missed`` ticks were missed before T."""
    policy = Policy(catch_up, **kw)  # type: ignore[arg-type]
    result = plan(MINUTE, policy, T - timedelta(minutes=missed), T + late)
    assert result.next_fire_at == T + timedelta(minutes=1)
    return [int((t - T) / timedelta(minutes=1)) for t in result.ticks]


def test_on_time_tick_fires_under_every_policy() -> None:
    for catch_up in CatchUp:
        assert _plan(catch_up, 0, timedelta(seconds=1)) == [0]


def test_all_fires_every_missed_tick_oldest_first_bounded() -> None:
    assert _plan(CatchUp.ALL, 3, timedelta(seconds=1)) == [-3, -2, -1, 0]
    assert _plan(CatchUp.ALL, 300, timedelta(seconds=1), max_catch_up=2) == [-1, 0]


def test_once_fires_only_the_latest_missed_tick_however_old() -> None:
    assert _plan(CatchUp.ONCE, 60, timedelta(seconds=1)) == [0]
    late = plan(
        Timing(cron="0 * * * *", every=None),
        Policy(CatchUp.ONCE),
        T - timedelta(hours=5),
        T + timedelta(minutes=59),
    )
    assert late.ticks == (T,)


def test_skip_fires_the_latest_tick_only_within_its_grace() -> None:
    grace = timedelta(seconds=5)
    assert _plan(CatchUp.SKIP, 60, timedelta(seconds=4), grace=grace) == [0]
    assert _plan(CatchUp.SKIP, 60, timedelta(seconds=6), grace=grace) == []


def test_skip_does_not_count_the_poll_interval_against_the_grace() -> None:
    grace, poll = timedelta(0), timedelta(seconds=1)
    on_time = plan(MINUTE, Policy(CatchUp.SKIP, grace=grace), T, T + timedelta(seconds=0.9), poll)
    assert on_time.ticks == (T,)
    late = plan(MINUTE, Policy(CatchUp.SKIP, grace=grace), T, T + timedelta(seconds=1.1), poll)
    assert late.ticks == ()


def test_a_schedule_not_yet_due_fires_nothing() -> None:
    result = plan(MINUTE, Policy(CatchUp.ALL), T + timedelta(minutes=1), T)
    assert result.ticks == () and result.next_fire_at == T + timedelta(minutes=1)


def test_idempotency_key_names_schedule_and_utc_tick() -> None:
    paris = datetime(2025, 6, 1, 14, 0, tzinfo=UTC).astimezone()
    assert idempotency_key("nightly", paris) == "schedule:nightly:2025-06-01T14:00:00+00:00"


class Report(BaseModel):
    region: str


@task()
async def build(ctx: TaskContext, report: Report) -> Report:
    return report


@workflow("schedules.report")
def report(flow: Flow[Report]) -> Node[Report]:
    return flow.run(build, flow.input)


def test_workflow_schedule_declares_a_typed_schedule() -> None:
    declared = report.schedule(
        "report-eu", cron="0 3 * * *", timezone="Europe/Paris", input=Report(region="eu")
    )
    assert report.schedules["report-eu"] is declared
    assert declared.input == {"region": "eu"}
    assert declared.policy == Policy(CatchUp.SKIP, 100, timedelta(minutes=1))
    with pytest.raises(InvalidSchedule, match=r"already has a schedule 'report-eu'"):
        report.schedule("report-eu", every=timedelta(hours=1), input=Report(region="eu"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, r"bad cron expression '61 \* \* \* \*': Bad minute"),
        ({"cron": "* * *"}, r"bad cron expression '\* \* \*'"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, r"unknown time zone 'Mars/Olympus'"),
        (
            {"every": timedelta(0)},
            r"every must be a positive timedelta, got datetime.timedelta\(0\)",
        ),
        ({"every": timedelta(seconds=-5)}, r"every must be a positive timedelta"),
        ({"every": timedelta(hours=1), "timezone": "Europe/Paris"}, r"cron schedules only"),
        ({}, r"exactly one of cron="),
        ({"cron": "* * * * *", "every": timedelta(seconds=1)}, r"exactly one of cron="),
        ({"cron": "* * * * *", "catch_up": "sometimes"}, r"catch_up must be one of .*'sometimes'"),
        ({"cron": "* * * * *", "max_catch_up": 0}, r"max_catch_up must be an int from 1"),
        ({"cron": "* * * * *", "grace": 5}, r"grace must be a timedelta"),
    ],
)
def test_bad_schedule_options_name_the_value(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        report.schedule("bad", input=Report(region="eu"), **options)  # type: ignore[arg-type]
    assert "bad" not in report.schedules


def test_the_cron_hint_names_both_accepted_shapes() -> None:
    with pytest.raises(InvalidSchedule) as bad:
        report.schedule("bad", cron="* * *", input=Report(region="eu"))
    assert "five fields" in str(bad.value) and "or six, with seconds first" in str(bad.value)
    seconds = report.schedule("every-10s", cron="*/10 * * * * *", input=Report(region="eu"))
    assert next_tick(seconds.timing, T) == T + timedelta(seconds=10)
    del report.schedules["every-10s"]


def test_schedule_input_must_fit_the_workflow_input() -> None:
    with pytest.raises(InvalidSchedule, match=r"schedule 'typo': .*invalid input"):
        report.schedule("typo", cron="* * * * *", input={"regoin": "eu"})  # type: ignore[arg-type]


def test_catch_up_accepts_the_lowercase_names() -> None:
    declared = report.schedule(
        "report-all", every=timedelta(minutes=5), catch_up="all", input=Report(region="us")
    )
    assert declared.policy.catch_up is CatchUp.ALL
