"""Tenants, agencies and blueprints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from agency.contracts.events.base import Event


class TenantCreated(Event, frozen=True, kw_only=True, tag="tenant.created"):
    name: str


class ApiKeyIssued(Event, frozen=True, kw_only=True, tag="tenant.api_key_issued"):
    """Only a hash of the key is stored; the key itself is shown once, to its creator."""

    key_id: str
    key_hash: str
    name: str = ""


class ApiKeyRevoked(Event, frozen=True, kw_only=True, tag="tenant.api_key_revoked"):
    key_id: str


class TenantProviderSet(Event, frozen=True, kw_only=True, tag="tenant.provider_set"):
    """The tenant's own settings of a model provider: its key and base URL, sealed
    (`infra/sealing.py`), never in clear; the tenant's runs call the provider
    with them instead of the operator's."""

    name: str
    sealed: str


class TenantProviderRemoved(Event, frozen=True, kw_only=True, tag="tenant.provider_removed"):
    name: str


class TenantModelPolicySet(Event, frozen=True, kw_only=True, tag="tenant.model_policy_set"):
    """Set by the operator: whether the tenant's runs may call a provider with the
    operator's settings when the tenant has none of its own for it."""

    operator_fallback: bool


class TenantBudgetSet(Event, frozen=True, kw_only=True, tag="tenant.budget_set"):
    """Set by the operator: the tenant's spend budget per period (`services/tenancy/spend.py`),
    in tokens and in USD. None leaves the operator's default; 0 is no budget."""

    tokens: int | None = None
    usd: float | None = None


class AgencyBudgetSet(Event, frozen=True, kw_only=True, tag="agency.budget_set"):
    """Set by the tenant: one agency's spend budget per period, within the tenant's. None
    leaves the operator's default for agencies; 0 is no budget of its own."""

    tokens: int | None = None
    usd: float | None = None


class AgencyCreated(Event, frozen=True, kw_only=True, tag="agency.created"):
    name: str
    metadata: dict[str, str] = {}


@dataclass(frozen=True)
class Checked:
    """A field's rule where a blueprint comes in from a client (`services/api/blueprint_body.py`
    derives the HTTP body from these structs), not where a stored event is read: events
    stored before the rule, or through a path that did not check it, still decode. `meta`
    takes the place of the field's own `msgspec.Meta` there; `required` makes a field with
    a default required there; `operator` leaves the field out (the operator's only)."""

    meta: msgspec.Meta | None = None
    required: bool = False
    operator: bool = False


