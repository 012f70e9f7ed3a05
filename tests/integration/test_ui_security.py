"""The dashboard against a page on another site: the Host allow-list that stops DNS
rebinding (reproduced end to end), the security headers on every response, Secure
cookies over TLS (directly or behind a trusted proxy), and the Bearer scheme in any
case; over HTTP on a real database, and through ``legato ui`` itself."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Message
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from examples.signup import Signup, signup
from legato import App, Client, ConfigurationError
from legato.schema import RunStatus
from legato.ui import create_app
from tests.helpers import spawn_legato

APP = App(workflows=[signup])
EVIL = "evil.example:8000"
HEADERS = {
    "content-security-policy": "default-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'; object-src 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


@pytest_asyncio.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[Client]:
    async with Client(engine, app=APP) as legato:
        yield legato


def http(
    app: object, base_url: str = "http://127.0.0.1:8080", peer: str = "127.0.0.1"
) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=base_url)


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match, "the page has no action form"
    return match.group(1)


def secure(response: httpx.Response, cookie: str) -> bool:
    """Whether the response sets ``cookie`` with the Secure attribute."""
    found = [c for c in response.headers.get_list("set-cookie") if c.startswith(f"{cookie}=")]
    assert len(found) == 1, response.headers.get_list("set-cookie")
    return "secure" in found[0].lower().split("; ")


async def test_dns_rebinding_cannot_read_a_run_or_cancel_it(client: Client) -> None:
    """The rebinding sequence: the attacker's page, now resolving to 127.0.0.1, fetches a
    run page under its own name, takes the CSRF cookie and form token, and posts the
    cancel with Origin and Host both its own. Today's dashboard refuses every step."""
    handle = await client.start(signup, Signup(email="ada@example.com"))
    async with http(create_app(client, read_only=False)) as web:  # --allow-actions, no token
        page = await web.get(f"/runs/{handle.run_id}", headers={"host": EVIL})
        assert page.status_code == 421
        assert "ada@example.com" not in page.text and 'name="csrf"' not in page.text
        assert "set-cookie" not in page.headers
        # Rebound, the page is same-origin with evil.example:8000, so it can set any
        # cookie there itself: a double-submit token it made up is as good as a real one.
        web.cookies.set("legato_csrf", "chosen-by-the-attacker")
        posted = await web.post(
            f"/runs/{handle.run_id}/cancel",
            data={"csrf": "chosen-by-the-attacker"},
            headers={"host": EVIL, "origin": f"http://{EVIL}"},
        )
        assert posted.status_code == 421
    after = (await client.get_run(handle.run_id)).run
    assert after.status is RunStatus.RUNNING and not after.cancel_requested

    # The dashboard's own page, opened by a loopback name, still cancels.
    for host in ("localhost:8080", "127.0.0.1:8080"):
        run = await client.start(signup, Signup(email=f"{host.split(':')[0]}@example.com"))
        async with http(create_app(client, read_only=False), f"http://{host}") as web:
            page = await web.get(f"/runs/{run.run_id}")
            assert page.status_code == 200
            cancelled = await web.post(
                f"/runs/{run.run_id}/cancel",
                data={"csrf": csrf_of(page)},
                headers={"origin": f"http://{host}"},
            )
            assert cancelled.status_code == 303
        assert (await client.get_run(run.run_id)).run.cancel_requested


