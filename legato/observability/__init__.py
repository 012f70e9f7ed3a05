"""Logs, metrics and traces: see docs/operations.md, "Observability".

Everything here works without the optional extras: metrics stay a no-op until
:func:`enable_metrics` (``legato[prometheus]``), spans until an OpenTelemetry SDK is
configured (``legato[otel]``).
"""

from legato.observability.logs import CONTEXT_FIELDS, ContextAdapter, JsonFormatter
from legato.observability.metrics import (
    PrometheusRecorder,
    Recorder,
    disable_metrics,
    enable_metrics,
    recorder,
    serve_metrics,
)

__all__ = [
    "CONTEXT_FIELDS",
    "ContextAdapter",
    "JsonFormatter",
    "PrometheusRecorder",
    "Recorder",
    "disable_metrics",
    "enable_metrics",
    "recorder",
    "serve_metrics",
]
