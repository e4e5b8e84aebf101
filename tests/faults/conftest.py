"""Fault tests: a misbehaving model in front of the real runtime (in this process), and the
process harness (`harness.py`) for kills of whole services and servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from contracts.commands import CreateAgency
from contracts.ids import new_id
from infra.jetstream.connection import Bus
from services.llm.fake_server import FakeLLMServer
from services.llm.provider import ModelSettings, OpenAIProvider
from services.stack import StackConfig, run_stack
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, make_system

# A short timeout so a hanging model ends the run within the test's bounded wait; quick
# retries so transient faults are retried (three tries) without slowing the suite.
FAULT_SETTINGS = ModelSettings(timeout=1.5, max_attempts=3, backoff_initial=0.01, backoff_max=0.1)


@asynccontextmanager
async def agents_with(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, settings: ModelSettings
) -> AsyncIterator[Agents]:
    """Registry, runtime and tools services in this process, calling `llm` with `settings`."""
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake", settings=settings)
    stop = asyncio.Event()
    config = StackConfig(
        nats_url=nats_url,
        database_url="unused",
        system=make_system(),
        provider=provider,
        services=("registry", "runtime", "tools", "subagents"),
    )
    task = asyncio.create_task(run_stack(config, stop))
    agency = new_id()
    await bus.commands.send(tenant, CreateAgency(agency_id=agency, name="fault agency"))

    async def agency_exists() -> None:
        assert await bus.store.read(tenant, "agency", agency)

    try:
        await assert_eventually(agency_exists)
        yield Agents(bus=bus, tenant=tenant, agency=agency, llm=llm)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
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
