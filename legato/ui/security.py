"""The dashboard's guards: a Host allow-list, an access token, CSRF on every action,
and security headers on every response.

Pure ASGI middleware, so a streamed response (the live history) passes through
untouched. A token is accepted as ``Authorization: Bearer <token>`` (the scheme in any
case), as the cookie a ``?token=`` visit sets, or as that query parameter itself.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterable, Mapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from legato.errors import ConfigurationError

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
    """Whether two secrets match; an empty one matches nothing (an empty CSRF cookie and
    an empty form field are no proof of anything)."""
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())


def cookie_path(scope: Scope) -> str:
    return str(scope.get("root_path") or "") or "/"


def over_tls(scope: Scope) -> bool:
    """Whether the browser reached us over TLS, so cookies must be ``Secure``.

    Behind a proxy this is the scheme the server rewrote from ``X-Forwarded-Proto``,
    which uvicorn does only for the proxies it trusts (``FORWARDED_ALLOW_IPS``).
    """
    return scope.get("scheme") == "https"


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")


def _ip_literal(text: str) -> str | None:
    """``text`` as an IP address written the way a ``Host`` header writes it (IPv6 in
    brackets, compressed), or None when it is no IP address."""
    try:
        address = ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def allowed_host(value: str) -> str:
    """One allowed-host entry, normalised: a host name or IP address (any port is
    accepted), ``*.example.com`` for the subdomains of example.com, or ``*`` for any."""
    name = value.strip().lower()
    if name == "*" or (name.startswith("*.") and _NAME.fullmatch(name[2:])):
        return name
    literal = _ip_literal(name)
    if literal is not None:
        return literal
    if _NAME.fullmatch(name):
        return name
    if not name:
        problem = "is empty"
    elif "/" in name or "@" in name:
        problem = "is a URL, not a host: give only its host name, e.g. 'dash.example.com'"
    elif ":" in name:
        problem = f"has a port: give the host alone ({name.rsplit(':', 1)[0]!r})"
    else:
        problem = "is not a host name or IP address"
    raise ConfigurationError(
        f"allowed host {value[:100]!r} {problem} (a host name, an IP address, "
        "*.example.com for its subdomains, or * for any host; every port is accepted)"
    )


def host_of(value: str | None) -> str | None:
    """The host of a ``Host`` header, normalised as ``allowed_host`` does and without
    its port, or None when the header is missing or is not a host."""
    text = (value or "").strip().lower()
    if text.startswith("["):
        address, bracket, port = text.partition("]")
        host = _ip_literal(address + bracket) if bracket else None
    else:
        address, _, port = text.partition(":")
        host = address if _NAME.fullmatch(address) else None
        port = f":{port}" if port else ""
    if port and not (port.startswith(":") and port[1:].isascii() and port[1:].isdigit()):
        return None
    return host


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    return any(
        pattern == "*"
        or host == pattern
        or (pattern.startswith("*.") and host.endswith(pattern[1:]))
        for pattern in (*LOOPBACK_HOSTS, *allowed)
    )


class HostGuard:
    """Refuses (421) a request whose ``Host`` is not a loopback name or an allowed host:
    a page on another site can reach a loopback dashboard through DNS rebinding, and
    its requests then carry the other site's name."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = header(scope, b"host")
        host = host_of(given)
        if host is not None and host_allowed(host, self.allowed):
            await self.app(scope, receive, send)
            return
        # The refusal names neither the allowed hosts nor anything else a rebinding
        # page could learn from.
        named = "no Host header" if given is None else f"Host {given[:100]!r}"
        allow = f"--allowed-host {host}" if host is not None else "--allowed-host NAME"
        message = (
            f"legato ui: refused a request with {named}: this dashboard answers only to "
            "localhost, 127.0.0.1, [::1] and the hosts it is allowed, so that a page on "
            "another site cannot reach it through DNS rebinding. If you open it by that "
            f"name, start it with `legato ui {allow}` (create_app(allowed_hosts=[...]))\n"
        )
        await _respond(
            send, 421, message.encode(), [(b"content-type", b"text/plain; charset=utf-8")]
        )


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
        given = bearer_token(header(scope, b"authorization"))
        if same(query.get("token"), self.token) and scope["method"] == "GET":
            # Trade the token in the address for a cookie, and drop it from the address.
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            location = same_site_path(scope["path"]) + (f"?{rest}" if rest else "")
            await _respond(
                send,
                303,
                b"",
                [
                    (b"location", location.encode()),
                    (
                        b"set-cookie",
                        f"{TOKEN_COOKIE}={self.token}; Path={cookie_path(scope)}; HttpOnly; "
                        f"SameSite=Strict{'; Secure' if over_tls(scope) else ''}".encode(),
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


# What a cookie value cannot hold unquoted (RFC 6265's cookie-octet): the sign-in cookie
# carries the token as it is, and a browser would cut it short or drop the whole header.
_NOT_IN_COOKIES = frozenset(' ";\\')
TOKEN_RULE = (
    "a token travels in an `Authorization: Bearer` header and a cookie, so it must be "
    "printable ASCII without spaces, '\"', ';' or '\\' (e.g. `openssl rand -hex 32`)"
)


def token_problem(token: str) -> str | None:
    """Why ``token`` could never be presented, or None. The problem names a character,
    never the token (a secret): an unprintable one (a newline, a tab) or one beyond ASCII
    cannot be sent in an HTTP header as such, and a space, quote, semicolon or backslash
    breaks the sign-in cookie."""
    if not token:
        return "is empty"
    for position, char in enumerate(token, 1):
        where = f"at position {position} of {len(token)}"
        if not char.isprintable():
            return f"has the unprintable character U+{ord(char):04X} {where}"
        if not char.isascii():
            return f"has the non-ASCII character U+{ord(char):04X} {where}"
        if char in _NOT_IN_COOKIES:
            return f"has the character {char!r} {where}"
    return None


def check_token(token: str, what: str = "token") -> str:
    """``token`` if a client can present it, else ``ConfigurationError`` naming ``what``
    (``--token`` in the CLI) and the offending character, never the token."""
    problem = token_problem(token) if isinstance(token, str) else "must be a string"
    if problem is not None:
        raise ConfigurationError(f"{what} {problem}: {TOKEN_RULE}")
    return token


def same_site_path(path: str) -> str:
    """``path`` as a redirect that stays on this site: a browser reads ``//host/...``
    and ``/\\host/...`` as another host's address, so leading slashes and backslashes
    collapse into one slash."""
    return "/" + path.lstrip("/\\")


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer ...`` header; the scheme is
    matched in any case (RFC 7235)."""
    scheme, _, credentials = (authorization or "").partition(" ")
    return credentials.strip(" ") if scheme.lower() == "bearer" else None


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guards(token: str | None, allowed_hosts: Iterable[str] | None) -> list[Middleware]:
    """The dashboard's middleware: the Host check, then the token check.

    Hosts are checked when ``allowed_hosts`` is given, and always without a token
    (loopback names only, then); a token alone is defence enough, since a page on
    another site cannot know it. A token no client could present (``token_problem``)
    is a ``ConfigurationError``.
    """
    if isinstance(allowed_hosts, str):
        raise ConfigurationError(
            f"allowed_hosts={allowed_hosts[:100]!r} is one string: pass a list of hosts, "
            f"e.g. allowed_hosts=[{allowed_hosts[:100]!r}]"
        )
    allowed = None if allowed_hosts is None else tuple(map(allowed_host, allowed_hosts))
    middleware = []
    if (allowed is not None or token is None) and "*" not in (allowed or ()):
        middleware.append(Middleware(HostGuard, allowed=allowed or ()))
    if token is not None:
        middleware.append(Middleware(TokenGuard, token=check_token(token)))
    return middleware


SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
        b"object-src 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null`
    # on the dashboard's own form posts, and the CSRF check could no longer read it.
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every response that does not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers += [h for h in SECURITY_HEADERS if h[0] not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_secured)


class SecuredStarlette(Starlette):
    """A Starlette app whose every response carries the security headers, its own
    last-resort 500 page (sent outside the user middleware) included."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


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
        "secure": over_tls(scope),
    }
