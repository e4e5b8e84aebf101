"""The Vercel AI SDK's chat protocol (the UI message stream) over Agency's threads: see
`routes.py`, and docs/protocols.md for the mapping."""

from __future__ import annotations

from litestar import Router

from agency.services.api.aisdk.routes import AISDK_ROUTES, PREFIX


def aisdk_router() -> Router:
    """The AI SDK's routes under `/aisdk`; documented by the AI SDK's own protocol and
    docs/protocols.md, not the OpenAPI document."""
    return Router(PREFIX, route_handlers=AISDK_ROUTES, include_in_schema=False)


__all__ = ["aisdk_router"]
