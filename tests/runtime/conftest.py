"""A running agent system in the test process: registry, runtime and tools services over the
session's real NATS, with the fake model over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from agency.contracts.commands import (
    ApproveToolCalls,
    CancelRun,
    CreateAgency,
    CreateThread,
    InvokeThread,
    SaveBlueprint,
)
from agency.contracts.events import BlueprintSaved, BlueprintSpec, ChatMessage, ToolCall
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    HitlConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.port import Provider
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig, run_stack
from tests.helpers import ThreadWaits, assert_eventually

LOOKUP_CALLS: list[dict[str, Any]] = []


async def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    """Look a word up."""
    LOOKUP_CALLS.append(args)
    return f"definition of {args.get('word')}"


async def lookup_guarded(args: dict[str, Any], ctx: ToolContext) -> str:
    """Look a word up once a person approves (the worker's HITL guards this one)."""
    return f"guarded definition of {args.get('word')}"


def make_system() -> AgentSystem:
    word = {"type": "object", "properties": {"word": {"type": "string"}}}
    return (
        AgentSystem()
        .defaults()
        .add_tool(define_tool(lookup, parameters=word), ["lookup"])
        .add_tool(define_tool(lookup_guarded, parameters=word), ["lookup"])
        .add_agent(
            BlueprintSpec(
                name="worker",
                prompt="You are a test worker.",
                tags=("default", "lookup", "hitl"),
                config=BlueprintConfig(hitl=HitlConfig(tools=("lookup_guarded",)), max_steps=8),
            )
        )
        .add_agent(
            BlueprintSpec(
                name="manager",
                prompt="You delegate.",
                tags=("default", "lookup"),
                config=BlueprintConfig(
                    subagents=SubagentsConfig(
                        subagents=(
                            "worker",
                            "manager",
                            SubagentEntry(name="background", blocking=False),
                            SubagentEntry(
                                name="helper", resumable=True, blocking=True, max_instances=1
                            ),
                            SubagentEntry(
                                name="liaison", resumable=True, parent_communication="explicit"
                            ),
                        )
                    )
                ),
            )
        )
        .add_agent(
            BlueprintSpec(
                name="background", prompt="You work in the background.", tags=("default",)
            )
        )
        .add_agent(
            BlueprintSpec(name="helper", prompt="You are a persistent helper.", tags=("default",))
        )
        .add_agent(
            BlueprintSpec(
                name="liaison",
                description="Works on its own and reports when it chooses.",
                prompt="You report to your parent yourself.",
                tags=("default",),
            )
        )
        .add_agent(
            BlueprintSpec(
                name="approver",
                prompt="You need approval.",
                tags=("default", "lookup", "hitl"),
                config=BlueprintConfig(hitl=HitlConfig(tools=("lookup",))),
            )
        )
    )


@pytest.fixture(scope="session")
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(instant=True) as server:
        yield server


@dataclass
class Agents(ThreadWaits):
    bus: Bus
    tenant: str
    agency: str
    llm: FakeLLMServer

    async def thread(self, agent_type: str = "worker") -> str:
        thread = new_id()
        await self.bus.commands.send(
            self.tenant,
            CreateThread(agency_id=self.agency, thread_id=thread, agent_type=agent_type),
        )

        async def created() -> None:
            assert await self.bus.store.read(self.tenant, "thread", thread)

        await assert_eventually(created)
        return thread

    async def save_blueprint(self, blueprint: BlueprintSpec) -> None:
        await self.bus.commands.send(
            self.tenant, SaveBlueprint(agency_id=self.agency, blueprint=blueprint)
        )

        async def saved() -> None:
            events = await self.bus.store.read(self.tenant, "agency", self.agency)
            assert any(
                isinstance(e.payload, BlueprintSaved) and e.payload.blueprint == blueprint
                for e in events
            )

        await assert_eventually(saved)

    async def invoke(
        self, thread: str, text: str, *, key: str | None = None, strategy: str = "queue"
    ) -> str:
        run_id = "run_" + new_id()
        await self.bus.commands.send(
            self.tenant,
            InvokeThread(
                agency_id=self.agency,
                thread_id=thread,
                run_id=run_id,
                messages=(ChatMessage(role="user", content=text),),
                strategy=strategy,  # type: ignore[arg-type]
            ),
            idempotency_key=key,
        )
        return run_id

    async def approve(
        self, thread: str, approved: bool, modified: tuple[ToolCall, ...] | None = None
    ) -> None:
        await self.bus.commands.send(
            self.tenant,
            ApproveToolCalls(
                agency_id=self.agency,
                thread_id=thread,
                approved=approved,
                modified_tool_calls=modified,
            ),
        )

    async def cancel(self, thread: str) -> None:
        await self.bus.commands.send(
            self.tenant, CancelRun(agency_id=self.agency, thread_id=thread, reason="test")
        )

    async def events(self, thread: str) -> list[RecordedEvent]:
        return await self.bus.store.read(self.tenant, "thread", thread)


@asynccontextmanager
async def running_agents(
    bus: Bus,
    nats_url: str,
    tenant: str,
    llm: FakeLLMServer,
    *,
    services: tuple[str, ...] = ("registry", "runtime", "tools", "subagents"),
    system: AgentSystem | None = None,
    runtime_ack_wait: float = 30.0,
    nats_urls: dict[str, str] | None = None,
) -> AsyncIterator[Agents]:
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        async with running_stack(
            bus, nats_url, tenant, provider, services=services, system=system,
            runtime_ack_wait=runtime_ack_wait, nats_urls=nats_urls,
        ) as agency:  # fmt: skip
            yield Agents(bus=bus, tenant=tenant, agency=agency, llm=llm)
    finally:
        await provider.close()


@asynccontextmanager
async def running_stack(
    bus: Bus,
    nats_url: str,
    tenant: str,
    provider: Provider,
    *,
    services: tuple[str, ...] = ("registry", "runtime", "tools", "subagents"),
    system: AgentSystem | None = None,
    runtime_ack_wait: float = 30.0,
    nats_urls: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """`services` in this process calling `provider`, and a new agency of `tenant`'s (its
    id is what this yields); the services stop on exit."""
    stop = asyncio.Event()
    config = StackConfig(
        nats_url=nats_url,
        database_url="unused",
        system=system or make_system(),
        provider=provider,
        services=services,
        runtime_ack_wait=runtime_ack_wait,
        nats_urls=nats_urls or {},
    )
    task = asyncio.create_task(run_stack(config, stop))
    agency = new_id()
    await bus.commands.send(tenant, CreateAgency(agency_id=agency, name="test agency"))

    async def agency_exists() -> None:
        assert await bus.store.read(tenant, "agency", agency)

    try:
        await assert_eventually(agency_exists)
        yield agency
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)


@pytest.fixture
async def agents(bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer) -> AsyncIterator[Agents]:
    async with running_agents(bus, nats_url, tenant, llm) as running:
        yield running
