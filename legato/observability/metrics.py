"""Prometheus metrics (the ``legato[prometheus]`` extra), off unless enabled.

The engine reports every event to :func:`recorder`. Until :func:`enable_metrics` is
called that is a :class:`Recorder` whose methods do nothing, so a process without
metrics pays one empty call per event and never imports ``prometheus_client``.

```python
from prometheus_client import CollectorRegistry
registry = CollectorRegistry()
legato.observability.enable_metrics(registry)   # before Runtime(...)
# mount prometheus_client.make_asgi_app(registry) in your own app, or:
legato.observability.serve_metrics(9464, registry)
```
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from legato.errors import ConfigurationError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


# Latency buckets in seconds: from a hot wake-up (~ms) to a task of minutes.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Backlog(Protocol):
    """A queue's backlog as the gauges read it (``repositories.stats.Backlog`` is one)."""

    @property
    def queue(self) -> str: ...
    @property
    def depth(self) -> int: ...
    def oldest_age(self, now: datetime) -> float: ...


class Recorder:
    """Receives the engine's events; this base records nothing (metrics off)."""

    enabled = False

    def run_started(self, workflow: str) -> None: ...
    def run_finished(self, workflow: str, status: str) -> None: ...
    def attempt_claimed(self, task: str, queue: str, waited: float) -> None: ...
    def attempt_completed(self, task: str, queue: str, seconds: float) -> None: ...
    def attempt_failed(self, task: str, queue: str, seconds: float) -> None: ...
    def attempt_timed_out(self, task: str | None, queue: str | None) -> None: ...
    def decisions(self, runs: int, seconds: float) -> None: ...
    def decision_failed(self) -> None: ...
    def start_to_first_task(self, seconds: float) -> None: ...
    def signal_to_next_task(self, seconds: float) -> None: ...
    def backlog(self, decide: Backlog, tasks: Sequence[Backlog], now: datetime) -> None: ...


