"""The HTTP shape of a blueprint: the contract's `BlueprintSpec` with camelCase names.

Request structs refuse unknown fields, so a misspelt setting (`maxStep`) is a 400 naming it
rather than a setting silently ignored; settings of user middleware go in `config.extra`.
Conversion to and from the contract reads attributes (`from_attributes`), so the two
shapes differ only in their wire names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from contracts.events import BlueprintSpec
from contracts.events.registry import (
    DEFAULT_MCP_TIMEOUT,
    AgentKind,
    EnvName,
    McpServerName,
    Seconds,
)
from services.api.text import refuse_nul

Positive = Annotated[int, msgspec.Meta(ge=1)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class Camel(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    rename="camel",
):
    """camelCase on the wire, unknown fields refused, defaults left out of answers, no NUL."""

    def __post_init__(self) -> None:
        refuse_nul(self)


class HitlBody(Camel, frozen=True, kw_only=True):
    tools: list[str] = []


class SubagentEntryBody(Camel, frozen=True, kw_only=True):
    """`optional` names an environment variable of the runtime: the branch exists only
    while it is `true`, `1` or `yes`."""

    name: Name
    blocking: bool | None = None
    resumable: bool = False
    max_instances: Positive | None = None
    optional: EnvName | None = None
    parent_communication: Literal["implicit", "explicit"] = "implicit"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parent_communication == "explicit" and (not self.resumable or self.blocking):
            raise ValueError(
                f"subagent {self.name!r}: parentCommunication `explicit` needs `resumable` "
                "and cannot be `blocking`"
            )


class SubagentsBody(Camel, frozen=True, kw_only=True):
    subagents: list[str | SubagentEntryBody] = []


HttpUrl = Annotated[str, msgspec.Meta(pattern=r"^https?://", max_length=2000)]
# A value naming the environment (`${ENV:NAME}`) is the operator's, never a tenant's.
HeaderValue = Annotated[str, msgspec.Meta(pattern=r"^(?!.*\$\{ENV:)")]


class McpServerBody(Camel, frozen=True, kw_only=True):
    """`McpServer`: an MCP server whose tools the agent gets as `<name>__<tool>`
    (`docs/mcp.md`). A blueprint saved here names streamable HTTP servers only: stdio
    servers (`command`, `env`) and `${ENV:NAME}` references in headers are the operator's
    (its agent system or static blueprints)."""

    name: McpServerName
    url: HttpUrl
    headers: dict[str, HeaderValue] = {}
    tools: list[str] = []
    timeout: Seconds = DEFAULT_MCP_TIMEOUT


class ConfigBody(Camel, frozen=True, kw_only=True):
    """`BlueprintConfig`: `maxSteps`, `tokenBudget`, `hitl`, `subagents`, `callableAgents`,
    `mcpServers`; `extra` holds settings of middleware added by users, under their own
    names."""

    max_steps: Positive | None = None
    token_budget: Positive | None = None
    hitl: HitlBody | None = None
    subagents: SubagentsBody | None = None
    callable_agents: list[str] = []
    mcp_servers: list[McpServerBody] = []
    extra: dict[str, Any] = {}


class BindingBody(Camel, frozen=True, kw_only=True):
    name: Name
    message_property: str = "message"
    attachments_property: str | None = None


class SideBody(Camel, frozen=True, kw_only=True):
    """`SideConfig` of a dual-AI blueprint."""

    prompt: str
    label: str = ""
    stop_on_response: bool = True
    stop_tool: str | None = None
    stop_tool_response_property: str | None = None
    max_steps: Positive | None = None
    session_stop: str | BindingBody | None = None
    session_fail: str | BindingBody | None = None
    session_status: str | BindingBody | None = None


class SaveBlueprintBody(Camel, frozen=True, kw_only=True):
    name: Token
    description: str = ""
    prompt: str = ""
    model: Annotated[str, msgspec.Meta(max_length=200)] = ""
    tags: list[str] = []
    config: ConfigBody = msgspec.field(default_factory=ConfigBody)
    type: AgentKind = "ai_human"
    side_a: SideBody | None = None
    side_b: SideBody | None = None
    max_session_turns: Positive | None = None
    expose_as_tool: bool = False
    tool_description: str = ""

    def spec(self) -> BlueprintSpec:
        return msgspec.convert(self, BlueprintSpec, from_attributes=True)


class BlueprintOut(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str
    description: str
    prompt: str
    model: str
    tags: list[str]
    config: ConfigBody
    type: AgentKind
    side_a: SideBody | None
    side_b: SideBody | None
    max_session_turns: int | None
    expose_as_tool: bool
    tool_description: str
    revision: int | None


class BlueprintListItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A blueprint in the agency's list: static or dynamic (saved through the API)."""

    name: str
    description: str
    prompt: str
    model: str
    tags: list[str]
    config: ConfigBody
    type: str
    source: str
    revision: int | None = None
    updated_at: datetime | None = None


def config_body(spec: BlueprintSpec) -> ConfigBody:
    return msgspec.convert(spec.config, ConfigBody, from_attributes=True)


def blueprint_out(spec: BlueprintSpec, revision: int | None) -> BlueprintOut:
    def side(value: object) -> SideBody | None:
        return None if value is None else msgspec.convert(value, SideBody, from_attributes=True)

    return BlueprintOut(
        name=spec.name,
        description=spec.description,
        prompt=spec.prompt,
        model=spec.model,
        tags=list(spec.tags),
        config=config_body(spec),
        type=spec.type,
        side_a=side(spec.side_a),
        side_b=side(spec.side_b),
        max_session_turns=spec.max_session_turns,
        expose_as_tool=spec.expose_as_tool,
        tool_description=spec.tool_description,
        revision=revision,
    )
