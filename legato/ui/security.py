"""The dashboard's guards: an access token, CSRF on every action, and body limits.

Pure ASGI middleware, so a streamed response (the live history) passes through
untouched. A token is accepted as ``Authorization: Bearer <token>``, as the cookie a
``?token=`` visit sets, or as that query parameter itself.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_COOKIE = "legato_ui_token"
CSRF_COOKIE = "legato_csrf"
CSRF_FIELD = "csrf"


def cookies(scope: Scope) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no cookie at all
                continue
    return {key: morsel.value for key, morsel in jar.items()}


def header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(a.encode(), b.encode())


def cookie_path(scope: Scope) -> str:
    return str(scope.get("root_path") or "") or "/"


class TokenGuard:
    """Refuses every request without the token (401), before the app sees it."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        bearer = header(scope, b"authorization")
        given = bearer[7:] if bearer is not None and bearer.startswith("Bearer ") else None
        if same(query.get("token"), self.token) and scope["method"] == "GET":
            # Trade the token in the address for a cookie, and drop it from the address.
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            location = scope["path"] + (f"?{rest}" if rest else "")
            await _respond(
                send,
                303,
                b"",
                [
                    (b"location", location.encode()),
                    (
                        b"set-cookie",
                        f"{TOKEN_COOKIE}={self.token}; Path={cookie_path(scope)}; HttpOnly; "
                        "SameSite=Strict".encode(),
                    ),
                ],
            )
            return
        if same(given, self.token) or same(cookies(scope).get(TOKEN_COOKIE), self.token):
            await self.app(scope, receive, send)
            return
        await _respond(
            send,
            401,
            b"legato ui: this dashboard needs its access token: open it once as "
            b"...?token=TOKEN, or send 'Authorization: Bearer TOKEN'\n",
            [(b"content-type", b"text/plain; charset=utf-8"), (b"www-authenticate", b"Bearer")],
        )


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_problem(scope: Scope, form: Mapping[str, str]) -> str | None:
    """Why an action is refused as a possible cross-site request, or None.

    Double submit: the form's hidden field must equal the SameSite=Strict cookie the
    dashboard set, which another site can neither read nor send. A browser's
    ``Origin`` naming another host is refused too.
    """
    origin = header(scope, b"origin")
    host = header(scope, b"host")
    cross_site = origin not in (None, "null") and host is not None
    if cross_site and str(origin).split("://", 1)[-1] != host:
        return f"the request came from another site ({origin}), not from this dashboard"
    if not same(form.get(CSRF_FIELD), cookies(scope).get(CSRF_COOKIE)):
        return (
            "the form's CSRF token is missing or does not match this browser's cookie: "
            "reload the page and try again"
        )
    return None


def csrf_cookie(scope: Scope, token: str) -> dict[str, Any]:
    return {
        "key": CSRF_COOKIE,
        "value": token,
        "path": cookie_path(scope),
        "httponly": True,
        "samesite": "strict",
    }
