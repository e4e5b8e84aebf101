"""Fault tests: a misbehaving model in front of the real runtime (in this process), and the
process harness (`harness.py`) for kills of whole services and servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import ModelSettings, OpenAIProvider
from tests.runtime.conftest import Agents, running_stack

# A short timeout so a hanging model ends the run within the test's bounded wait; quick
# retries so transient faults are retried (three tries) without slowing the suite.
FAULT_SETTINGS = ModelSettings(timeout=1.5, max_attempts=3, backoff_initial=0.01, backoff_max=0.1)


@asynccontextmanager
async def agents_with(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, settings: ModelSettings
) -> AsyncIterator[Agents]:
    """Registry, runtime and tools services in this process, calling `llm` with `settings`."""
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings)
    try:
        async with running_stack(bus, nats_url, tenant, provider) as agency:
            yield Agents(bus=bus, tenant=tenant, agency=agency, llm=llm)
    finally:
        await provider.close()


@pytest.fixture(scope="package")
async def faulty_llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(instant=True) as server:
        yield server


@pytest.fixture
async def agents(
    bus: Bus, nats_url: str, tenant: str, faulty_llm: FakeLLMServer
) -> AsyncIterator[Agents]:
    async with agents_with(bus, nats_url, tenant, faulty_llm, FAULT_SETTINGS) as running:
        yield running