Positive = Annotated[int, msgspec.Meta(ge=1)]
CheckedPositive = Annotated[int, Checked(msgspec.Meta(ge=1))]
# A blueprint's own name: it is in paths and subjects.
Token = Annotated[
    str, Checked(msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"))
]
Name = Annotated[str, Checked(msgspec.Meta(min_length=1, max_length=200))]
Label = Annotated[str, Checked(msgspec.Meta(max_length=200))]
Icon = Annotated[str, Checked(msgspec.Meta(max_length=2000))]
ModelName = Annotated[str, Checked(msgspec.Meta(max_length=200))]
HookId = Annotated[
    str, Checked(msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/@-]+$"))
]
Hooks = Annotated[tuple[HookId, ...], Checked(msgspec.Meta(max_length=100))]
# npm's rule for package names: lower case, optionally scoped (`@scope/name`).
PackageName = Annotated[
    str,
    Checked(
        msgspec.Meta(
            max_length=214, pattern=r"^$|^(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"
        )
    ),
]
# Semantic versioning: MAJOR.MINOR.PATCH, optionally -prerelease and +build.
SemVer = Annotated[
    str,
    Checked(
        msgspec.Meta(
            max_length=100,
            pattern=r"^$|^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
            r"(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$",
        )
    ),
]
_ENV_NAME = msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
EnvName = Annotated[str, _ENV_NAME]
# A blueprint's `env`: its names are checked as `EnvName`s where a blueprint comes in only
# (blueprints stored before the rule hold other names, and still read).
EnvValue = Annotated[str, Checked(msgspec.Meta(max_length=10_000))]
Env = Annotated[
    dict[Annotated[str, Checked(_ENV_NAME)], EnvValue], Checked(msgspec.Meta(max_length=200))
]
# Free-form labels of a blueprint, for clients (a LangGraph assistant's `metadata`, and its
# `config` and `context` under `langgraph`): JSON values, read back as they were saved.
BlueprintMetadata = Annotated[
    dict[Annotated[str, msgspec.Meta(min_length=1, max_length=200)], Any],
    Checked(msgspec.Meta(max_length=100)),
]


class SessionToolBinding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool that drives a dual-AI session's lifecycle; `message_property` names the
    argument whose text becomes the lifecycle message (the result, the failure, the status)."""

    name: Name
    message_property: str = "message"
    attachments_property: str | None = None


Binding = str | SessionToolBinding


class SideConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One side of a dual-AI session. Its turn ends on `stop_tool`, on a text answer
    (`stop_on_response`) or after `max_steps` model calls; the session ends on
    `session_stop` (success) or `session_fail`; `session_status` publishes progress."""

    prompt: str
    label: str = ""
    stop_on_response: bool = True
    stop_tool: str | None = None
    stop_tool_response_property: str | None = None
    max_steps: CheckedPositive | None = None
    session_stop: Binding | None = None
    session_fail: Binding | None = None
    session_status: Binding | None = None


AgentKind = Literal["ai_human", "dual_ai"]


class Config(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """Base of blueprint config sections: an unknown key is an error, not silently dropped."""


class HitlConfig(Config, frozen=True, kw_only=True):
    """Calls to these tools wait for a person's decision."""

    tools: tuple[str, ...] = ()


PropertyName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]


class ImmediateConfig(Config, frozen=True, kw_only=True):
    """The object form of `immediate`. `name_env` and `description_env` name environment
    variables of the runtime whose values become the child's initial name and task (the
    model sees them in the bootstrap call); `scoped_env` names variables handed to the
    child for its runtime only (middleware, state tools), never shown to any model."""

    name_env: EnvName | None = None
    description_env: EnvName | None = None
    scoped_env: tuple[EnvName, ...] = ()


class SubagentEntry(Config, frozen=True, kw_only=True):
    """A blueprint this agent may spawn. `blocking` defaults to the opposite of `resumable`
    (a resumable child answers later unless the blueprint says to wait). With `optional`,
    the branch exists only while that environment variable of the runtime is `true`, `1`
    or `yes` (any case): otherwise it can be neither created nor messaged. With
    `immediate`, the child is spawned as soon as this agent's prompt becomes active (the
    thread's first run, a handoff to it), before its first model step.

    `init_user_message_property` names the argument of the `task` / `subagent_create` call
    whose text becomes the child's first user message (default `description` for `task`,
    `message` for `subagent_create`); `init_attachments_property` the argument naming the
    parent's files copied to the child (default `attachments`).

    `parent_communication` (resumable children only): `implicit` queues the child's results
    to the parent; `explicit` does not, the child reports with `notify_parent` and
    `set_status` when it chooses, and is never waited for (it is not blocking).

    An entry is either a reference to a blueprint by `name` (the agency's, else the
    system's) or a whole blueprint inline (the seed's `SubagentsConfig`): any field of a
    `BlueprintSpec` besides `name` and the two `init_*` properties (`description`,
    `prompt`, `tags`, `model`, `config`, ...) makes it one, and its children run that
    blueprint, carried in their `thread.created`, whatever the agency saves under the name.
    """

    # The children's agent type: unlike a saved blueprint's name it is in no path.
    name: Annotated[
        str, msgspec.Meta(min_length=1), Checked(msgspec.Meta(min_length=1, max_length=200))
    ]
    blocking: bool | None = None
    resumable: bool = False
    max_instances: Positive | None = None
    optional: EnvName | None = None
    init_user_message_property: PropertyName | None = None
    init_attachments_property: PropertyName | None = None
    immediate: bool | ImmediateConfig = False

    @property
    def immediate_config(self) -> ImmediateConfig | None:
        """The `immediate` settings (the object form, or an empty one for `true`), or None."""
        if isinstance(self.immediate, ImmediateConfig):
            return self.immediate
        return ImmediateConfig() if self.immediate else None

    @property
    def scoped_env(self) -> tuple[str, ...]:
        """The variables every child of this branch needs in its scope."""
        return self.immediate.scoped_env if isinstance(self.immediate, ImmediateConfig) else ()

    parent_communication: Literal["implicit", "explicit"] = "implicit"
    # An inline blueprint's fields (`BlueprintSpec`'s, with the same defaults).
    description: str = ""
    prompt: str = ""
    model: ModelName = ""
    tags: tuple[str, ...] = ()
    config: BlueprintConfig | None = None
    type: AgentKind = "ai_human"
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: CheckedPositive | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    title: Label = ""
    icon: Icon = ""
    env: Env = {}
    hooks: Hooks = ()
    package_name: PackageName = ""
    version: SemVer = ""
    author: Label = ""
    license: Label = ""

    @property
    def inline(self) -> bool:
        """Whether the entry defines its blueprint (any blueprint field set) rather than
        naming one."""
        return any(
            getattr(self, field) != default for field, default in INLINE_BLUEPRINT_DEFAULTS.items()
        )

    def blueprint(self) -> BlueprintSpec | None:
        """The inline blueprint, or None for a reference by name."""
        if not self.inline:
            return None
        return BlueprintSpec(
            name=self.name,
            init_user_message_property=self.init_user_message_property,
            init_attachments_property=self.init_attachments_property,
            config=self.config or BlueprintConfig(),
            **{f: getattr(self, f) for f in INLINE_BLUEPRINT_DEFAULTS if f != "config"},
        )

    # The rule `__post_init__` checks, in JSON Schema (for documents that describe entries).
    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"properties": {"parent_communication": {"const": "implicit"}}},
            {
                "properties": {"resumable": {"const": True}, "blocking": {"enum": [False, None]}},
                "required": ["resumable"],
            },
        ]
    }

    def __post_init__(self) -> None:
        if self.parent_communication == "explicit" and not self.resumable:
            raise ValueError(
                f"subagent {self.name!r}: parent_communication `explicit` needs `resumable`"
            )
        if self.parent_communication == "explicit" and self.blocking:
            raise ValueError(
                f"subagent {self.name!r}: an `explicit` child is never waited for; "
                "it cannot be `blocking`"
            )


