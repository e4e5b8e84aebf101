"""Trace context carried in NATS headers and event envelopes (W3C trace-context)."""

from __future__ import annotations

from opentelemetry import context, propagate


def current_carrier() -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def context_from(carrier: dict[str, str] | None) -> context.Context:
    return propagate.extract(carrier or {})
