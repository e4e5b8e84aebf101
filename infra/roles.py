"""The services' names, each a NATS user of its own (`nats_auth.py`), in a module that loads
nothing: the command line offers them before it imports any client."""

from __future__ import annotations

GATEWAY_ROLE = "gateway"
SERVICE_ROLES = (
    "registry",
    "runtime",
    "tools",
    "subagents",
    "workflows",
    "projector",
    "webhooks",
    "api",
    GATEWAY_ROLE,
)
