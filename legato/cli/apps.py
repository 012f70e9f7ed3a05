"""Loading the user's ``legato.App`` (``--app module:attribute``) and ``legato deploy``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from legato.cli import command, connected, nonempty, shown
from legato.cli.deploy import add_check_options, run_check
from legato.errors import ConfigurationError
from legato.flow import App


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory on ``sys.path``) as a ``legato.App``.

    Raises ``ConfigurationError`` with a one-line message for a malformed spec, a missing
    module, a missing attribute or an attribute that is not an ``App``.
    """
    module_name, sep, attribute = spec.partition(":")
    what = f"--app {shown(spec)}"
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"{what}: expected module:attribute, e.g. --app myproject.workflows:app"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"{what}: no module named {shown(missing)} "
                f"(looked in {cwd} and the installed packages)"
            ) from None
        raise ConfigurationError(
            f"{what}: importing {shown(module_name)} failed: {error}"
        ) from None
    except (Exception, SystemExit) as error:  # the user's module runs here: sys.exit() too
        raise ConfigurationError(
            f"{what}: importing {shown(module_name)} failed: {type(error).__name__}: {error}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(
                f"{what}: module {shown(module_name)} has no {shown(attribute)}"
            )
        target = getattr(target, part)
    if not isinstance(target, App):
        kind = (
            f"the class {target.__name__}"
            if isinstance(target, type)
            else (f"a {type(target).__name__}")
        )
        raise ConfigurationError(
            f"{what}: {shown(attribute)} is {kind}, not a legato.App "
            "(make it `app = App(workflows=[...])`)"
        )
    return target


def add_app(parser: argparse.ArgumentParser, *, required: bool = True, what: str = "") -> None:
    """``--app MODULE:APP``; ``what`` adds what the command does with it."""
    parser.add_argument(
        "--app",
        type=nonempty,
        required=required,
        metavar="MODULE:APP",
        help="the legato.App to serve, e.g. examples.signup:app (the current directory is "
        "importable)" + what,
    )


async def _deploy(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    if args.check:
        return await run_check(args, app)
    if args.json:
        raise ConfigurationError("--json goes with --check: `legato deploy --check --json`")
    async with connected(args) as client:
        versions = await client.deploy(app)
    if not versions:
        print(f"{args.app} has no workflows: nothing deployed")
    for name, version in versions.items():
        print(f"{name} → v{version}")
    return 0


def register(commands: Any) -> None:
    """Register ``legato deploy`` on the root parser."""
    deploy = command(
        commands,
        "deploy",
        "store the app's workflow specs; a changed spec becomes a new version",
        _deploy,
        """examples:
  legato deploy --app examples.signup:app
  legato deploy --app myproject.workflows:app --schema legato
  legato deploy --check --app myproject.workflows:app          # before a deploy
  legato deploy --check --json --app myproject.workflows:app   # in CI

Prints each workflow's deployed version. An unchanged spec keeps its version;
runs already in flight finish on the version they started on.

--check deploys nothing: for every workflow version with runs in flight it says
whether each run could finish with this app's code (its tasks, queues, input
models, event models and child workflows), and exits 1 if any would be stranded.""",
    )
    add_app(deploy)
    add_check_options(deploy)
