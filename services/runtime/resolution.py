"""The blueprint a thread runs now, as the model loop runs it: the agency's blueprints
(the static ones, overridden by those saved in its log, or one defined inline for the
thread), the process variables it may read, its middleware, and the tools of the MCP
servers and remote agents it names."""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.events import BlueprintSpec
from agency.domain.thread_state import ThreadState
from agency.services.agents.system import AgentSystem
from agency.services.runtime.model_step import Resolved
from agency.services.runtime.tool_sources import McpTools, RemoteAgentTools
from agency.services.tenancy.env import TenantEnvSettings, with_visible_env
from agency.services.threads.caches import BlueprintCache


@dataclass(frozen=True, slots=True)
class BlueprintResolver:
    system: AgentSystem
    blueprints: BlueprintCache
    mcp: McpTools | None = None
    remote_agents: RemoteAgentTools | None = None
    # The process variables the operator exposes to tenants' own blueprints: these, or
    # read from the environment at each decision (like the variables themselves).
    tenant_env: TenantEnvSettings | None = None

    async def dynamic(self, state: ThreadState) -> dict[str, BlueprintSpec]:
        """The blueprints saved in the thread's agency's log."""
        return await self.blueprints.dynamic(state.tenant_id, state.agency_id)

    async def resolve(self, state: ThreadState) -> Resolved:
        dynamic = await self.dynamic(state)
        static = self.system.blueprints
        merged = {**static, **dynamic}
        inline = state.inline_blueprint
        blueprint = inline or merged.get(state.agent_type) or BlueprintSpec(name=state.agent_type)
        # Where the runtime found it says whose it is: one saved in the agency's log, or one
        # a subagent entry defined inline (carried by the child's `thread.created`, whoever
        # wrote the entry), is a tenant's, and reads only the process variables exposed to
        # that tenant.
        operators = (
            inline is None and state.agent_type in static and state.agent_type not in dynamic
        )
        exposed = self.tenant_env or TenantEnvSettings.current()
        visible = None if operators else exposed.exposed(state.tenant_id)
        blueprint = with_visible_env(blueprint, visible)
        servers = self.system.mcp_servers_for(blueprint)
        mcp_tools = await self.mcp.tools(servers) if servers and self.mcp is not None else {}
        agents = blueprint.config.remote_agents
        if agents and self.remote_agents is not None:
            mcp_tools = {**mcp_tools, **await self.remote_agents.tools(agents)}
        return Resolved(blueprint, self.system.middleware_for(blueprint), merged, mcp_tools)
