"""OpenTelemetry spans and metrics of model calls, under upstream AgentLoom's names (reference §4.10).

Everything goes through ``opentelemetry-api``, so it costs nothing until an SDK is configured.
Instruments are created on first use from the global providers, or from the ones passed to
``configure_telemetry`` (tests use that with in-memory readers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry import metrics, trace
from opentelemetry.util.types import AttributeValue

from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse

__all__ = [
    "CIRCUIT_STATE_VALUES",
    "Telemetry",
    "configure_telemetry",
    "telemetry",
]

_SCOPE = "airflow_provider_agentloom.llm"

CIRCUIT_STATE_VALUES = {"closed": 0, "open": 1, "half_open": 2}

# gen_ai.provider.name values of the OTel GenAI conventions, by our vendor names.
_GENAI_PROVIDER = {"google": "gcp.gemini", "gemini": "gcp.gemini"}


def genai_provider_name(vendor: str) -> str:
    """Return the ``gen_ai.provider.name`` value for one of our vendor names."""
    return _GENAI_PROVIDER.get(vendor, vendor)


class Telemetry:
    """The tracer and the metric instruments of the model layer.

    :param tracer_provider: where spans go; the global provider when None.
    :param meter_provider: where metrics go; the global provider when None.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self.calls = meter.create_counter(
            "agentloom_provider_calls_total", description="Model calls that succeeded, per provider and model"
        )
        self.errors = meter.create_counter(
            "agentloom_provider_errors_total",
            description="Failed model call attempts, per provider and error type",
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per call"
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of a model call"
        )
        self.ttfc = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time from request start to the first streamed chunk",
        )
        self.mock_replays = meter.create_counter(
            "agentloom_mock_replays_total", description="Mock provider replies, by how the fixture matched"
        )
        self.recording_captures = meter.create_counter(
            "agentloom_recording_captures_total", description="Model replies written to a recording"
        )
        self.recording_latency = meter.create_histogram(
            "agentloom_recording_latency_seconds", unit="s", description="Latency of recorded model calls"
        )
        self._circuit_states: dict[str, int] = {}
        meter.create_observable_gauge(
            "agentloom_circuit_breaker_state",
            callbacks=[self._observe_circuits],
            description="Circuit breaker state per provider: 0 closed, 1 open, 2 half-open",
        )

    def _observe_circuits(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return [
            metrics.Observation(value, {"provider": name}) for name, value in self._circuit_states.items()
        ]

    @contextmanager
    def chat_span(
        self, vendor: str, request: ChatRequest, *, stream: bool, attempt: int
    ) -> Iterator[trace.Span]:
        """Open the ``chat <model>`` span of one provider attempt, with the request attributes set."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": genai_provider_name(vendor),
            "gen_ai.request.model": request.model,
            "gen_ai.request.stream": stream,
            "agentloom.provider.attempt": attempt,
        }
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.step_id:
            attributes["agentloom.step.id"] = request.step_id
        with self.tracer.start_as_current_span(
            f"chat {request.model}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span

    def record_success(
        self,
        span: trace.Span,
        vendor: str,
        request: ChatRequest,
        response: ChatResponse,
        *,
        stream: bool,
        seconds: float,
    ) -> None:
        """Set the response attributes on ``span`` and record the call's metrics."""
        usage = response.usage
        span.set_attribute("gen_ai.response.model", response.model or request.model)
        span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        span.set_attribute("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)
        span.set_attribute("agentloom.provider.attempt_outcome", "success")
        if response.time_to_first_token_ms is not None:
            span.set_attribute(
                "gen_ai.response.time_to_first_chunk", response.time_to_first_token_ms / 1000.0
            )
        base = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": genai_provider_name(vendor),
            "gen_ai.request.model": request.model,
        }
        self.calls.add(1, {"provider": vendor, "model": request.model, "stream": str(stream).lower()})
        self.duration.record(seconds, {**base, "stream": str(stream).lower()})
        for kind, count in (
            ("input", usage.prompt_tokens),
            ("output", usage.completion_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count:
                self.tokens.record(count, {**base, "gen_ai.token.type": kind})
        if response.time_to_first_token_ms is not None:
            self.ttfc.record(response.time_to_first_token_ms / 1000.0, base)

    def record_failure(
        self,
        span: trace.Span,
        vendor: str,
        request: ChatRequest,
        error_type: str,
        *,
        stream: bool,
        seconds: float,
    ) -> None:
        """Mark ``span`` failed and count the error."""
        span.set_attribute("error.type", error_type)
        span.set_attribute("agentloom.provider.attempt_outcome", "error")
        span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))
        self.errors.add(1, {"provider": vendor, "error_type": error_type})
        self.duration.record(
            seconds,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": genai_provider_name(vendor),
                "gen_ai.request.model": request.model,
                "stream": str(stream).lower(),
                "error.type": error_type,
            },
        )

    def set_circuit_state(self, provider: str, state: str) -> None:
        """Publish a breaker's state (closed/open/half_open) on ``agentloom_circuit_breaker_state``."""
        self._circuit_states[provider] = CIRCUIT_STATE_VALUES[state]

    def circuit_states(self) -> dict[str, int]:
        """Return the last published breaker state of each provider."""
        return dict(self._circuit_states)

    def record_mock_replay(self, workflow: str, matched_by: str) -> None:
        """Count one mock reply; ``matched_by`` is ``step_id``, ``prompt_hash`` or ``default``."""
        self.mock_replays.add(1, {"workflow": workflow, "matched_by": matched_by})

    def record_capture(self, provider: str, model: str, seconds: float) -> None:
        """Count one reply written to a recording."""
        labels = {"provider": provider, "model": model}
        self.recording_captures.add(1, labels)
        self.recording_latency.record(seconds, labels)


_current: Telemetry | None = None


def telemetry() -> Telemetry:
    """Return the process-wide telemetry, creating it from the global OTel providers on first use."""
    global _current
    if _current is None:
        _current = Telemetry()
    return _current


def configure_telemetry(
    tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None
) -> Telemetry:
    """Replace the process-wide telemetry with one bound to these providers (None = global ones)."""
    global _current
    _current = Telemetry(tracer_provider, meter_provider)
    return _current
