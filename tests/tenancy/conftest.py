"""A tenant's own service on NATS: the services run as their own users, the tenant as its."""

from __future__ import annotations

from tests.runtime.conftest import llm  # noqa: F401