class SubagentsConfig(Config, frozen=True, kw_only=True):
    """The blueprints the `task` tool may spawn: names, or entries with their options."""

    subagents: tuple[str | SubagentEntry, ...] = ()

    def inline_blueprints(self) -> dict[str, BlueprintSpec]:
        """The blueprints its entries define inline, by name."""
        found: dict[str, BlueprintSpec] = {}
        for entry in self.subagents:
            if isinstance(entry, SubagentEntry) and (spec := entry.blueprint()) is not None:
                found[entry.name] = spec
        return found


# The blueprint fields an inline entry may set, with the defaults that mean "not set".
INLINE_BLUEPRINT_DEFAULTS: dict[str, Any] = {
    "description": "",
    "prompt": "",
    "model": "",
    "tags": (),
    "config": None,
    "type": "ai_human",
    "side_a": None,
    "side_b": None,
    "max_session_turns": None,
    "expose_as_tool": False,
    "tool_description": "",
    "title": "",
    "icon": "",
    "env": {},
    "hooks": (),
    "package_name": "",
    "version": "",
    "author": "",
    "license": "",
}
INLINE_BLUEPRINT_FIELDS = frozenset(INLINE_BLUEPRINT_DEFAULTS)


McpServerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9-]{1,32}$")]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]
# One object, shared by every shape of a server: msgspec leaves a float default out of an
# encoding only when it is this very object.
DEFAULT_MCP_TIMEOUT = 30.0
# A blueprint from a client names streamable HTTP servers only; a header value naming the
# environment (`${ENV:NAME}`) is the operator's.
# An http(s) URL with a host (no user part), an optional port from 0 to 65535, then
# anything: what the API reads as a URL.
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_H = "[0-9A-Fa-f]{1,4}"
# An IPv6 address as Python's `ipaddress` reads it (the full and the compressed forms).
_IPV6 = (
    rf"(({_H}:){{7}}{_H}|({_H}:){{1,7}}:|({_H}:){{1,6}}:{_H}|({_H}:){{1,5}}(:{_H}){{1,2}}"
    rf"|({_H}:){{1,4}}(:{_H}){{1,3}}|({_H}:){{1,3}}(:{_H}){{1,4}}|({_H}:){{1,2}}(:{_H}){{1,5}}"
    rf"|{_H}:(:{_H}){{1,6}}|:((:{_H}){{1,7}}|:))"
)
# A name (RFC 3986's reg-name characters), an IPv4 address, or a bracketed IPv6 one.
_HOST = rf"(\[{_IPV6}\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)"
URL_WITH_HOST = rf"^https?://{_HOST}(:{_PORT})?([/?#][\s\S]*)?$"
# The same, https only, or nothing (a tenant's model provider's base URL).
HTTPS_URL_OR_NONE = rf"^(https://{_HOST}(:{_PORT})?([/?#][\s\S]*)?)?$"
HttpUrl = Annotated[
    str, Checked(msgspec.Meta(pattern=URL_WITH_HOST, max_length=2000), required=True)
]
HeaderValue = Annotated[str, Checked(msgspec.Meta(pattern=r"^(?!.*\$\{ENV:)"))]


