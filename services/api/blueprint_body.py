"""The HTTP shape of a blueprint: the contract's `BlueprintSpec` with camelCase names.

Request structs refuse unknown fields, so a misspelt setting (`maxStep`) is a 400 naming it
rather than a setting silently ignored; settings of user middleware go in `config.extra`.
Conversion to and from the contract reads attributes (`from_attributes`), so the two
shapes differ only in their wire names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from agency.contracts.events import BlueprintSpec
from agency.contracts.events.registry import (
    DEFAULT_MCP_TIMEOUT,
    AgentKind,
    EnvName,
    McpServerName,
    PropertyName,
    Seconds,
)
from agency.services.api.text import refuse_nul
from agency.services.common.egress import refusal

Positive = Annotated[int, msgspec.Meta(ge=1)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Label = Annotated[str, msgspec.Meta(max_length=200)]
Icon = Annotated[str, msgspec.Meta(max_length=2000)]
EnvValue = Annotated[str, msgspec.Meta(max_length=10_000)]
Env = Annotated[dict[EnvName, EnvValue], msgspec.Meta(max_length=200)]
HookId = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/@-]+$")]
# npm's rule for package names: lower case, optionally scoped (`@scope/name`).
PackageName = Annotated[
    str,
    msgspec.Meta(
        max_length=214, pattern=r"^$|^(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"
    ),
]
# Semantic versioning: MAJOR.MINOR.PATCH, optionally -prerelease and +build.
SemVer = Annotated[
    str,
    msgspec.Meta(
        max_length=100,
        pattern=r"^$|^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
        r"(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$",
    ),
]


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


class ImmediateBody(Camel, frozen=True, kw_only=True):
    """The object form of `immediate`: `nameEnv` / `descriptionEnv` name runtime variables
    whose values become the child's initial name and task (model-visible); `scopedEnv`
    names variables passed to the child's runtime only, never to a model."""

    name_env: EnvName | None = None
    description_env: EnvName | None = None
    scoped_env: list[EnvName] = []


