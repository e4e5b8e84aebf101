"""Every service in one process, as `agency up` runs them; each can also run alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from services.agents.system import AgentSystem
from services.llm.provider import Provider
from services.projector.service import run_projector
from services.registry.service import run_registry
from services.runtime.service import run_runtime
from services.subagents.service import run_coordinator
from services.tools.service import run_tools_service

ServiceRunner = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class StackConfig:
    nats_url: str
    database_url: str
    system: AgentSystem
    provider: Provider
    services: tuple[str, ...] = ("registry", "runtime", "tools", "subagents", "projector")
    # Seconds before work a killed worker held is redelivered to another.
    runtime_ack_wait: float = 30.0
    tools_ack_wait: float = 30.0
    extra: dict[str, ServiceRunner] = field(default_factory=dict)


def service_runners(config: StackConfig) -> dict[str, ServiceRunner]:
    c = config
    runners: dict[str, ServiceRunner] = {
        "registry": lambda stop: run_registry(c.nats_url, c.database_url, stop, c.system),
        "runtime": lambda stop: run_runtime(
            c.nats_url, c.database_url, stop, c.system, c.provider, ack_wait=c.runtime_ack_wait
        ),
        "tools": lambda stop: run_tools_service(
            c.nats_url, c.database_url, stop, c.system, ack_wait=c.tools_ack_wait
        ),
        "subagents": lambda stop: run_coordinator(
            c.nats_url, c.database_url, stop, c.system, ack_wait=c.runtime_ack_wait
        ),
        "projector": lambda stop: run_projector(c.nats_url, c.database_url, stop),
    }
    runners.update(c.extra)
    return runners


async def run_stack(config: StackConfig, stop: asyncio.Event) -> None:
    runners = service_runners(config)
    async with asyncio.TaskGroup() as tg:
        for name in config.services:
            tg.create_task(runners[name](stop), name=name)
