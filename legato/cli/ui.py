"""``legato ui``: serve the dashboard (``legato.ui``) with uvicorn.

Safe by default: it binds to loopback and is read-only; ``--allow-actions`` turns on
cancel, signal and resume, and binding anywhere else needs ``--token`` (or
``LEGATO_UI_TOKEN``), which every request must then carry. Without a token it answers
only to loopback ``Host`` names, the address it is bound to and ``--allowed-host``.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
from typing import Any

from legato.cli import command, connected, nonempty, number_in
from legato.errors import ConfigurationError

log = logging.getLogger("legato")

_port = number_in(int, 0, 65535, "a port number (0 to 65535; 0 picks a free one)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"--host {host!r} is reachable from other machines: pass --token (or set "
            "LEGATO_UI_TOKEN) so every request must carry it, or keep the default "
            "--host 127.0.0.1 and put the dashboard behind your own authenticating proxy"
        )


def allowed_hosts(given: list[str] | None, bound: str, token: str | None) -> list[str] | None:
    """The ``Host`` names to answer to besides loopback: ``--allowed-host`` (else
    ``$LEGATO_UI_ALLOWED_HOSTS``, comma-separated) and the bound address; None, any
    host, with a token and none given."""
    from legato.ui.security import allowed_host

    source = "--allowed-host"
    if not given and os.environ.get("LEGATO_UI_ALLOWED_HOSTS", "").strip():
        source = "LEGATO_UI_ALLOWED_HOSTS"
        given = os.environ["LEGATO_UI_ALLOWED_HOSTS"].split(",")
    if not given:
        return None if token is not None else [bound]
    try:
        return [*map(allowed_host, given), bound]
    except ConfigurationError as error:
        raise ConfigurationError(f"{source}: {error}") from None


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen()  # connections queue from the banner on, not from uvicorn's start
    except OSError as error:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {error.strerror or error} "
            "(pick another --port or --host)"
        ) from None
    return sock


async def _ui(args: argparse.Namespace) -> int:
    from legato.cli.apps import load_app

    try:
        import uvicorn

        from legato.ui import create_app
    except ImportError as error:
        raise ConfigurationError(
            f"legato ui needs the ui extra ({error.name} is missing): pip install 'legato[ui]'"
        ) from None
    from legato.ui.security import check_token

    token = args.token or os.environ.get("LEGATO_UI_TOKEN") or None
    if token is not None:  # before connecting, named as it was given
        check_token(token, "--token" if args.token else "LEGATO_UI_TOKEN")
    check_exposure(args.host, token)
    hosts = allowed_hosts(args.allowed_host, args.host, token)
    app = load_app(args.app) if args.app else None
    read_only = not args.allow_actions
    async with connected(args, app) as client:
        sock = _listen(args.host, args.port)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        mode = "read-only" if read_only else "actions allowed"
        print(f"legato ui: serving http://{shown}:{port}/ ({mode}); Ctrl-C stops it", flush=True)
        if token is not None:
            print(f"  open http://{shown}:{port}/?token=... once to sign this browser in")
        config = uvicorn.Config(
            create_app(client, read_only=read_only, token=token, allowed_hosts=hosts),
            # The cookies are Secure when scope["scheme"] is https, which uvicorn also
            # sets from X-Forwarded-Proto, for the proxies in $FORWARDED_ALLOW_IPS only
            # (default: 127.0.0.1 and ::1).
            proxy_headers=True,
            log_level=args.log_level.lower(),
            access_log=args.log_level == "DEBUG",
            lifespan="on",
        )
        await uvicorn.Server(config).serve(sockets=[sock])
    return 0


def register(commands: Any) -> None:
    parser = command(
        commands,
        "ui",
        "serve a dashboard of runs, workflows and queues",
        _ui,
        """examples:
  legato ui                                  # http://127.0.0.1:8080/, read-only
  legato ui --allow-actions --app examples.signup:app
  LEGATO_UI_TOKEN=s3cret legato ui --host 0.0.0.0 --port 9000
  legato ui --allowed-host dash.internal     # reached as http://dash.internal:8080/
""",
        description="Serve the Legato dashboard: runs with filters, each run's graph, "
        "attempts and live history, workflows and their versions, queues, quarantined runs.",
    )
    parser.add_argument(
        "--host",
        type=nonempty,
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1, loopback)",
    )
    parser.add_argument(
        "--port", type=_port, default=8080, help="port to bind; 0 picks a free one (default: 8080)"
    )
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument(
        "--read-only",
        action="store_true",
        help="refuse cancel, signal, resume and rerun (the default)",
    )
    actions.add_argument(
        "--allow-actions",
        action="store_true",
        help="allow cancelling runs, sending signals, resuming quarantined runs and "
        "rerunning finished ones",
    )
    parser.add_argument(
        "--token",
        type=nonempty,
        help="an access token every request must carry; required with a --host other than "
        "loopback: printable ASCII without spaces, quotes, ';' or '\\', as it travels in "
        "a header and a cookie (default: $LEGATO_UI_TOKEN)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a Host name to answer to besides localhost, 127.0.0.1, [::1] and --host "
        "(repeatable; *.example.com for subdomains, * for any); without --token every other "
        "Host is refused, with --token any Host is accepted unless this is given "
        "(default: $LEGATO_UI_ALLOWED_HOSTS, comma-separated)",
    )
    parser.add_argument(
        "--app",
        type=nonempty,
        metavar="MODULE:APP",
        help="the legato.App whose event models validate signal payloads sent from the page",
    )