async def test_only_loopback_and_allowed_hosts_are_answered(client: Client) -> None:
    async def status(web: httpx.AsyncClient, host: str, token: str | None = None) -> int:
        headers = {"host": host} | ({"authorization": f"Bearer {token}"} if token else {})
        return (await web.get("/workflows", headers=headers)).status_code

    async with http(create_app(client)) as web:
        for host in ("localhost", "localhost:8080", "127.0.0.1:9", "[::1]:8080", "LOCALHOST"):
            assert await status(web, host) == 200, host
        for host in (EVIL, "localhost.evil.example", "127.0.0.1.nip.io", "[::1", "x:y:z", ""):
            assert await status(web, host) == 421, host
        refused = await web.get("/", headers={"host": EVIL})
        assert refused.headers["content-type"].startswith("text/plain")
        assert "Host 'evil.example:8000'" in refused.text
        assert "--allowed-host evil.example" in refused.text

    allowed = ["Dash.Example", "*.corp.example", "10.0.0.7", "fd00::7"]
    async with http(create_app(client, allowed_hosts=allowed)) as web:
        for host in ("dash.example:443", "a.corp.example", "10.0.0.7:8080", "[fd00::7]", "[::1]"):
            assert await status(web, host) == 200, host
        for host in ("corp.example", "dash.example.evil", EVIL):
            assert await status(web, host) == 421, host

    async with http(create_app(client, allowed_hosts=["*"])) as web:
        assert await status(web, EVIL) == 200

    # A token is defence enough (a page on another site cannot know it): any Host,
    # unless allowed hosts are named as well.
    async with http(create_app(client, token="s3cret")) as web:
        assert await status(web, EVIL, "s3cret") == 200
    async with http(create_app(client, token="s3cret", allowed_hosts=["dash.example"])) as web:
        assert await status(web, "dash.example", "s3cret") == 200
        assert await status(web, EVIL, "s3cret") == 421


@pytest.mark.parametrize(
    ("allowed", "says"),
    [
        ([""], "allowed host '' is empty"),
        (["  "], "is empty"),
        (["http://dash.example/"], "is a URL, not a host"),
        (["dash.example:8080"], "has a port: give the host alone ('dash.example')"),
        (["dash example"], "is not a host name"),
        (["a.*.example"], "is not a host name"),
        ("dash.example", "is one string: pass a list"),
    ],
)
async def test_bad_allowed_hosts_are_configuration_errors(
    client: Client, allowed: list[str], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        create_app(client, allowed_hosts=allowed)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (
            ["--allowed-host", "https://dash.example"],
            {},
            "--allowed-host: allowed host 'https://dash.example' is a URL",
        ),
        (
            ["--allowed-host", "ok.example", "--allowed-host", ""],
            {},
            "--allowed-host: allowed host '' is empty",
        ),
        (
            [],
            {"LEGATO_UI_ALLOWED_HOSTS": "ok.example,,b"},
            "LEGATO_UI_ALLOWED_HOSTS: allowed host '' is empty",
        ),
    ],
)
def test_cli_refuses_a_bad_allowed_host_in_one_line(
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    says: str,
) -> None:
    from legato.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["ui", "--database-url", database_url, "--port", "0", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"legato: error: {says}"), err
    assert len(err.strip().splitlines()) == 1


