"""The whole system, as in tests/e2e, with two runtime and two subagents workers and a
fake model that takes 0.5 to 1 s per answer, as a real one would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import client, running_system

__all__ = ["client"]


@pytest.fixture(scope="package")
async def system_api(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[tuple[str, FakeLLMServer]]:
    async with (
        FakeLLMServer(instant=True, latency_ms=(500, 1000)) as llm,
        running_system(nats_url, database_url, nats_server, llm, workers=2) as url,
    ):
        yield url, llm
