"""OpenTelemetry spans and metrics under the upstream names; no-ops unless an SDK is configured."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider

__all__ = [
    "INSTRUMENTATION_NAME",
    "TOOL_CALLS_TOTAL",
    "TOOL_CALL_DURATION_SECONDS",
    "configure",
    "counter",
    "get_meter",
    "get_tracer",
    "histogram",
    "record_tool_call",
    "tool_span",
]

INSTRUMENTATION_NAME = "airflow_provider_agentloom"

TOOL_CALLS_TOTAL = "agentloom_tool_calls_total"
TOOL_CALL_DURATION_SECONDS = "agentloom_tool_call_duration_seconds"

_providers: dict[str, Any] = {"tracer": None, "meter": None}
_instruments: dict[str, Any] = {}
_lock = threading.Lock()


def configure(
    *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> None:
    """Send this package's telemetry to these providers; None (the default) means OpenTelemetry's global ones.

    Applications normally configure the global providers and never call this; tests call it to
    capture telemetry without touching the global state.
    """
    with _lock:
        _providers["tracer"] = tracer_provider
        _providers["meter"] = meter_provider
        _instruments.clear()


def get_tracer() -> Tracer:
    """Return this package's tracer."""
    return trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=_providers["tracer"])


def get_meter() -> Meter:
    """Return this package's meter."""
    return metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=_providers["meter"])


def counter(name: str, description: str = "", unit: str = "1") -> Counter:
    """Return the counter called ``name``, created once per configured meter."""
    with _lock:
        key = f"counter:{name}"
        if key not in _instruments:
            _instruments[key] = get_meter().create_counter(name, unit=unit, description=description)
        instrument: Counter = _instruments[key]
    return instrument


def histogram(name: str, description: str = "", unit: str = "s") -> Histogram:
    """Return the histogram called ``name``, created once per configured meter."""
    with _lock:
        key = f"histogram:{name}"
        if key not in _instruments:
            _instruments[key] = get_meter().create_histogram(name, unit=unit, description=description)
        instrument: Histogram = _instruments[key]
    return instrument


def record_tool_call(tool_name: str, duration_s: float, success: bool) -> None:
    """Count one tool call (``status`` success or failure) and record how long it took."""
    status = "success" if success else "failure"
    counter(TOOL_CALLS_TOTAL, "Tool calls, by tool and outcome.").add(
        1, {"tool_name": tool_name, "status": status}
    )
    histogram(TOOL_CALL_DURATION_SECONDS, "How long tool calls take.").record(
        duration_s, {"tool_name": tool_name}
    )


class ToolCallRecord:
    """What ``tool_span`` yields: set ``success`` before the block ends.

    Set ``error`` to the tool's own exception when the block raises another one in its place, so the
    span names the real cause.
    """

    def __init__(self, span: Span) -> None:
        self.span = span
        self.success = False
        self.error: BaseException | None = None


@contextlib.contextmanager
def tool_span(tool_name: str, **attributes: Any) -> Iterator[ToolCallRecord]:
    """Wrap one tool call: an ``execute_tool <name>`` span plus both tool metrics.

    The span carries ``tool.name``, ``tool.duration_ms`` and ``tool.success``; an exception leaving
    the block counts as a failure and is recorded on the span.
    """
    tracer = get_tracer()
    start = time.perf_counter()
    with tracer.start_as_current_span(
        f"execute_tool {tool_name}",
        attributes={"tool.name": tool_name, **attributes},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        record = ToolCallRecord(span)
        try:
            yield record
        except BaseException as exc:
            record.success = False
            if record.error is None:
                record.error = exc
            raise
        finally:
            duration = time.perf_counter() - start
            span.set_attribute("tool.duration_ms", round(duration * 1000, 3))
            span.set_attribute("tool.success", record.success)
            if record.error is not None:
                span.set_attribute("error.type", type(record.error).__name__)
                span.record_exception(record.error)
                span.set_status(Status(StatusCode.ERROR, str(record.error) or type(record.error).__name__))
            record_tool_call(tool_name, duration, record.success)