class McpServer(Config, frozen=True, kw_only=True):
    """An MCP server whose tools the agent gets, each named `<name>__<tool>`.

    Exactly one transport: `url`, a streamable HTTP endpoint sent `headers`, or `command`,
    the argv of a stdio server started with `env` added to its environment. A header or env
    value may be a reference `${ENV:NAME}`, read from the environment of the service that
    connects, so the secret is never written to the log. References and `command` are the
    operator's: they are refused in blueprints saved over HTTP or NATS (`docs/mcp.md`).
    `tools` keeps only those tools of the server (all when empty); `timeout` bounds one call.
    """

    name: McpServerName
    url: HttpUrl = ""
    headers: dict[str, HeaderValue] = {}
    command: Annotated[tuple[str, ...], Checked(operator=True)] = ()
    env: Annotated[dict[str, str], Checked(operator=True)] = {}
    tools: tuple[str, ...] = ()
    timeout: Seconds = DEFAULT_MCP_TIMEOUT

    # The rules `__post_init__` checks, in JSON Schema (for documents that describe servers).
    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {
                "required": ["url"],
                "properties": {
                    "url": {"pattern": "^https?://"},
                    "command": {"maxItems": 0},
                    "env": {"maxProperties": 0},
                },
            },
            {
                "required": ["command"],
                "properties": {
                    "command": {"minItems": 1},
                    "url": {"maxLength": 0},
                    "headers": {"maxProperties": 0},
                },
            },
        ]
    }

    def __post_init__(self) -> None:
        if bool(self.url) == bool(self.command):
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of `url` (streamable HTTP) "
                "or `command` (stdio)"
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url {self.url[:200]!r} is not http(s)")
        if self.url and self.env:
            raise ValueError(f"MCP server {self.name!r}: `env` applies to stdio servers only")
        if self.command and self.headers:
            raise ValueError(f"MCP server {self.name!r}: `headers` apply to HTTP servers only")

    def operator_only(self) -> str | None:
        """Why a tenant may not name this server in a blueprint of its own, or None."""
        if self.command:
            return f"MCP server {self.name!r}: stdio servers (`command`) are the operator's"
        for key, value in self.headers.items():
            if "${ENV:" in value:
                return (
                    f"MCP server {self.name!r}: header {key!r} references the environment "
                    "(`${ENV:NAME}`), which only the operator's servers may"
                )
        return None


DEFAULT_REMOTE_AGENT_TIMEOUT = 120.0


class RemoteAgent(Config, frozen=True, kw_only=True):
    """A remote A2A agent the agent gets as a tool named `name`: a subagent that lives
    elsewhere (`docs/protocols.md`, "Remote A2A agents as tools").

    `url` is the agent's card (e.g. `https://host/.well-known/agent-card.json`), fetched at
    the start of a run; the tool's description is `description`, or else the card's, with
    its skills. `headers` are sent with every request, the card's included (a key: e.g.
    `Authorization`); a value may be a reference `${ENV:NAME}`, which only the operator's
    blueprints may hold, as for MCP servers. `timeout` bounds one call: the message sent and
    the remote task reaching a final state or asking for input.
    """

    name: McpServerName
    url: HttpUrl
    description: str = ""
    headers: dict[str, HeaderValue] = {}
    timeout: Seconds = DEFAULT_REMOTE_AGENT_TIMEOUT

    def operator_only(self) -> str | None:
        """Why a tenant may not name this agent in a blueprint of its own, or None."""
        for key, value in self.headers.items():
            if "${ENV:" in value:
                return (
                    f"remote agent {self.name!r}: header {key!r} references the environment "
                    "(`${ENV:NAME}`), which only the operator's agents may"
                )
        return None


