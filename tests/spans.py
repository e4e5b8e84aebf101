"""Finished spans of the test process, for tests that follow a trace.

A process has one global tracer provider, set once; a switch scopes its exporting to the
test that asks for `spans`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Switch(SimpleSpanProcessor):
    """Exports only while a test listens: the global provider outlives the test."""

    listening = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.listening:
            super().on_end(span)


_exporter = InMemorySpanExporter()
_switch = _Switch(_exporter)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(_switch)
        trace.set_tracer_provider(provider)
    _exporter.clear()
    _switch.listening = True
    yield _exporter
    _switch.listening = False
    _exporter.clear()
