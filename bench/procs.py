"""Worker and decider OS processes for the end-to-end scenarios.

multiprocessing's ``forkserver``: a clean server process imports Legato and the
bench workflows once, then forks each worker/decider from it, so a fleet starts in
a fraction of a second instead of paying the imports per process (and nothing is
forked from the benchmark's own event loop).

Each process connects and warms its pool, reports ready, waits for ``go``, runs a
:class:`legato.Runtime` with its roles (reporting ``running`` once it has started)
until ``stop``, then shuts down gracefully.
Optionally each is profiled by ``py-spy record`` (``--profile DIR``).
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import shutil
import subprocess
import sys
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from bench.harness import Target

ROLE_WORKER = "worker"
ROLE_DECIDER = "decider"
ROLE_ALL = "all"  # decider, worker and timer in one process: decisions hand off to its worker
DECIDER_LOOPS = 2  # per decider process: Runtime's default


@dataclass(frozen=True)
class ProcSpec:
    target: Target
    role: str
    concurrency: int = 64
    poll_interval: float = 0.5
    metrics: bool = False


def _main(spec: ProcSpec, ready: Event, go: Event, running: Event, stop: Event) -> None:
    asyncio.run(_serve(spec, ready, go, running, stop))


async def _serve(spec: ProcSpec, ready: Event, go: Event, running: Event, stop: Event) -> None:
    from bench.flows import app
    from legato import Roles, Runtime

    if spec.metrics:
        from legato.observability import enable_metrics

        enable_metrics()
    engine = spec.target.engine()  # Legato's own pool, as `legato worker` has
    try:
        async with engine.connect() as conn:  # warm the pool and the dialect
            await conn.exec_driver_sql("SELECT 1")
        roles = {
            ROLE_DECIDER: Roles(decider=True, worker=False, timer=True, deploy=False),
            ROLE_WORKER: Roles(decider=False, worker=True, timer=False, deploy=False),
            ROLE_ALL: Roles(decider=True, worker=True, timer=True, deploy=False),
        }[spec.role]
        runtime = Runtime(
            engine,
            app,
            roles=roles,
            concurrency=spec.concurrency,
            poll_interval=spec.poll_interval,
            grace_period=5.0,
            deciders=DECIDER_LOOPS,
        )
        ready.set()
        await asyncio.to_thread(go.wait)
        await runtime.start()
        gc.freeze()  # as the CLI's processes do (Runtime.run_until_signalled)
        running.set()
        await asyncio.to_thread(stop.wait)
        await runtime.stop()
    finally:
        await engine.dispose()


class Fleet:
    """A set of worker, decider and all-role processes sharing ready/go/stop events."""

    def __init__(
        self,
        target: Target,
        *,
        workers: int,
        deciders: int,
        both: int = 0,
        concurrency: int = 64,
        profile_dir: Path | None = None,
        profile_label: str = "",
        metrics: bool = False,
    ) -> None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["bench.flows", "bench.procs", "legato.runtime", "legato.db"])
        self._ready: list[Event] = []
        self._running: list[Event] = []
        self.go = ctx.Event()
        self.stop_event = ctx.Event()
        self.procs: list[Any] = []
        self.names: list[str] = []
        self.profile_dir = profile_dir
        self.profile_label = profile_label
        self._spies: list[subprocess.Popen[bytes]] = []
        for role, count in ((ROLE_DECIDER, deciders), (ROLE_WORKER, workers), (ROLE_ALL, both)):
            for i in range(count):
                ready, running = ctx.Event(), ctx.Event()
                spec = ProcSpec(target, role, concurrency=concurrency, metrics=metrics)
                proc = ctx.Process(
                    target=_main,
                    args=(spec, ready, self.go, running, self.stop_event),
                    daemon=True,
                )
                self._ready.append(ready)
                self._running.append(running)
                self.procs.append(proc)
                self.names.append(f"{role}-{i}")
        parts = [
            f"{workers} worker process(es) x {concurrency} slots" if workers else "",
            f"{deciders} decider process(es) x {DECIDER_LOOPS} loops" if deciders else "",
            f"{both} process(es) with decider x {DECIDER_LOOPS} loops, worker x "
            f"{concurrency} slots and timer"
            if both
            else "",
        ]
        self.layout = " + ".join(filter(None, parts)) + (", metrics on" if metrics else "")

    def start(self, timeout: float = 60.0) -> None:
        for proc in self.procs:
            proc.start()
        for ready, proc in zip(self._ready, self.procs, strict=True):
            if not ready.wait(timeout):
                raise RuntimeError(f"bench process {proc.pid} did not get ready")
        if self.profile_dir is not None:
            beside = Path(sys.executable).with_name("py-spy")
            spy = str(beside) if beside.exists() else shutil.which("py-spy")
            if spy is None:
                raise RuntimeError("--profile needs py-spy: pip install py-spy")
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            for name, proc in zip(self.names, self.procs, strict=True):
                out = self.profile_dir / f"{self.profile_label}{name}.txt"
                self._spies.append(
                    subprocess.Popen(
                        [
                            spy,
                            "record",
                            "-p",
                            str(proc.pid),
                            "-f",
                            "raw",
                            "-r",
                            "200",
                            "-o",
                            str(out),
                            "--nonblocking",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )

    def release(self) -> None:
        self.go.set()

    def wait_running(self, timeout: float = 60.0) -> None:
        """Block until every process's runtime has started (after ``release``)."""
        for running, proc in zip(self._running, self.procs, strict=True):
            if not running.wait(timeout):
                raise RuntimeError(f"bench process {proc.pid} did not start its runtime")

    def shutdown(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        self.go.set()
        for proc in self.procs:
            proc.join(timeout)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        for spy in self._spies:
            try:
                spy.wait(15)
            except subprocess.TimeoutExpired:
                spy.terminate()
