"""The dashboard as an ASGI app: ``create_app(client)`` serves it, ``legato ui`` runs it,
and a host service can mount it (``Mount("/legato", create_app(client))``).

Pages are rendered on the server (Jinja2, autoescaped: payloads are user data); the
only script is the live run page, an ``EventSource`` on a server-sent event stream fed
by the ``run_events`` NOTIFY channel: it appends the new history and swaps in the
header, graph, timeline and attempts the server re-renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from pydantic import JsonValue
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from legato.arguments import as_run_id
from legato.client import Client
from legato.engine.repositories import definitions, progress, stats, ui_queries
from legato.enums import FINAL_EVENT_TYPES, RunStatus
from legato.errors import (
    InvalidArgument,
    InvalidInput,
    LegatoError,
    PayloadTooLarge,
    RunFinished,
    RunNotFound,
    UnknownWorkflow,
)
from legato.limits import check_name, parse_json_text
from legato.models import HistoryEvent
from legato.ui import graph, timeline, views
from legato.ui.filters import is_whole_number, parse_filter, single_values
from legato.ui.live import Live
from legato.ui.security import (
    CSRF_COOKIE,
    SecuredStarlette,
    cookies,
    csrf_cookie,
    csrf_problem,
    guards,
    new_csrf_token,
)

log = logging.getLogger("legato.ui")

HERE = Path(__file__).parent
MAX_FORM_BYTES = 2 << 20
LIVE_POLL_SECONDS = 2.0
# The run page shows a run's latest progress entries; Client.stream reads them all.
PROGRESS_SHOWN = 50

_STATUS_OF: tuple[tuple[type[LegatoError], int], ...] = (
    (RunNotFound, 404),
    (UnknownWorkflow, 404),
    (RunFinished, 409),
    (PayloadTooLarge, 413),
)


class Refused(LegatoError):
    """An action the dashboard will not take (read-only, CSRF); answered with 403."""


class Dashboard:
    """The routes' shared state: the client, the options and the template environment."""

    def __init__(self, client: Client, *, read_only: bool) -> None:
        self.client = client
        self.read_only = read_only
        self.live = Live(client)
        self.specs: dict[tuple[str, int], views.StoredSpec] = {}
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["pretty"] = views.pretty
        self.env.filters["when"] = views.when
        self.env.globals["PREVIEW_CHARS"] = views.PREVIEW_CHARS
        for helper in (
            views.duration,
            views.summary,
            views.event_error,
            views.without_tracebacks,
            views.has_traceback,
            views.is_cached,
            views.attempt_anchor,
        ):
            self.env.globals[helper.__name__] = helper

    # -- rendering --------------------------------------------------------------------------

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        token = cookies(request.scope).get(CSRF_COOKIE) or new_csrf_token()
        html = self.env.get_template(name).render(
            prefix=_prefix(request),
            read_only=self.read_only,
            csrf=token,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if CSRF_COOKIE not in cookies(request.scope):
            response.set_cookie(**csrf_cookie(request.scope, token))
        return response

    def macros(self) -> Any:
        return self.env.get_template("macros.html").module

    def history_row(self, run_id: uuid.UUID, event: HistoryEvent, prefix: str) -> str:
        return str(self.macros().history_row(run_id, event, prefix))

    def run_parts(self, view: views.RunView, prefix: str) -> dict[str, str]:
        """The run page's live parts, by element id, as the stream sends them."""
        macros = self.macros()
        return {
            "run-status": str(macros.run_badges(view, prefix)),
            "run-meta": str(macros.run_meta(view, prefix)),
            "graph": str(macros.graph_box(view)),
            "timeline": str(macros.timeline_box(view)),
            "attempts-body": str(macros.attempt_rows(view, prefix)),
            "progress": str(macros.progress_box(view)),
        }

    async def spec(self, name: str, version: int) -> views.StoredSpec | None:
        """A version's stored spec, validated or with the reason it does not validate;
        cached: a stored version never changes."""
        key = (name, version)
        if key not in self.specs:
            async with self.client.engine.connect() as conn:
                raw = await definitions.load_spec(conn, name, version)
            if raw is None:
                return None
            self.specs[key] = views.stored_spec(raw)
        return self.specs[key]

    async def run_view(self, run_id: uuid.UUID) -> views.RunView:
        details = await self.client.get_run(run_id)
        shard = (await self.client.shards()).of_run(run_id)
        attempts: list[ui_queries.Attempt] = await self.read(
            lambda c: ui_queries.attempts(c, shard, run_id)
        )
        quarantine = await self.read(lambda c: ui_queries.quarantine_of(c, shard, run_id))
        reported = await self.read(lambda c: progress.latest(c, shard, run_id, PROGRESS_SHOWN))
        stored = await self.spec(details.run.workflow_name, details.run.workflow_version)
        svg = None
        if stored is not None and stored.spec is not None:
            states = graph.node_states(
                (a.node_id, a.iteration, a.attempt, a.state) for a in attempts
            )
            svg = Markup(graph.render_svg(stored.spec, states))  # it escapes every label
        bars = timeline.render_timeline(attempts, details.run.created_at, datetime.now(UTC))
        return views.RunView(
            run=details.run,
            history=details.history,
            attempts=attempts,
            quarantine=quarantine,
            stored=stored,
            graph=svg,
            timeline=None if bars is None else Markup(bars),  # it escapes every label
            rerun_of=details.rerun_of,
            reruns=details.reruns,
            nodes=() if stored is None else stored.node_ids,
            progress=tuple(reported),
        )

    async def read(self, query: Any) -> Any:
        async with self.client.engine.connect() as conn:
            return await query(conn)

    # -- pages ------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        wanted = parse_filter(single_values(request.query_params.multi_items()))
        ids: tuple[uuid.UUID, ...] | None = None
        if wanted.search_id is not None:
            ids = (wanted.search_id,)
        elif wanted.search_key is not None:
            key = wanted.search_key
            ids = tuple(await self.read(lambda c: ui_queries.runs_with_key(c, key)))
        query = ui_queries.RunQuery(chosen=wanted.chosen, ids=ids)
        rows: list[ui_queries.RunListRow] = await self.read(
            lambda c: ui_queries.list_runs(c, query, wanted.before, wanted.limit + 1)
        )
        older = rows[wanted.limit - 1].id if len(rows) > wanted.limit else None
        versions: list[ui_queries.VersionRow] = await self.read(ui_queries.workflow_versions)
        return self.page(
            request,
            "runs.html",
            runs=rows[: wanted.limit],
            filter=wanted,
            older=older,
            workflows=sorted({v.name for v in versions}),
            statuses=[status.value for status in RunStatus],
        )

    async def run(self, request: Request) -> Response:
        view = await self.run_view(as_run_id(request.path_params["run_id"]))
        return self.page(request, "run.html", view=view, run=view.run)

    async def payload(self, request: Request) -> Response:
        """One payload in full: ``of`` is input, output, ``task:<id>:input|output`` or
        ``event:<seq>``."""
        run_id = as_run_id(request.path_params["run_id"])
        of = request.query_params.get("of", "")
        details = await self.client.get_run(run_id)
        value: JsonValue
        if of in ("input", "output"):
            value = details.run.input if of == "input" else details.run.output
        elif of.startswith("task:"):
            _, task_text, which = [*of.split(":"), "", ""][:3]
            try:
                task_id = uuid.UUID(task_text)
            except ValueError:
                raise InvalidArgument(
                    f"of={of[:80]!r}: {task_text[:40]!r} is not a task id"
                ) from None
            if which not in ("input", "output"):
                raise InvalidArgument(f"of={of[:80]!r}: end it with :input or :output")
            shard = (await self.client.shards()).of_run(run_id)
            found = await self.read(lambda c: ui_queries.task_payload(c, shard, run_id, task_id))
            if found is None:
                raise RunNotFound(f"run {run_id} has no attempt {task_id}")
            value = found[0] if which == "input" else found[1]
        elif of.startswith("event:") and is_whole_number(of[6:]):
            seq = int(of[6:])
            events = [e for e in details.history if e.seq == seq]
            if not events:
                raise RunNotFound(f"run {run_id} has no history event {seq}")
            value = events[0].data
        else:
            raise InvalidArgument(
                f"of={of[:80]!r}: ask for input, output, task:<id>:input, "
                "task:<id>:output or event:<seq>"
            )
        return self.page(request, "payload.html", run=details.run, of=of, value=value)

    async def events(self, request: Request) -> Response:
        """The run's history after ``Last-Event-ID`` (a reconnecting EventSource sends
        the last seq it saw) or ``?after=``, then each new event as it is appended."""
        run_id = as_run_id(request.path_params["run_id"])
        resume = request.headers.get("last-event-id") or request.query_params.get("after", "0")
        if not is_whole_number(resume) or len(resume) > 18:
            raise InvalidArgument(
                f"after={resume[:40]!r} must be a history seq: a whole number >= 0"
            )
        after = int(resume)
        run = (await self.client.get_run(run_id)).run  # 404 before the stream starts
        return StreamingResponse(
            self._tail(run_id, after, run.status.finished, _prefix(request)),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def _tail(
        self, run_id: uuid.UUID, seq: int, finished: bool, prefix: str
    ) -> AsyncIterator[str]:
        wake = await self.live.watch(run_id)
        woke = False  # a wake without history is a task's progress: re-render the parts
        try:
            while True:
                wake.clear()  # before reading: an event appended meanwhile wakes us again
                events = await self.client.history(run_id, seq)
                for event in events:
                    data = self.history_row(run_id, event, prefix).replace("\n", "\ndata: ")
                    yield f"id: {event.seq}\nevent: history\ndata: {data}\n\n"
                    seq = event.seq
                finished = finished or any(e.type in FINAL_EVENT_TYPES for e in events)
                if events or finished or woke:
                    parts = self.run_parts(await self.run_view(run_id), prefix)
                    yield f"event: run\ndata: {json.dumps(parts)}\n\n"
                if finished:
                    yield "event: end\ndata: finished\n\n"
                    return
                if events:
                    continue
                try:
                    await asyncio.wait_for(wake.wait(), timeout=LIVE_POLL_SECONDS)
                    woke = True
                except TimeoutError:  # nothing notified: poll, and notice a finish
                    woke = False
                    finished = (await self.client.get_run(run_id)).run.status.finished
                    yield ": still here\n\n"
        finally:
            self.live.unwatch(run_id, wake)

    async def workflows(self, request: Request) -> Response:
        versions: list[ui_queries.VersionRow] = await self.read(ui_queries.workflow_versions)
        return self.page(request, "workflows.html", versions=versions)

    async def workflow(self, request: Request) -> Response:
        name = check_name("workflow", request.path_params["name"], InvalidArgument)
        text = request.path_params["version"]
        if not is_whole_number(text) or len(text) > 9:
            raise InvalidArgument(f"version {text[:40]!r} must be a whole number, e.g. 1")
        stored = await self.spec(name, int(text))
        if stored is None:
            raise UnknownWorkflow(f"no stored version {text} of workflow {name!r:.80}")
        spec = stored.spec
        return self.page(
            request,
            "workflow.html",
            workflow_name=name,
            version=int(text),
            stored=stored,
            # render_svg escapes every label
            graph=None if spec is None else Markup(graph.render_svg(spec)),
            spec_json=stored.raw if spec is None else spec.model_dump(mode="json"),
        )

    async def queues(self, request: Request) -> Response:
        rows: list[ui_queries.QueueRow] = await self.read(ui_queries.task_queues)
        decide: stats.Backlog = await self.read(stats.decide_backlog)  # as `legato stats`
        quarantined: int = await self.read(stats.quarantined_count)
        queues: dict[str, dict[str, Any]] = {}
        for row in rows:
            entry = queues.setdefault(row.queue, {"waiting": 0, "oldest": None, "leased": []})
            if row.lease_owner is None:
                entry["waiting"] = row.tasks
                entry["oldest"] = row.oldest_available_at
            else:
                entry["leased"].append((row.lease_owner, row.tasks))
        return self.page(
            request, "queues.html", queues=queues, decide=decide, quarantined=quarantined
        )

    async def quarantine(self, request: Request) -> Response:
        parked = await self.client.list_quarantined(limit=200)
        return self.page(request, "quarantine.html", parked=parked)

    # -- actions ----------------------------------------------------------------------------

    async def form(self, request: Request) -> dict[str, str]:
        """The action's urlencoded form, after the read-only and CSRF checks."""
        if self.read_only:
            raise Refused(
                "this dashboard is read-only: actions are off (start it with "
                "`legato ui --allow-actions`, or create_app(read_only=False))"
            )
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise PayloadTooLarge(f"the form is over {MAX_FORM_BYTES} bytes")
        try:
            form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise InvalidInput("the form is not UTF-8 text") from None
        problem = csrf_problem(request.scope, form)
        if problem is not None:
            raise Refused(problem)
        return form

    async def cancel(self, request: Request) -> Response:
        run_id = as_run_id(request.path_params["run_id"])
        await self.form(request)
        await self.client.cancel(run_id)
        return self._back(request, run_id)

    async def signal(self, request: Request) -> Response:
        run_id = as_run_id(request.path_params["run_id"])
        form = await self.form(request)
        name = form.get("name", "").strip()
        text = form.get("payload") or "null"
        payload = parse_json_text(text, "the signal's payload")
        run = (await self.client.get_run(run_id)).run
        stored = await self.spec(run.workflow_name, run.workflow_version)
        spec = None if stored is None else stored.spec
        if spec is not None and name not in spec.event_names():
            known = ", ".join(sorted(spec.event_names())) or "none"
            raise InvalidInput(
                f"workflow {run.workflow_name!r} waits for no event {name!r} (its events: {known})"
            )
        await self.client.signal(run_id, name, payload)  # the app's event model validates
        return self._back(request, run_id)

    async def resume(self, request: Request) -> Response:
        run_id = as_run_id(request.path_params["run_id"])
        await self.form(request)
        if not await self.client.resume(run_id):
            raise InvalidInput(f"run {run_id} is not quarantined: nothing to resume")
        return self._back(request, run_id)

    async def rerun(self, request: Request) -> Response:
        run_id = as_run_id(request.path_params["run_id"])
        form = await self.form(request)
        from_node = form.get("from_node", "").strip() or None
        handle = await self.client.rerun(
            run_id, from_node=from_node, version=form.get("version", "deployed")
        )
        return self._back(request, handle.run_id)

    def _back(self, request: Request, run_id: uuid.UUID) -> Response:
        return RedirectResponse(f"{_prefix(request)}/runs/{run_id}", status_code=303)

    # -- errors -----------------------------------------------------------------------------

    async def legato_error(self, request: Request, error: Exception) -> Response:
        status = 403 if isinstance(error, Refused) else 400
        for kind, code in _STATUS_OF:
            if isinstance(error, kind):
                status = code
        return self.error_page(request, status, str(error))

    async def http_error(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        detail = {404: f"no page at {request.url.path}", 405: "that method is not allowed here"}
        message = detail.get(error.status_code, str(error.detail))
        return self.error_page(request, error.status_code, message)

    async def database_error(self, request: Request, error: Exception) -> Response:
        log.warning("database error serving %s: %s", request.url.path, error)
        return self.error_page(request, 503, "the database cannot answer right now; try again")

    async def unreadable(self, request: Request, error: Exception) -> Response:
        log.warning("a stored value behind %s cannot be read: %r", request.url.path, error)
        return self.error_page(
            request,
            500,
            "a value stored for this page nests too deeply to be read back (written by SQL "
            "of one's own, or by hand?): the run cannot be shown",
        )

    def error_page(self, request: Request, status: int, message: str) -> Response:
        return self.page(request, "error.html", status=status, status_code=status, message=message)


def _prefix(request: Request) -> str:
    """Where the app is mounted ("" at the root): every link starts with it."""
    return str(request.scope.get("root_path") or "").rstrip("/")


def create_app(
    client: Client,
    *,
    read_only: bool = True,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard over ``client``'s database, as an ASGI app.

    ``read_only`` (the default) refuses cancel, signal, resume and rerun. With ``token``,
    every request must carry it; without one, put the app behind your own auth.
    ``allowed_hosts`` are the ``Host`` names it answers to besides localhost,
    127.0.0.1 and [::1] (``*.example.com`` for subdomains, ``*`` for any); without a
    token it answers to those names only, with a token to any host unless
    ``allowed_hosts`` is given. A bad entry raises ``ConfigurationError``.
    The client is the caller's: the app does not close it.
    """
    ui = Dashboard(client, read_only=read_only)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await ui.live.close()

    routes = [
        Route("/", ui.runs, name="runs"),
        Route("/runs/{run_id}", ui.run, name="run"),
        Route("/runs/{run_id}/payload", ui.payload, name="payload"),
        Route("/runs/{run_id}/events", ui.events, name="events"),
        Route("/runs/{run_id}/cancel", ui.cancel, methods=["POST"], name="cancel"),
        Route("/runs/{run_id}/signal", ui.signal, methods=["POST"], name="signal"),
        Route("/runs/{run_id}/resume", ui.resume, methods=["POST"], name="resume"),
        Route("/runs/{run_id}/rerun", ui.rerun, methods=["POST"], name="rerun"),
        Route("/workflows", ui.workflows, name="workflows"),
        # A workflow's name may hold "/": the version is the last segment.
        Route("/workflows/{name:path}/{version}", ui.workflow, name="workflow"),
        Route("/queues", ui.queues, name="queues"),
        Route("/quarantine", ui.quarantine, name="quarantine"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: Mapping[Any, Any] = {
        LegatoError: ui.legato_error,
        HTTPException: ui.http_error,
        DBAPIError: ui.database_error,
        OSError: ui.database_error,
        RecursionError: ui.unreadable,
    }
    app = SecuredStarlette(
        routes=routes,
        exception_handlers=handlers,
        lifespan=lifespan,
        middleware=guards(token or None, allowed_hosts),
    )
    app.state.dashboard = ui
    return app
