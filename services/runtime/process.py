"""The runtime as a process (`agency up`, `services.stack`): its connections, leases and MCP
sessions, and its workers (commands, triggers, cancels, re-executions) until `stop`."""

from __future__ import annotations

import asyncio
import os

from agency.contracts.ids import new_id
from agency.infra.jetstream.commandbus import CommandWorker
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Leases, LeaseSettings
from agency.services.agents.system import AgentSystem
from agency.services.llm.provider import Provider
from agency.services.runtime.cancel_listener import listen_for_cancels
from agency.services.runtime.replay.responder import Reexecutions
from agency.services.runtime.service import RuntimeService
from agency.services.runtime.tool_sources import RemoteAgentTools
from agency.services.tenancy.env import TenantEnvSettings
from agency.services.tenancy.held_shares import COMMANDS_HELD, HeldShares


async def run_runtime(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    system: AgentSystem,
    provider: Provider,
    *,
    ack_wait: float = 30.0,
    lease_ttl: float | None = None,
    reexecution_system: AgentSystem | None = None,
) -> None:
    """The runtime until `stop`. Re-execution runs `system`, the code the runtime runs,
    unless `reexecution_system` is given (code other than the live one, as in tests)."""
    # Here, not at the top: the MCP SDK takes a second to import, which the CLI never needs.
    from agency.services.mcpclient import McpCatalog, McpSessions

    TenantEnvSettings.current()  # a malformed AGENCY_TENANT_ENV stops the start, named
    async with (
        Bus(nats_url, name="agency-runtime") as bus,
        # For listing MCP servers' tools (calls run in tools), never reaching our own ports.
        McpSessions(own_urls=(nats_url, database_url)) as mcp_sessions,
    ):
        settings = LeaseSettings(
            ttl=lease_ttl or float(os.environ.get("AGENCY_LEASE_TTL", "10")),
            replicas=int(os.environ.get("AGENCY_STREAM_REPLICAS", "1")),
        )
        leases = await Leases(bus.js, owner=f"runtime-{new_id()}", settings=settings).open()
        service = RuntimeService(
            bus,
            system,
            provider,
            ack_wait=ack_wait,
            leases=leases,
            mcp=McpCatalog.from_env(mcp_sessions),
            remote_agents=_remote_agents(nats_url, database_url),
        )
        await service.blueprints.watch(bus.nc)
        worker = CommandWorker(
            bus.js, "runtime", service.handle_command, layout=bus.layout,
            dead_letters=bus.dead_letters,
            held=COMMANDS_HELD, shares=HeldShares.from_env(),
        )  # fmt: skip
        async with service.load.watching(bus.nc), asyncio.TaskGroup() as tg:
            service.attach(tg)
            tg.create_task(worker.run(stop))
            tg.create_task(service.run_triggers(stop))
            tg.create_task(listen_for_cancels(bus, service.driver, stop))
            tg.create_task(Reexecutions(bus, reexecution_system or system).run(stop))


def _remote_agents(nats_url: str, database_url: str) -> RemoteAgentTools | None:
    """Remote A2A agents' tools. The A2A SDK is imported here, where a runtime starts, so
    processes that never drive a run (the CLI, the API) do not pay for its import."""
    from agency.services.a2aclient import RemoteAgentCatalog, RemoteCards

    return RemoteAgentCatalog(RemoteCards(own_urls=(nats_url, database_url)))