async def _response_start(app: object, path: str) -> Message:
    """The ``http.response.start`` a streamed response sends before its first byte;
    the client then disconnects."""
    started: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def receive() -> Message:
        await started
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start" and not started.done():
            started.set_result(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8080")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    serving = asyncio.ensure_future(app(scope, receive, send))  # type: ignore[operator]
    try:
        async with asyncio.timeout(30):
            return await started
    finally:
        async with asyncio.timeout(30):
            await serving


async def test_every_response_carries_the_security_headers(client: Client) -> None:
    handle = await client.start(signup, Signup(email="ada@example.com"))
    run = f"/runs/{handle.run_id}"
    dashboard = create_app(client)
    async with dashboard.router.lifespan_context(dashboard), http(dashboard) as web:
        responses = [
            await web.get(run),
            await web.get("/static/legato.js"),
            await web.get("/no/such/page"),  # 404
            await web.get("/runs/not-a-run"),  # 400
            await web.post(f"{run}/cancel", data={"csrf": "x"}),  # 403, read-only
            await web.get("/", headers={"host": EVIL}),  # 421
        ]
        stream = await _response_start(dashboard, f"{run}/events")  # the run is still live
    async with http(create_app(client, token="s3cret")) as web:
        responses += [await web.get("/"), await web.get("/?token=s3cret")]  # 401, 303
    assert [r.status_code for r in responses] == [200, 200, 404, 400, 403, 421, 401, 303]
    for response in responses:
        assert {name: response.headers.get(name) for name in HEADERS} == HEADERS, response
    assert stream["status"] == 200
    streamed = {name.decode(): value.decode() for name, value in stream["headers"]}
    assert streamed["content-type"].startswith("text/event-stream")
    assert {name: streamed.get(name) for name in HEADERS} == HEADERS
    # The policy allows no inline script: the page loads its one script from a file.
    assert re.findall(r"<script[^>]*>", responses[0].text) == ['<script src="/static/legato.js">']
    assert " style=" not in responses[0].text and "<style" not in responses[0].text


async def test_cookies_are_secure_over_tls_and_behind_a_trusted_proxy(client: Client) -> None:
    async with http(create_app(client), "http://127.0.0.1:8080") as web:
        assert not secure(await web.get("/"), "legato_csrf")
    async with http(create_app(client), "https://127.0.0.1:8443") as web:
        assert secure(await web.get("/"), "legato_csrf")
    async with http(create_app(client, token="s3cret"), "https://127.0.0.1:8443") as web:
        assert secure(await web.get("/?token=s3cret"), "legato_ui_token")
    async with http(create_app(client, token="s3cret")) as web:
        assert not secure(await web.get("/?token=s3cret"), "legato_ui_token")

    # Behind a proxy: uvicorn (which `legato ui` runs with proxy_headers on) takes the
    # scheme from X-Forwarded-Proto only when the proxy is one it trusts.
    proxied = ProxyHeadersMiddleware(create_app(client), trusted_hosts="10.0.0.2")  # type: ignore[arg-type]
    forwarded = {"x-forwarded-proto": "https"}
    async with http(proxied, peer="10.0.0.2") as web:
        assert secure(await web.get("/", headers=forwarded), "legato_csrf")
    async with http(proxied, peer="10.0.0.66") as web:
        assert not secure(await web.get("/", headers=forwarded), "legato_csrf")


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_the_bearer_scheme_is_matched_in_any_case(client: Client, scheme: str) -> None:
    async with http(create_app(client, token="s3cret")) as web:
        right = await web.get("/", headers={"authorization": f"{scheme} s3cret"})
        assert right.status_code == 200
        for wrong in (f"{scheme} wrong", "Basic s3cret", f"{scheme}s3cret", "s3cret"):
            assert (await web.get("/", headers={"authorization": wrong})).status_code == 401


async def test_legato_ui_answers_its_own_names_and_the_allowed_hosts(database_url: str) -> None:
    """The command as an operator runs it: the bound address and ``--allowed-host``
    are answered, any other Host refused, and the cookie is Secure when the (loopback,
    so trusted) proxy says the browser came over TLS."""
    env = {"LEGATO_DATABASE_URL": database_url, "LEGATO_UI_ALLOWED_HOSTS": "env.example"}
    ui = await spawn_legato("ui", "--port", "0", "--host", "127.0.0.2", env=env)
    try:
        assert ui.stdout is not None
        async with asyncio.timeout(60):
            banner = (await ui.stdout.readline()).decode()
        assert "serving" in banner, banner
        url = banner.split("serving ", 1)[1].split()[0]
        port = url.rstrip("/").rsplit(":", 1)[1]
        async with httpx.AsyncClient(base_url=url) as web:
            assert (await web.get("/workflows")).status_code == 200  # Host 127.0.0.2:PORT
            for host in (f"env.example:{port}", f"localhost:{port}"):
                assert (await web.get("/workflows", headers={"host": host})).status_code == 200
            assert (await web.get("/workflows", headers={"host": EVIL})).status_code == 421
            web.cookies.clear()  # a new browser, which the page gives a CSRF cookie
            behind_tls = await web.get("/", headers={"x-forwarded-proto": "https"})
        assert secure(behind_tls, "legato_csrf")
    finally:
        ui.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await ui.communicate()
