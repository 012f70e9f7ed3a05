"""The dashboard's pure parts: the runs-list query string, the graph's states and SVG,
and the refusal to serve beyond loopback without a token."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from examples.orders import orders
from legato.cli.ui import check_exposure, is_loopback
from legato.errors import ConfigurationError, InvalidArgument, InvalidRunId
from legato.models import RunFilter
from legato.schema import RunStatus, TaskState, uuid7
from legato.ui.filters import MAX_LIMIT, parse_filter
from legato.ui.graph import PENDING, node_states, render_svg
from legato.ui.security import same, same_site_path


def test_filter_parses_every_field() -> None:
    run_id = uuid7()
    wanted = parse_filter(
        {
            "workflow": "orders",
            "version": "3",
            "status": "running",
            "from": "2025-01-31T09:30",
            "to": "2025-02-01T00:00+02:00",
            "error_type": "ValueError",
            "node": "charge",
            "before": str(run_id),
            "limit": "10",
            "q": "",
        }
    )
    # The criteria of `legato runs list`: a legato.RunFilter, times without a zone in UTC.
    assert wanted.chosen == RunFilter(
        workflow="orders",
        version=3,
        status=RunStatus.RUNNING,
        created_after=datetime(2025, 1, 31, 9, 30, tzinfo=UTC),
        created_before=datetime(2025, 2, 1, tzinfo=timezone(timedelta(hours=2))),
        error_type="ValueError",
        node="charge",
    )
    assert wanted.before == run_id and wanted.limit == 10
    assert wanted.search_id is None and wanted.search_key is None
    # Paging keeps the filter and replaces the cursor.
    assert "before" not in dict(wanted.raw)
    assert "workflow=orders" in wanted.query_string(before="x")
    assert parse_filter({}).chosen == RunFilter()


def test_search_is_a_run_id_or_an_idempotency_key() -> None:
    run_id = uuid.uuid4()
    assert parse_filter({"q": f" {run_id} "}).search_id == run_id
    assert parse_filter({"q": "order-17"}).search_key == "order-17"


@pytest.mark.parametrize(
    ("params", "error", "says"),
    [
        ({"limit": str(MAX_LIMIT + 1)}, InvalidArgument, "from 1 to"),
        ({"limit": "0"}, InvalidArgument, "from 1 to"),
        ({"limit": "ten"}, InvalidArgument, "'ten'"),
        ({"limit": "\u00b2"}, InvalidArgument, "from 1 to"),
        ({"version": "0"}, InvalidArgument, "version='0' must be a whole number from 1 to"),
        ({"version": "1" * 13}, InvalidArgument, "version="),
        ({"node": "x" * 300}, InvalidArgument, "node"),
        ({"error_type": "a\x00b"}, InvalidArgument, "error_type"),
        ({"status": "done"}, InvalidArgument, "'done' is not a run status"),
        ({"from": "soon"}, InvalidArgument, "'soon' is not a time"),
        ({"from": "2025-01-02", "to": "2025-01-01"}, InvalidArgument, "range is empty"),
        ({"before": "nope"}, InvalidRunId, "'nope' is not a run id"),
        ({"q": "a\x00b"}, InvalidArgument, "idempotency key"),
        ({"page": "2"}, InvalidArgument, "unknown parameter 'page'"),
    ],
)
def test_bad_filters_name_the_parameter(
    params: dict[str, str], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        parse_filter(params)


def test_node_states_take_the_latest_attempt_of_each_iteration() -> None:
    states = node_states(
        [
            ("charge", 0, 1, TaskState.FAILED),
            ("charge", 0, 2, TaskState.COMPLETED),
            ("map-reserve", 0, 1, TaskState.COMPLETED),
            ("map-reserve", 1, 1, TaskState.RUNNING),
            ("ship_express", 0, 1, TaskState.SKIPPED),
        ]
    )
    assert states["charge"].summary == "COMPLETED"
    assert states["map-reserve"].summary == "RUNNING"
    assert states["map-reserve"].iterations == {0: TaskState.COMPLETED, 1: TaskState.RUNNING}
    assert states["ship_express"].summary == "SKIPPED"


def test_svg_colours_nodes_and_draws_map_cells() -> None:
    states = node_states(
        [("map-reserve", i, 1, TaskState.COMPLETED) for i in range(30)]
        + [("ship_express", 0, 1, TaskState.SKIPPED)]
    )
    svg = render_svg(orders.spec, states)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'data-node="map-reserve" data-state="COMPLETED"' in svg
    assert 'data-node="ship_express" data-state="SKIPPED"' in svg
    assert f'data-node="receipt" data-state="{PENDING}"' in svg
    assert svg.count('class="iter state-COMPLETED"') == 24  # then "+6"
    assert ">+6<" in svg
    assert svg.count('class="edge"') >= len(orders.spec.nodes)


def test_svg_escapes_names() -> None:
    from legato.flow.spec import TaskNodeSpec, TaskSpec, WorkflowSpec

    spec = WorkflowSpec(
        name="w<b>",
        nodes=(TaskNodeSpec(id="n<i>", task="t&x", inputs=("$input",)),),
        output="n<i>",
        tasks={"t&x": TaskSpec(name="t&x")},
    )
    svg = render_svg(spec)
    assert "<i>" not in svg and "<b>" not in svg
    assert "n&lt;i&gt;" in svg and "t&amp;x" in svg


def test_serving_beyond_loopback_needs_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    check_exposure("127.0.0.1", None)
    check_exposure("0.0.0.0", "s3cret")
    with pytest.raises(ConfigurationError, match=r"--host '0\.0\.0\.0'.*--token"):
        check_exposure("0.0.0.0", None)


@pytest.mark.parametrize(
    ("path", "redirect"),
    [
        ("/workflows", "/workflows"),
        ("//evil.example/", "/evil.example/"),
        ("/\\evil.example", "/evil.example"),
        ("\\/\\/evil.example", "/evil.example"),
    ],
)
def test_the_token_visit_redirects_within_the_site(path: str, redirect: str) -> None:
    assert same_site_path(path) == redirect


def test_an_empty_secret_matches_nothing() -> None:
    assert not same("", "")
    assert not same(None, None)
    assert not same("", "x")
    assert same("x", "x")
