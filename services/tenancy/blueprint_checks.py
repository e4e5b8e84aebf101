"""What the registry refuses of a blueprint a tenant saves, as one check every door can ask
before anything is sent: its name, NUL characters, MCP servers that are the operator's
only (`command`, `${ENV:…}` headers) or that no tenant's connection may reach, and the
prompt limit. Each refusal is `(reason, detail)`, the reason as the registry rejects it."""

from __future__ import annotations

from agency.contracts.events import BlueprintSpec
from agency.contracts.ids import is_valid_token
from agency.contracts.limits import has_nul
from agency.services.egress import server_refusals
from agency.services.tenancy.door_limits import DoorLimits, prompt_problem


def save_refusal(blueprint: BlueprintSpec, door: DoorLimits) -> tuple[str, str] | None:
    if not is_valid_token(blueprint.name):
        return (
            "invalid_blueprint",
            f"blueprint name {blueprint.name[:80]!r} must be 1 to 64 letters, digits, `-` or `_`",
        )
    if has_nul(blueprint):
        return "invalid_blueprint", "the blueprint contains a NUL character"
    for spec in blueprint.with_inline():  # and the subagents it defines inline
        for server in spec.config.mcp_servers:
            problem = server.operator_only()
            if problem is not None:
                return "invalid_blueprint", problem
        for agent in spec.config.remote_agents:
            problem = agent.operator_only()
            if problem is not None:
                return "invalid_blueprint", problem
        for i, url, problem in server_refusals(spec.config.mcp_servers):
            return (
                "egress_refused",
                f"blueprint {spec.name!r}: config.mcpServers[{i}].url {url!r} is refused: "
                f"{problem}",
            )
        for i, url, problem in server_refusals(spec.config.remote_agents):
            return (
                "egress_refused",
                f"blueprint {spec.name!r}: config.remoteAgents[{i}].url {url!r} is refused: "
                f"{problem}",
            )
    problem = prompt_problem(blueprint, door)
    return ("invalid_blueprint", problem) if problem is not None else None