class PrometheusRecorder(Recorder):
    """Counters, histograms and gauges named ``legato_*`` in ``registry``."""

    enabled = True

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            return Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            return Histogram(name, doc, labels, registry=registry, buckets=_BUCKETS)

        def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            return Gauge(name, doc, labels, registry=registry)

        self._runs_started = counter(
            "legato_runs_started_total", "Runs decided for the first time", ["workflow"]
        )
        self._runs_finished = counter(
            "legato_runs_finished_total", "Runs finished, by final status", ["workflow", "status"]
        )
        self._claimed = counter(
            "legato_attempts_claimed_total", "Attempts claimed by workers", ["task", "queue"]
        )
        self._completed = counter(
            "legato_attempts_completed_total", "Attempts that returned", ["task", "queue"]
        )
        self._failed = counter(
            "legato_attempts_failed_total", "Attempts that raised", ["task", "queue"]
        )
        self._timed_out = counter(
            "legato_attempts_timed_out_total",
            "Attempts timed out (start_to_close, schedule_to_start, heartbeat, lease expiry)",
            ["task", "queue"],
        )
        self._decisions = counter("legato_decisions_total", "Runs decided")
        self._decision_failures = counter(
            "legato_decision_failures_total", "Decisions that raised and were postponed"
        )
        self._duration = histogram(
            "legato_attempt_duration_seconds", "Time a task function ran", ["task", "queue"]
        )
        self._queue_wait = histogram(
            "legato_attempt_queue_wait_seconds",
            "Claim-to-start: from an attempt becoming claimable to a worker starting it",
            ["queue"],
        )
        self._batch = histogram(
            "legato_decision_batch_seconds", "Time to claim, decide and commit one batch"
        )
        self._first_task = histogram(
            "legato_start_to_first_task_seconds",
            "From a run's start to its first decision making a task claimable",
        )
        self._after_signal = histogram(
            "legato_signal_to_next_task_seconds",
            "From a signal's arrival to the decision that consumed it making a task claimable",
        )
        self._decide_depth = gauge("legato_decide_queue_depth", "Runs due for a decision")
        self._decide_age = gauge(
            "legato_decide_queue_oldest_age_seconds", "How long the oldest due decision waited"
        )
        self._task_depth = gauge(
            "legato_task_queue_depth", "Attempts ready and unclaimed", ["queue"]
        )
        self._task_age = gauge(
            "legato_task_queue_oldest_age_seconds",
            "How long the oldest ready, unclaimed attempt waited",
            ["queue"],
        )
        self._sampled_queues: set[str] = set()

    def run_started(self, workflow: str) -> None:
        self._runs_started.labels(workflow).inc()

    def run_finished(self, workflow: str, status: str) -> None:
        self._runs_finished.labels(workflow, status).inc()

    def attempt_claimed(self, task: str, queue: str, waited: float) -> None:
        self._claimed.labels(task, queue).inc()
        self._queue_wait.labels(queue).observe(max(waited, 0.0))

    def attempt_completed(self, task: str, queue: str, seconds: float) -> None:
        self._completed.labels(task, queue).inc()
        self._duration.labels(task, queue).observe(seconds)

    def attempt_failed(self, task: str, queue: str, seconds: float) -> None:
        self._failed.labels(task, queue).inc()
        self._duration.labels(task, queue).observe(seconds)

    def attempt_timed_out(self, task: str | None, queue: str | None) -> None:
        self._timed_out.labels(task or "", queue or "").inc()

    def decisions(self, runs: int, seconds: float) -> None:
        self._decisions.inc(runs)
        self._batch.observe(seconds)

    def decision_failed(self) -> None:
        self._decision_failures.inc()

    def start_to_first_task(self, seconds: float) -> None:
        self._first_task.observe(max(seconds, 0.0))

    def signal_to_next_task(self, seconds: float) -> None:
        self._after_signal.observe(max(seconds, 0.0))

    def backlog(self, decide: Backlog, tasks: Sequence[Backlog], now: datetime) -> None:
        self._decide_depth.set(decide.depth)
        self._decide_age.set(decide.oldest_age(now))
        seen = {b.queue for b in tasks}
        for gone in self._sampled_queues - seen:  # drained since the last sample
            self._task_depth.labels(gone).set(0)
            self._task_age.labels(gone).set(0)
        for item in tasks:
            self._task_depth.labels(item.queue).set(item.depth)
            self._task_age.labels(item.queue).set(item.oldest_age(now))
        self._sampled_queues |= seen


_current: Recorder = Recorder()


def recorder() -> Recorder:
    """Where the engine reports events: a no-op until :func:`enable_metrics`."""
    return _current


def enable_metrics(registry: CollectorRegistry | None = None) -> PrometheusRecorder:
    """Record Legato's metrics in ``registry`` (default: prometheus_client's global
    ``REGISTRY``) from now on, in this process. Calling it again returns the recorder
    already enabled. Raises ``ConfigurationError`` without ``legato[prometheus]``."""
    global _current
    if isinstance(_current, PrometheusRecorder):
        return _current
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError(
            "metrics need prometheus-client: pip install 'legato[prometheus]'"
        ) from None
    _current = PrometheusRecorder(registry or prometheus_client.REGISTRY)
    return _current


def disable_metrics() -> None:
    """Back to the no-op recorder (the registry keeps what was recorded)."""
    global _current
    _current = Recorder()


def serve_metrics(
    port: int, registry: CollectorRegistry | None = None, addr: str = "0.0.0.0"
) -> None:
    """Enable metrics and serve ``/metrics`` on ``port`` from a daemon thread (``legato
    worker|decider|timer|dev --metrics-port``). A port it cannot listen on leaves
    metrics as they were."""
    was_enabled = isinstance(_current, PrometheusRecorder)
    enabled = enable_metrics(registry)
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=addr, registry=enabled.registry)
    except OSError as error:
        if not was_enabled:
            disable_metrics()
        raise ConfigurationError(
            f"--metrics-port {port}: cannot listen ({error.strerror or error}); pick a free port"
        ) from None
