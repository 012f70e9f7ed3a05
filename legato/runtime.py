"""Run Legato's loops inside any asyncio program, or as a process of its own.

```python
runtime = Runtime(engine, app)            # decider + worker + timer + sweeper + maintenance
await runtime.start()                     # e.g. in a web framework's lifespan startup
...
await runtime.stop()                      # lifespan shutdown: graceful, releases leases
```

``legato decider``, ``legato worker``, ``legato timer`` and ``legato dev`` are this
class with some roles switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.db import check_database
from legato.engine.decider_loop import DeciderLoop
from legato.engine.deploy import deploy_workflows
from legato.engine.loops import Loop, Wakeups
from legato.engine.maintenance import MaintenanceLoop
from legato.engine.scheduling import ScheduleLoop
from legato.engine.timer_loop import LeaseSweeper, TimerLoop
from legato.engine.worker import DEFAULT_MAX_OUTPUT_BYTES, Worker
from legato.flow import App

log = logging.getLogger("legato")


@dataclass(frozen=True)
class Roles:
    """Which loops a process runs."""

    decider: bool = True
    worker: bool = True
    timer: bool = True
    deploy: bool = True


class Runtime:
    """Owns the loops of one process and starts and stops them together."""

    def __init__(
        self,
        engine: AsyncEngine,
        app: App,
        *,
        roles: Roles = Roles(),
        queues: tuple[str, ...] | None = None,
        concurrency: int = 16,
        deciders: int = 2,
        decide_batch_size: int = 200,
        lease: timedelta = timedelta(seconds=30),
        poll_interval: float = 1.0,
        grace_period: float = 30.0,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self.engine = engine
        self.app = app
        self.roles = roles
        self.wakeups = Wakeups(engine)
        self.loops: list[Loop] = []
        self.worker: Worker | None = None
        self.decider_loops: list[DeciderLoop] = []
        if roles.decider:
            # Only the first loop LISTENs; each wakes the next when it finds more than one
            # run waiting (DeciderLoop.helper).
            self.decider_loops = [
                DeciderLoop(
                    engine,
                    wakeups=self.wakeups if i == 0 else None,
                    batch_size=decide_batch_size,
                    poll_interval=poll_interval,
                )
                for i in range(deciders)
            ]
            for loop, helper in zip(self.decider_loops, self.decider_loops[1:], strict=False):
                loop.helper = helper
            self.loops += self.decider_loops
            self.loops.append(MaintenanceLoop(engine))
            self.loops.append(ScheduleLoop(engine, poll_interval=poll_interval))
        if roles.worker:
            served = queues or tuple(sorted({t.queue for t in app.tasks.values()})) or ("default",)
            self.worker = Worker(
                engine,
                app,
                queues=served,
                concurrency=concurrency,
                wakeups=self.wakeups,
                lease=lease,
                poll_interval=poll_interval,
                grace_period=grace_period,
                max_output_bytes=max_output_bytes,
            )
            self.loops.append(self.worker)
        if roles.timer:
            self.loops.append(TimerLoop(engine, wakeups=self.wakeups))
            self.loops.append(LeaseSweeper(engine, poll_interval=poll_interval))
        self._tasks: list[asyncio.Task[None]] = []

    async def deploy(self) -> dict[str, int]:
        """Store the app's workflows and mark them deployed (new runs by name use them)."""
        async with self.engine.begin() as conn:
            return await deploy_workflows(conn, self.app.workflows.values())

    async def start(self) -> None:
        """Check the database, deploy (decider role) and start every loop in the background.

        Raises ``IncompatibleDatabase`` on a server older than PostgreSQL 15 or a schema
        not migrated to this package's head.
        """
        schema = str(self.engine.get_execution_options()["schema_translate_map"]["legato"])
        async with self.engine.connect() as conn:
            await check_database(conn, schema)
        if self.roles.deploy and self.roles.decider:
            versions = await self.deploy()
            if versions:
                log.info("deployed %s", ", ".join(f"{n} v{v}" for n, v in versions.items()))
        self._tasks = [
            asyncio.create_task(loop.run(), name=f"legato-{loop.name}") for loop in self.loops
        ]

    async def stop(self) -> None:
        """Stop claiming, let in-flight tasks finish (grace period), release the rest."""
        for loop in self.loops:
            loop.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.wakeups.close()

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run_until_signalled(self) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully (the CLI's processes)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            finished = asyncio.create_task(asyncio.wait(self._tasks, return_when="FIRST_EXCEPTION"))
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({finished, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            finished.cancel()
        finally:
            log.info("stopping: finishing in-flight work")
            await self.stop()
