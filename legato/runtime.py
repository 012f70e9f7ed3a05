"""Run Legato's loops inside any asyncio program, or as a process of its own.

```python
runtime = Runtime(engine, app)            # decider + worker + timer + sweeper + maintenance
await runtime.start()                     # e.g. in a web framework's lifespan startup
...
await runtime.stop()                      # lifespan shutdown: graceful, releases leases
```

``start`` waits up to ``startup_timeout`` seconds for an unreachable database. A loop
that crashes (a bug, not a database error) is logged at ERROR and restarted; past its
``RestartPolicy`` the runtime stops every loop, ``wait()`` returns and ``stop()`` (or
``async with``'s exit) raises ``LoopFailed``.

``legato decider``, ``legato worker``, ``legato timer`` and ``legato dev`` are this
class with some roles switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from legato.arguments import (
    MAX_BATCH_SIZE,
    MAX_DECIDERS,
    check_bytes,
    check_count,
    check_duration,
    check_poll_interval,
    check_seconds,
)
from legato.db import listen_engine
from legato.db.schema_names import engine_schema
from legato.db.server_check import check_database
from legato.engine.deploy import deploy_workflows
from legato.engine.fair_keys import FairKeys
from legato.engine.input_check import InputChecks
from legato.engine.loops.decider import DeciderLoop
from legato.engine.loops.lease_sweeper import LeaseSweeper
from legato.engine.loops.maintenance import MaintenanceLoop
from legato.engine.loops.relay import RelayLoop, RelaySettings
from legato.engine.loops.sampler import BacklogSampler
from legato.engine.loops.schedules import ScheduleLoop
from legato.engine.loops.shard_leases import DEFAULT_SHARD_TTL, ShardLease
from legato.engine.loops.supervision import Loop, RestartPolicy
from legato.engine.loops.timers import TIMER_POLL_INTERVAL, TimerLoop
from legato.engine.loops.worker import DEFAULT_MAX_OUTPUT_BYTES, Worker
from legato.engine.transport.handoff import LocalHandoff, ReportsToDecider
from legato.engine.transport.wakeups import Wakeups
from legato.errors import ConfigurationError, LoopFailed
from legato.flow import App
from legato.observability import metrics
from legato.outages import as_unavailable, database_failure, is_database_error, one_line
from legato.schema import Shards
from legato.served_queues import check_queues, served_queues
from legato.served_queues import worker_role as worker_role

log = logging.getLogger("legato")


@dataclass(frozen=True)
class Roles:
    """Which loops a process runs."""

    decider: bool = True
    worker: bool = True
    timer: bool = True
    deploy: bool = True
    relay: bool = False  # webhook deliveries from the outbox (needs legato[webhooks])

    def __post_init__(self) -> None:
        for role, value in vars(self).items():
            if not isinstance(value, bool):
                raise ConfigurationError(f"Roles({role}={value!r}): a role is True or False")


def _check_restarts(restarts: object) -> None:
    if not isinstance(restarts, RestartPolicy):
        raise ConfigurationError(f"restarts={restarts!r} must be a RestartPolicy")


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
        startup_timeout: float = 60.0,
        restarts: RestartPolicy | None = None,
        max_decision_failures: int = 10,
        decision_retry_delay: timedelta = timedelta(seconds=2),
        relay: RelaySettings | None = None,
        shard_lease: timedelta = DEFAULT_SHARD_TTL,
        distributed: bool | None = None,
    ) -> None:
        self.schema = engine_schema(engine, "Runtime")
        if not isinstance(app, App):
            raise ConfigurationError(f"Runtime(engine, app) needs a legato.App, not {app!r}")
        if not isinstance(roles, Roles):
            raise ConfigurationError(f"roles={roles!r} must be a legato.Roles")
        if queues is not None:
            queues = check_queues(queues)
        check_count("concurrency", concurrency)
        check_count("deciders", deciders, MAX_DECIDERS)
        check_count("decide_batch_size", decide_batch_size, MAX_BATCH_SIZE)
        check_count("max_decision_failures", max_decision_failures)
        check_duration("lease", lease, "timedelta(seconds=30)")
        check_duration("decision_retry_delay", decision_retry_delay, "timedelta(seconds=2)")
        check_duration("shard_lease", shard_lease, "timedelta(seconds=15)")
        check_poll_interval(poll_interval)
        check_seconds("grace_period", grace_period)
        check_seconds("startup_timeout", startup_timeout)
        check_bytes("max_output_bytes", max_output_bytes)
        if restarts is not None:
            _check_restarts(restarts)
        if relay is not None and not isinstance(relay, RelaySettings):
            raise ConfigurationError(
                f"relay={relay!r} must be a legato.engine.loops.relay.RelaySettings"
            )
        self.engine = engine
        self.startup_timeout = startup_timeout
        self.app = app
        self.roles = roles
        # Behind a transaction pooler LISTEN goes straight to the server (listen_url), or,
        # without one, nothing listens and the loops poll.
        self._listen_engine = listen_engine(engine)
        self.wakeups = Wakeups(self._listen_engine or engine)
        self.queues = queues
        self.concurrency = concurrency
        self.deciders = deciders
        self.decide_batch_size = decide_batch_size
        self.lease = lease
        self.poll_interval = poll_interval
        self.grace_period = grace_period
        self.max_output_bytes = max_output_bytes
        self.restarts = restarts
        self.max_decision_failures = max_decision_failures
        self.decision_retry_delay = decision_retry_delay
        self.relay = relay
        self.shard_lease = shard_lease
        if distributed is not None and not isinstance(distributed, bool):
            raise ConfigurationError(
                f"distributed={distributed!r} must be True, False or None (the installation's)"
            )
        # The statement layout, when forced (None: the installation's, ``Shards.distributed``).
        self.distributed = distributed
        self.served_queues = served_queues(queues, app, works=roles.worker)
        # This process in the owner ids of its shard leases (``shard_owners``), so an
        # operator can tell which process holds which keys.
        self._member = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.shard_leases: list[ShardLease] = []
        # Built by ``start`` once ``check_database`` has read the installation's keys.
        self.shards: Shards | None = None
        self.loops: list[Loop] = []
        self.worker: Worker | None = None
        self.handoff: LocalHandoff | None = None
        self.decider_loops: list[DeciderLoop] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._lease_tasks: list[asyncio.Task[None]] = []
        self._failure: LoopFailed | None = None

    def _decide_now(self, shards: Iterable[int] | None = None) -> None:
        """Wake the first decider loop for the keys ``shards`` (every key when None): a
        local worker's report of runs of those keys committed."""
        self.decider_loops[0].decide_now(shards)

    def _wake_decider(self) -> None:
        """Wake the first decider loop with no key marked: a local worker's report
        transaction ended (``ReportsToDecider.committing``)."""
        self.decider_loops[0].nudge()

    def _build_loops(self, shards: Shards) -> None:
        """The loops of this process's roles, for the installation's keys ``shards``."""
        if self.loops:
            return
        queues, app, roles = self.queues, self.app, self.roles
        concurrency, deciders, lease = self.concurrency, self.deciders, self.lease
        decide_batch_size, poll_interval = self.decide_batch_size, self.poll_interval
        grace_period, max_output_bytes = self.grace_period, self.max_output_bytes
        restarts, relay, engine = self.restarts, self.relay, self.engine
        max_decision_failures = self.max_decision_failures
        decision_retry_delay = self.decision_retry_delay
        listening = self.wakeups if self._listen_engine is not None else None
        # Both roles in one process: the worker's reports wake the first decider in memory.
        local_reports = (
            ReportsToDecider(listening, self._decide_now, self._wake_decider)
            if roles.worker and roles.decider
            else None
        )
        if roles.worker:
            served = self.served_queues
            self.worker = Worker(
                engine,
                app,
                shards=shards,
                held=self._lease(shards, worker_role(served, app)),
                queues=served,
                concurrency=concurrency,
                wakeups=listening,
                lease=lease,
                poll_interval=poll_interval,
                grace_period=grace_period,
                max_output_bytes=max_output_bytes,
                restarts=restarts,
                reports=local_reports,
            )
        if self.worker is not None and roles.decider:
            # Decisions lease new attempts to this process's worker in their own transaction.
            self.handoff = LocalHandoff(self.worker, listening, self.schema)
        if roles.decider:
            # Only the first loop LISTENs; each wakes the next when it finds more than one
            # run waiting (DeciderLoop.helper): built last to first, each given the next.
            # The process's decider loops share its decider keys.
            decider_keys = self._lease(shards, "decider")
            inputs = InputChecks(app.workflows)
            fair = FairKeys(app.tasks) if any(t.fair_share for t in app.tasks.values()) else None
            helper: DeciderLoop | None = None
            for i in reversed(range(deciders)):
                helper = DeciderLoop(
                    engine,
                    shards=shards,
                    held=decider_keys,
                    wakeups=listening if i == 0 else None,
                    batch_size=decide_batch_size,
                    poll_interval=poll_interval,
                    retry_delay=decision_retry_delay,
                    max_failures=max_decision_failures,
                    helper=helper,
                    handoff=self.handoff,
                    local_reports=local_reports if i == 0 else None,
                    restarts=restarts,
                    inputs=inputs,
                    fair=fair,
                )
                self.decider_loops.insert(0, helper)
            self.loops += self.decider_loops
            self.loops.append(MaintenanceLoop(engine, restarts=restarts))
            self.loops.append(ScheduleLoop(engine, poll_interval=poll_interval, restarts=restarts))
        if self.worker is not None:
            self.loops.append(self.worker)
        if roles.timer:
            self.loops.append(
                TimerLoop(
                    engine,
                    shards=shards,
                    held=self._lease(shards, "timer"),
                    wakeups=listening,
                    # A shorter poll fires timers closer to their time; a longer one
                    # would fire them late, so it stops at the loop's own.
                    poll_interval=min(poll_interval, TIMER_POLL_INTERVAL),
                    restarts=restarts,
                )
            )
            self.loops.append(
                LeaseSweeper(
                    engine,
                    shards=shards,
                    held=self._lease(shards, "sweeper"),
                    poll_interval=poll_interval,
                    restarts=restarts,
                )
            )
        if roles.relay:
            self.loops.append(
                RelayLoop(
                    engine,
                    relay or RelaySettings(),
                    shards=shards,
                    held=self._lease(shards, "relay"),
                    poll_interval=poll_interval,
                    restarts=restarts,
                )
            )
        if metrics.recorder().enabled:  # queue-depth gauges, sampled every few seconds
            known = {t.queue for t in app.tasks.values()} | set(queues or ())
            self.loops.append(BacklogSampler(engine, queues=known, restarts=restarts))

    def _lease(self, shards: Shards, role: str) -> ShardLease:
        """This process's lease on its share of ``role``'s keys; the loops given it take
        only from them (docs/architecture.md, "Shard keys and their leases")."""
        lease = ShardLease(
            self.engine,
            role,
            f"{role}@{self._member}",
            shards,
            ttl=self.shard_lease,
            on_change=self._keys_changed,
            restarts=self.restarts,
            wakeups=self.wakeups if self._listen_engine is not None else None,
        )
        self.shard_leases.append(lease)
        return lease

    def _keys_changed(self, _keys: Sequence[int]) -> None:
        """Keys gained are taken from at once, not at the next poll."""
        for loop in self.loops:
            if isinstance(loop, DeciderLoop):
                loop.decide_now()
            else:
                loop.nudge()

    async def _first_rounds(self) -> None:
        """Hold this process's keys before its loops take: each lease's first round, all
        at once (each role's round locks only that role; one after another they delayed
        the loops' first takes by a round trip per role). A round that fails on a
        database error is retried by its own loop."""
        await asyncio.gather(*(self._first_round(lease) for lease in self.shard_leases))

    @staticmethod
    async def _first_round(lease: ShardLease) -> None:
        try:
            await lease.start_round()
        except Exception as error:
            if not is_database_error(error):
                raise
            log.warning(
                "%s: cannot take shard keys yet (%s); retrying",
                lease.name,
                database_failure(error),
            )

    async def deploy(self) -> dict[str, int]:
        """Store the app's workflows and mark them deployed (new runs by name use them)."""
        async with self.engine.begin() as conn:
            return await deploy_workflows(conn, self.app.workflows.values())

    async def start(self) -> None:
        """Check the database, deploy (decider role) and start every loop in the background.

        An unreachable database is retried with back-off for ``startup_timeout`` seconds,
        then ``DatabaseUnavailable`` is raised (at once for a wrong password, role or
        database name). Raises ``IncompatibleDatabase`` on a server older than
        PostgreSQL 15 or a schema not migrated to this package's head. A runtime that is
        running refuses a second start (``ConfigurationError``): it would run every loop
        twice.
        """
        if self._tasks:
            raise ConfigurationError(
                "this Runtime is already running: start() it once (or use `async with "
                "Runtime(...)`), and stop() it before starting it again"
            )
        self.shards = await self._check_database()
        if self.distributed is not None:
            self.shards = replace(self.shards, distributed=self.distributed)
        self._build_loops(self.shards)
        await self._first_rounds()
        if self.roles.deploy and self.roles.decider:
            versions = await self.deploy()
            if versions:
                log.info("deployed %s", ", ".join(f"{n} v{v}" for n, v in versions.items()))
        self._failure = None
        self._tasks = [
            asyncio.create_task(self._run(loop), name=f"legato-{loop.name}") for loop in self.loops
        ]
        self._lease_tasks = [
            asyncio.create_task(self._run(lease), name=f"legato-{lease.name}")
            for lease in self.shard_leases
        ]

    async def _check_database(self) -> Shards:
        schema = self.schema
        clock = asyncio.get_running_loop()
        deadline = clock.time() + self.startup_timeout
        delay = 0.5
        while True:
            try:
                async with self.engine.connect() as conn:
                    return await check_database(conn, schema)
            except Exception as error:
                unavailable = as_unavailable(error, self.engine.url)
                if unavailable is None:
                    raise
                left = deadline - clock.time()
                if not unavailable.retryable or left <= 0:
                    raise unavailable from None
                log.warning("%s; retrying for up to %.0fs more", unavailable, left)
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)

    async def _run(self, loop: Loop) -> None:
        """One loop, until it stops; a loop that fails for good stops the others."""
        try:
            await loop.run()
        except Exception as error:
            failure = (
                error
                if isinstance(error, LoopFailed)
                else LoopFailed(f"the {loop.name} loop failed: {one_line(error)}")
            )
            if failure is not error:
                failure.__cause__ = error
            log.error("%s; stopping every loop", failure)
            self._failure = self._failure or failure
            for each in [*self.loops, *self.shard_leases]:
                each.stop()

    async def wait(self) -> None:
        """Return once every loop has finished: after ``stop()``, or when a loop failed
        for good (then ``stop()`` raises its ``LoopFailed``)."""
        if self._tasks:
            await asyncio.wait(self._tasks)

    async def stop(self) -> None:
        """Stop claiming, let in-flight tasks finish (grace period), release the rest.

        Raises ``LoopFailed`` if a loop crashed more often than its restart policy allows
        (or failed while stopping, e.g. releasing leases with the database gone)."""
        for loop in self.loops:
            loop.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks)
        self._tasks = []
        # The keys are given up once the loops that took from them have stopped.
        for lease in self.shard_leases:
            lease.stop()
        if self._lease_tasks:
            await asyncio.gather(*self._lease_tasks)
        self._lease_tasks = []
        await self.wakeups.close()
        if self._listen_engine is not None and self._listen_engine is not self.engine:
            await self._listen_engine.dispose()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run_until_signalled(self, on_started: Callable[[], None] | None = None) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully (the CLI's processes); raises
        ``LoopFailed`` after stopping when a loop failed for good. ``on_started`` is
        called once every loop runs (the CLI says so then, not before the database was
        checked). It takes the process over: the signal handlers, and ``gc.freeze()``
        once the runtime has started."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await self.start()
        if on_started is not None:
            on_started()
        # The process is this runtime's: what exists once it has started (modules, the
        # app, SQLAlchemy's and pydantic's structures) lives as long as the process, so
        # the cyclic collector stops walking it. Its full collections paused the event
        # loop for 35-58 ms at random moments here, the tail of every latency.
        gc.freeze()
        try:
            finished = asyncio.create_task(self.wait())
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({finished, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            finished.cancel()
        finally:
            log.info("stopping: finishing in-flight work")
            await self.stop()
