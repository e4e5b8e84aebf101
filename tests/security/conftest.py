"""A hostile tenant against the whole system: every service, the API, real NATS and
PostgreSQL (the fixtures of tests/e2e)."""

from __future__ import annotations

from tests.e2e.conftest import client, system_api  # noqa: F401
