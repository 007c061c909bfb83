"""OpenTelemetry tracing for the worker and the CLI, configured from the standard `OTEL_*`
environment variables, off when they are unset.

Every client and worker carries Temporal's `TracingInterceptor` (`durability.connect`), which
makes spans for client calls, workflow runs, signals, updates, child workflows and
activities, and propagates the trace through Temporal headers; the schedule adds its
lifecycle events as spans. Without a configured `TracerProvider` all of that goes to
OpenTelemetry's no-op provider. `configure_tracing` installs one:

- `OTEL_TRACES_EXPORTER=otlp` (or `OTEL_EXPORTER_OTLP_ENDPOINT` /
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set) exports over OTLP/HTTP (protobuf), to
  `http://localhost:4318` unless an endpoint is given; `console` prints spans to stderr;
  `none` or nothing set leaves tracing off. `OTEL_SDK_DISABLED=true` turns it off.
- `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the process (default service name
  given by the caller: `durability-worker`, `durability-cli`).
- Batching follows `OTEL_BSP_*`; the exporter's headers, timeout and certificate follow
  `OTEL_EXPORTER_OTLP_*`, all read by the OpenTelemetry SDK itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from durability.connect import ConfigurationError

EXPORTERS = ("otlp", "console", "none")


def exporter_name(env: Mapping[str, str]) -> str | None:
    """Which exporter the environment asks for, or None for tracing off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if not names:
        endpoint_set = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
        return "otlp" if endpoint_set else None
    if len(names) > 1 or names[0] not in EXPORTERS:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER must be one of {', '.join(EXPORTERS)}, "
            f"got {env['OTEL_TRACES_EXPORTER']!r}"
        )
    return None if names[0] == "none" else names[0]


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    protocol = env.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol not in ("", "http/protobuf"):
        raise ConfigurationError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf (the exporter durability "
            f"ships), got {protocol!r}"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def configure_tracing(
    default_service_name: str, env: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """Install a global `TracerProvider` exporting as the environment says; None when
    tracing is off. Call `shutdown()` on the result before the process exits, so the last
    spans are sent."""
    source = os.environ if env is None else env
    name = exporter_name(source)
    if name is None:
        return None
    attributes = {} if source.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: default_service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(_exporter(name, source)))
    trace.set_tracer_provider(provider)
    return provider
