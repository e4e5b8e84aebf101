"""The OpenTelemetry SDK, switched on by the standard `OTEL_*` variables.

Our code depends on the OpenTelemetry API only; this installs the SDK with an OTLP
(HTTP/protobuf) exporter when the environment asks for one:
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or
`OTEL_TRACES_EXPORTER=otlp`. `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keep it
off. The exporter reads the rest itself (headers, timeout, compression), and
`OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` name the process (default
`agency-<service>`). A deployment that configures its own SDK first is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

FLUSH_TIMEOUT_MS = 5000


def wanted(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if "none" in exporters:
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) or "otlp" in exporters


def configure_tracing(service: str, env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Install the SDK with an OTLP exporter if the environment asks; the provider or None."""
    env = os.environ if env is None else env
    if not wanted(env):
        return None
    # Imported only when wanted: the SDK takes a while to load, and most commands run without it.
    import structlog
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    log = structlog.get_logger(__name__)
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return None  # configured already, by the deployment or an earlier call
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        log.warning("only OTLP over http/protobuf is installed; using it", asked=protocol)
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    log.info("tracing to OTLP", service=env.get("OTEL_SERVICE_NAME") or service)
    return provider


def shutdown_tracing(provider: TracerProvider | None) -> None:
    """Export what is buffered (bounded), then stop."""
    if provider is None:
        return
    provider.force_flush(FLUSH_TIMEOUT_MS)
    provider.shutdown()
