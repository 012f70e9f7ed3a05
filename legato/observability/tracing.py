"""OpenTelemetry spans (the ``legato[otel]`` extra): imported on first use, and a no-op
without ``opentelemetry-api``, or with the API but no tracer provider configured.

``Client.start`` stores the caller's W3C trace context with the run, and a child run
started by the decider takes its parent's; each attempt's span (``legato.attempt``) is
started in that context, so task spans, a child run's included, join the trace of the
request that started the run. Each decision batch is one ``legato.decide`` span.

Spans are made only while a tracer provider is set (``trace.set_tracer_provider`` or
``OTEL_PYTHON_TRACER_PROVIDER``): with the API alone every span would be a no-op the
worker still paid for on each attempt (about a tenth of its CPU per one-task run), so
observability that is not configured costs one check per attempt. The check is made
each time, not once: an SDK may install its provider after Legato's first attempt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from legato.limits import describe_exception

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer


_SCOPE = "legato"


@cache
def _otel() -> bool:
    try:
        import opentelemetry.propagate
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _tracer() -> Tracer | None:
    """Legato's tracer, or None while no tracer provider is configured (the API's
    placeholder provider only makes spans that record nothing)."""
    if not _otel():
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    # Not cached: the SDK's provider may be installed after Legato's first span.
    return provider.get_tracer(_SCOPE)


def capture() -> JsonValue:
    """The current trace context as a W3C carrier (``{"traceparent": ...}``), or None
    when there is no active, valid span to join."""
    if not _otel():
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return dict(carrier) if carrier else None


@contextlib.contextmanager
def attempt_span(
    task_name: str, trace_context: JsonValue, attributes: Callable[[], dict[str, Any]]
) -> Iterator[Span | None]:
    """The current span while an attempt of ``task_name`` runs, a child of the run
    starter's ``trace_context``; the task's own spans nest under it. ``attributes`` is
    called only when there is a span to make. Exceptions are recorded and re-raised."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    parent = propagate.extract(trace_context) if isinstance(trace_context, dict) else None
    from opentelemetry.trace import Status, StatusCode

    # The SDK's own exception recording calls str() on the exception, which a task's
    # exception may make raise; record it with a description that cannot.
    with tracer.start_as_current_span(
        f"legato.attempt {task_name}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes(),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as error:
            span.set_attribute("exception.type", type(error).__qualname__)
            span.set_attribute("exception.message", describe_exception(error))
            span.set_status(Status(StatusCode.ERROR, describe_exception(error)))
            raise


def decision_span(runs: int, started_ns: int, failed: bool = False) -> None:
    """Record a decision batch that ran from ``started_ns`` (``time.time_ns()``) until
    now: the span is made after the fact, so a batch costs nothing while it runs."""
    tracer = _tracer()
    if tracer is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span = tracer.start_span(
        "legato.decide", start_time=started_ns, attributes={"legato.runs": runs}
    )
    if failed:
        span.set_status(Status(StatusCode.ERROR, "the batch failed and was retried run by run"))
    span.end()
