"""An agency's blueprints as MCP prompts.

Each blueprint of each of the caller's agencies is a prompt named `{agencyId}/{blueprint}`
with one argument, `message`: getting it answers a user message that asks the client's
model to hand the message to that agent with the server's tools (`create_thread`, then
`invoke_and_wait`). Listed and read through the API as the caller.
"""

from __future__ import annotations

import mcp_types as types
from mcp.shared.exceptions import MCPError

from agency.services.client import ApiError, AsyncAgencyClient
from agency.services.client.calls import BlueprintInfo

ARGUMENT = "message"


def _prompt(agency_id: str, agency_name: str, blueprint: BlueprintInfo) -> types.Prompt:
    return types.Prompt(
        name=f"{agency_id}/{blueprint.name}",
        title=f"{blueprint.name} ({agency_name})",
        description=blueprint.description or f"Run the {blueprint.name} agent.",
        arguments=[
            types.PromptArgument(name=ARGUMENT, description="What to ask the agent.", required=True)
        ],
    )


async def list_prompts(client: AsyncAgencyClient) -> types.ListPromptsResult:
    prompts = [
        _prompt(agency.id, agency.name, blueprint)
        for agency in await client.list_agencies()
        for blueprint in await client.list_blueprints(agency.id)
    ]
    return types.ListPromptsResult(prompts=prompts)


def _unknown(name: str) -> MCPError:
    return MCPError(
        code=types.INVALID_PARAMS,
        message=f"unknown prompt {name[:200]!r}: prompts are named "
        "'{agencyId}/{blueprint}' (prompts/list names them)",
    )


async def get_prompt(
    client: AsyncAgencyClient, name: str, arguments: dict[str, str] | None
) -> types.GetPromptResult:
    agency_id, _, blueprint_name = name.partition("/")
    if not agency_id or not blueprint_name:
        raise _unknown(name)
    try:
        blueprints = await client.list_blueprints(agency_id)
    except ApiError as e:
        if e.status in (400, 404):
            raise _unknown(name) from e
        raise
    blueprint = next((b for b in blueprints if b.name == blueprint_name), None)
    if blueprint is None:
        raise _unknown(name)
    message = (arguments or {}).get(ARGUMENT, "").strip()
    if not message:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"prompt {name!r} needs the argument {ARGUMENT!r}: what to ask the agent",
        )
    text = (
        f"Hand this to Agency's `{blueprint.name}` agent: {message}\n\n"
        f"Create a thread with `create_thread` (agencyId `{agency_id}`, agentType "
        f"`{blueprint.name}`), send the message with `invoke_and_wait`, and answer with the "
        "run's `lastMessage`. If the run is `paused` with `pendingApproval`, show me the "
        "tool calls and ask me before you call `approve`."
    )
    return types.GetPromptResult(
        description=blueprint.description or None,
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
    )
