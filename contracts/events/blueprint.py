"""Blueprints: an agent's definition and its typed config sections."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from agency.contracts.events.blueprint_fields import (
    BlueprintMetadata,
    Checked,
    CheckedPositive,
    Config,
    Env,
    EnvName,
    Hooks,
    Icon,
    Label,
    ModelName,
    Name,
    PackageName,
    Positive,
    PropertyName,
    SemVer,
    Token,
)
from agency.contracts.events.tool_servers import McpServer, RemoteAgent


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


class HitlConfig(Config, frozen=True, kw_only=True):
    """Calls to these tools wait for a person's decision."""

    tools: tuple[str, ...] = ()


class ImmediateConfig(Config, frozen=True, kw_only=True):
    """The object form of `immediate`. `name_env` and `description_env` name environment
    variables of the runtime whose values become the child's initial name and task (the
    model sees them in the bootstrap call); `scoped_env` names variables handed to the
    child for its runtime only (middleware, state tools), never shown to any model."""

    name_env: EnvName | None = None
    description_env: EnvName | None = None
    scoped_env: tuple[EnvName, ...] = ()


class BlueprintFields(msgspec.Struct, frozen=True, kw_only=True):
    """The fields a blueprint shares with an inline subagent entry, with the same
    defaults: all but its name, its config and what only a saved blueprint has
    (`BlueprintSpec` describes each)."""

    description: str = ""
    prompt: str = ""
    model: ModelName = ""
    tags: tuple[str, ...] = ()
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


class SubagentEntry(Config, BlueprintFields, frozen=True, kw_only=True):
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
    # An inline blueprint's config (None: not set); its other fields are `BlueprintFields`.
    config: BlueprintConfig | None = None

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


class BlueprintSpec(BlueprintFields, frozen=True, kw_only=True, omit_defaults=True):
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
    config: BlueprintConfig = msgspec.field(default_factory=BlueprintConfig)
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