class SubagentEntryBody(Camel, frozen=True, kw_only=True):
    """A subagent this agent may spawn: a blueprint named by `name` (the agency's, else the
    system's), or, with any blueprint field besides `name` (`description`, `prompt`,
    `tags`, `model`, `config`, ...), a whole blueprint inline, each field checked as a
    saved blueprint's; its children run it. The name is the children's agent type (1 to
    200 characters, as for a reference: unlike a saved blueprint's it is in no path).
    `optional` names an environment variable of the runtime: the branch exists only while
    it is `true`, `1` or `yes`. `immediate` (true, or the object form) spawns the child as
    soon as the agent's prompt becomes active, before its first model step.
    `initUserMessageProperty` names the call's argument that becomes the child's first user
    message, `initAttachmentsProperty` the one naming the files copied to it."""

    name: Name
    blocking: bool | None = None
    resumable: bool = False
    max_instances: Positive | None = None
    optional: EnvName | None = None
    init_user_message_property: PropertyName | None = None
    init_attachments_property: PropertyName | None = None
    immediate: bool | ImmediateBody = False
    parent_communication: Literal["implicit", "explicit"] = "implicit"
    # An inline blueprint: `SaveBlueprintBody`'s fields, with its checks.
    description: str = ""
    prompt: str = ""
    model: Annotated[str, msgspec.Meta(max_length=200)] = ""
    tags: list[str] = []
    config: ConfigBody | None = None
    type: AgentKind = "ai_human"
    side_a: SideBody | None = None
    side_b: SideBody | None = None
    max_session_turns: Positive | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    title: Label = ""
    icon: Icon = ""
    env: Env = {}
    hooks: Annotated[list[HookId], msgspec.Meta(max_length=100)] = []
    package_name: PackageName = ""
    version: SemVer = ""
    author: Label = ""
    license: Label = ""

    # The document states the rule `__post_init__` checks: `explicit` needs `resumable`
    # and a `blocking` that is not true.
    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"properties": {"parentCommunication": {"const": "implicit"}}},
            {
                "properties": {"resumable": {"const": True}, "blocking": {"enum": [False, None]}},
                "required": ["resumable"],
            },
        ]
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parent_communication == "explicit" and (not self.resumable or self.blocking):
            raise ValueError(
                f"subagent {self.name!r}: parentCommunication `explicit` needs `resumable` "
                "and cannot be `blocking`"
            )
        # An inline blueprint's MCP servers pass the egress wall as a saved blueprint's do.
        for i, server in enumerate(self.config.mcp_servers if self.config else ()):
            problem = refusal(server.url)
            if problem is not None:
                raise ValueError(
                    f"field 'config.mcpServers[{i}].url': {server.url[:200]!r} is refused: "
                    f"{problem}"
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
    """`BlueprintSpec`. `title` and `icon` label the agent in a UI; `env` holds default
    values of variables (names like environment variables); `hooks` the ids of fallback
    hooks; `packageName` (npm's rule), `version` (semantic versioning), `author` and
    `license` are packaging metadata. Called as a tool (`exposeAsTool`), the tool's
    argument `initUserMessageProperty` (default `message`) becomes the child's first user
    message and `initAttachmentsProperty` (default `attachments`) names the files copied
    to it."""

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
    title: Label = ""
    icon: Icon = ""
    env: Env = {}
    hooks: Annotated[list[HookId], msgspec.Meta(max_length=100)] = []
    package_name: PackageName = ""
    version: SemVer = ""
    author: Label = ""
    license: Label = ""
    init_user_message_property: PropertyName | None = None
    init_attachments_property: PropertyName | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # An address no connection for a tenant may reach (`services/common/egress.py`);
        # a name is resolved and checked again on connecting. Checked on save only: a
        # stored blueprint still reads back (its runs are refused on connecting).
        for i, server in enumerate(self.config.mcp_servers):
            problem = refusal(server.url)
            if problem is not None:
                raise ValueError(
                    f"field 'config.mcpServers[{i}].url': {server.url[:200]!r} is refused: "
                    f"{problem}"
                )

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
    title: str
    icon: str
    env: dict[str, str]
    hooks: list[str]
    package_name: str
    version: str
    author: str
    license: str
    init_user_message_property: str | None
    init_attachments_property: str | None
    revision: int | None
    # On save: each `hitl.tools` name that is none of the blueprint's tools (it guards
    # nothing), listing the tools it has.
    warnings: list[str] = msgspec.field(default_factory=list)


class BlueprintListItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A blueprint in the agency's list: static or dynamic (saved through the API).
    `sideA` and `sideB` are a dual-AI blueprint's sides, null for an ai_human one;
    `exposeAsTool` says whether agents listing it in `callableAgents` may call it (a
    subagent session of a dual-AI blueprint, a handoff to an ai_human one). `kind` is
    `code` for a code agent (its settings: `…/blueprints/{name}/settings`), else `prompt`."""

    name: str
    description: str
    prompt: str
    model: str
    tags: list[str]
    config: ConfigBody
    type: str
    source: str
    kind: Literal["prompt", "code"] = "prompt"
    revision: int | None = None
    updated_at: datetime | None = None
    title: str = ""
    icon: str = ""
    env: dict[str, str] = {}
    hooks: list[str] = []
    package_name: str = ""
    version: str = ""
    author: str = ""
    license: str = ""
    side_a: SideBody | None = None
    side_b: SideBody | None = None
    max_session_turns: int | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    init_user_message_property: str | None = None
    init_attachments_property: str | None = None


def config_body(spec: BlueprintSpec) -> ConfigBody:
    return msgspec.convert(spec.config, ConfigBody, from_attributes=True)


def blueprint_out(
    spec: BlueprintSpec, revision: int | None, warnings: list[str] | None = None
) -> BlueprintOut:
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
        title=spec.title,
        icon=spec.icon,
        env=dict(spec.env),
        hooks=list(spec.hooks),
        package_name=spec.package_name,
        version=spec.version,
        author=spec.author,
        license=spec.license,
        init_user_message_property=spec.init_user_message_property,
        init_attachments_property=spec.init_attachments_property,
        revision=revision,
        warnings=warnings or [],
    )
