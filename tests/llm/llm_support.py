"""Shared test helpers: the example fixtures' paths and an in-memory OpenTelemetry set-up."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from shared_paths import EXAMPLES

from airflow_provider_agentloom.llm.telemetry import Telemetry, configure_telemetry

TOOL_CALLING_FIXTURE = EXAMPLES / "recordings" / "tool_calling.json"


class OTel:
    """In-memory span exporter and metric reader bound to the model layer's telemetry."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.telemetry: Telemetry = configure_telemetry(
            tracer_provider, MeterProvider(metric_readers=[self.reader])
        )

    def metrics(self) -> dict[str, list[Any]]:
        """Return data points by metric name."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found


class Store:
    """A task state store: JSON values by key (round-tripped, as the real one stores text)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