class TreeLimits(Config, frozen=True, kw_only=True):
    """Bounds on the subagent tree a thread of this blueprint grows: `max_depth` (levels
    below the root), `max_children` (children per thread), `max_threads` (threads in the
    whole tree, the root included). Each only lowers the operator's maximum
    (`AGENCY_TREE_MAX_DEPTH`, `AGENCY_TREE_MAX_CHILDREN`, `AGENCY_TREE_MAX_THREADS`); unset,
    the maximum holds."""

    max_depth: CheckedPositive | None = None
    max_children: CheckedPositive | None = None
    max_threads: CheckedPositive | None = None


class BlueprintConfig(Config, frozen=True, kw_only=True):
    """What built-in middleware and the runtime read of a blueprint, typed.

    `max_steps` bounds a run's model calls (default 25), `token_budget` the history sent to
    the model (default 100k), `hitl` the tools that need approval, `subagents` the
    blueprints `task` may spawn, `callable_agents` the agents exposed as tools,
    `mcp_servers` the MCP servers whose tools the agent gets, `remote_agents` the remote
    A2A agents it may call, one tool each. `extra` is the open part:
    settings of middleware added by users, keyed by their own names.
    """

    max_steps: Positive | None = None
    token_budget: Positive | None = None
    hitl: HitlConfig | None = None
    subagents: SubagentsConfig | None = None
    callable_agents: tuple[str, ...] = ()
    mcp_servers: tuple[McpServer, ...] = ()
    remote_agents: tuple[RemoteAgent, ...] = ()
    extra: dict[str, Any] = {}


class BlueprintSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An agent definition: prompt, model and the tags that pick tools and middleware.

    `config` holds runtime and middleware settings (budgets, hitl tool lists, subagent
    types), typed; settings of middleware added by users go in `config.extra`. A `dual_ai`
    blueprint has two AI sides (`side_a`, `side_b`) talking to each other, bounded by
    `max_session_turns`. With `expose_as_tool`, other agents that list it in
    `config.callable_agents` get a tool of its name: a handoff to it (ai_human) or a
    subagent session of it (dual_ai).

    Descriptive fields (added with defaults, so blueprints stored before them read):
    `title` and `icon` label the agent in a UI, `env` holds the agent's default values of
    variables, `hooks` the ids of its fallback hooks; `package_name`, `version`, `author`
    and `license` are packaging metadata, read only when the agent is packed for
    distribution. Called as a tool (`expose_as_tool`), the tool's argument
    `init_user_message_property` (default `message`) becomes the child's first user message
    (a handoff's reason) and `init_attachments_property` (default `attachments`) names the
    caller's files copied to the child. `limits` bounds the subagent tree its threads grow
    (`TreeLimits`), below the operator's maxima. `metadata` holds a client's own labels
    (JSON values), kept and read back, never read by a run.
    """

    name: Token
    description: str = ""
    prompt: str = ""
    model: ModelName = ""
    tags: tuple[str, ...] = ()
    config: BlueprintConfig = msgspec.field(default_factory=BlueprintConfig)
    type: AgentKind = "ai_human"
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: CheckedPositive | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    title: Label = ""
    icon: Icon = ""
    env: Env = {}
    hooks: Hooks = ()
    package_name: PackageName = ""
    version: SemVer = ""
    author: Label = ""
    license: Label = ""
    init_user_message_property: PropertyName | None = None
    init_attachments_property: PropertyName | None = None
    limits: TreeLimits | None = None
    metadata: BlueprintMetadata = {}

    def with_inline(self) -> list[BlueprintSpec]:
        """The blueprint and every subagent blueprint defined inline in it, at any depth."""
        found: list[BlueprintSpec] = []
        pending = [self]
        while pending:
            current = pending.pop()
            found.append(current)
            if current.config.subagents is not None:
                pending.extend(current.config.subagents.inline_blueprints().values())
        return found


class BlueprintSaved(Event, frozen=True, kw_only=True, tag="blueprint.saved"):
    """Version 2: `blueprint.config` typed (version 1 held a free dict with camelCase keys;
    see `contracts.upcasters`)."""

    schema_version = 2
    blueprint: BlueprintSpec
    revision: int


class BlueprintDeleted(Event, frozen=True, kw_only=True, tag="blueprint.deleted"):
    name: str


RegistryEvent = (
    TenantCreated
    | ApiKeyIssued
    | ApiKeyRevoked
    | TenantProviderSet
    | TenantProviderRemoved
    | TenantModelPolicySet
    | TenantBudgetSet
    | AgencyCreated
    | AgencyBudgetSet
    | BlueprintSaved
    | BlueprintDeleted
)
