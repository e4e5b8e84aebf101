"""Subagents: the `task` tool delegates work to a child thread and reports its answer back.

Blueprint config: `{"subagents": {"subagents": ["researcher", {"name": "writer",
"blocking": false}, {"name": "helper", "resumable": true, "max_instances": 2}]}}` lists the
blueprints this agent may spawn (a name also resolves to the agency's dynamic blueprint of
that name); an entry may instead define its blueprint inline (`{"name": "critic",
"description": ..., "prompt": ..., "tags": [...], "model": ...}`, every field of a
blueprint), and its children run that one. A blocking call pauses the parent's run (reason
`subagent`) until every child of the step has reported; a non-blocking one answers at once
with the child's reference, and the child's result arrives later as a queued message.
Resumable types are created with `subagent_create` (a named, persistent child), addressed
again with `subagent_message` and shut down with `subagent_terminate`;
while children exist, the parent's model sees them listed in a system message. An entry
with `"optional": "SOME_FLAG"` is a branch that exists only while the variable `SOME_FLAG`
is `true`, `1` or `yes` (`agent_env`: the blueprint's `env`, which the runtime fills with
the process's values the blueprint may read, `services/tenancy/env.py`).
`"init_user_message_property": "brief"` and `"init_attachments_property": "inputs"` make
a call of that type read its task from `brief` and the files to copy from `inputs`
(instead of `description` / `message`, `attachments`).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Literal, cast

from agency.contracts.events.blueprint import BlueprintConfig, BlueprintSpec
from agency.services.agents.middleware import Middleware, MiddlewareContext, ModelPlan
from agency.services.agents.tools import SubagentTool, ToolSpec, object_schema

TASK_TOOL = "task"
CREATE_TOOL = "subagent_create"
MESSAGE_TOOL = "subagent_message"
TERMINATE_TOOL = "subagent_terminate"
RESUMABLE_TOOLS = (CREATE_TOOL, MESSAGE_TOOL, TERMINATE_TOOL)

_STRING = {"type": "string"}
_TITLE = {"type": "string", "description": "a short title for the subagent's entry"}
_ATTACHMENTS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "paths of your files to copy to the subagent",
}

TASK = ToolSpec(
    name=TASK_TOOL,
    description="Delegate a self-contained task to a subagent. It works in its own thread "
    "and answers with a report. Calls in one step run in parallel.",
    parameters=object_schema(
        ["description", "subagentType"],
        description={"type": "string", "description": "the task, with all context needed"},
        subagentType={"type": "string", "description": "which subagent to use"},
        timeoutMs={"type": "integer", "description": "give up after this many ms"},
        title=_TITLE,
        attachments=_ATTACHMENTS,
    ),
)
CREATE = ToolSpec(
    name=CREATE_TOOL,
    description="Create a named, persistent subagent and give it its first task. "
    "Message it again later with subagent_message.",
    parameters=object_schema(
        ["name", "subagentType", "message"],
        name={"type": "string", "description": "a name for this instance"},
        subagentType=_STRING,
        message={"type": "string", "description": "its first task"},
        title=_TITLE,
        description={"type": "string", "description": "what this instance is for"},
        attachments=_ATTACHMENTS,
    ),
)
MESSAGE = ToolSpec(
    name=MESSAGE_TOOL,
    description="Send a persistent subagent another message, by its reference.",
    parameters=object_schema(
        ["reference", "message"], reference=_STRING, message=_STRING, attachments=_ATTACHMENTS
    ),
)


TERMINATE = ToolSpec(
    name=TERMINATE_TOOL,
    description="Shut a persistent subagent down for good, by its reference or name: its "
    "current work stops and it takes no more messages.",
    parameters=object_schema(
        reference=_STRING,
        name=_STRING,
        reason={"type": "string", "description": "why, for the record"},
    ),
)


@dataclass(frozen=True, slots=True)
class SubagentType:
    name: str
    blocking: bool = True
    resumable: bool = False
    max_instances: int | None = None
    # Variables every child of this type needs in its scope (`immediate.scopedEnv`).
    scoped_env: tuple[str, ...] = ()
    # The call's arguments holding the first message and the files to copy, when the
    # entry names others than the tool's own (`description` / `message`, `attachments`).
    message_property: str | None = None
    attachments_property: str | None = None
    parent_communication: Literal["implicit", "explicit"] = "implicit"
    # The blueprint an inline entry defines; None: the blueprint of that name.
    blueprint: BlueprintSpec | None = None


ENABLED = frozenset({"true", "1", "yes"})


def agent_env(blueprint: BlueprintSpec, env: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """The variables an agent's decisions read (`optional` flags, `nameEnv`,
    `descriptionEnv`, `scopedEnv`): `env` when given, then the blueprint's `env` for the
    names it does not set. Never the process's environment: the runtime resolves a
    blueprint with the process's values it may read already in its `env`
    (`services/tenancy/env.py`), so a tenant's blueprint reads only its own."""
    if env is None:
        return blueprint.env
    if not blueprint.env:
        return env
    # Read only: ChainMap writes to its first map only on assignment, which nothing does.
    return ChainMap(cast(MutableMapping[str, str], env), blueprint.env)


def branch_enabled(flag: str | None, env: Mapping[str, str]) -> bool:
    """An `optional` branch is on while its variable is `true`, `1` or `yes` (any case)."""
    return flag is None or env.get(flag, "").strip().lower() in ENABLED


def disabled_types(config: BlueprintConfig, env: Mapping[str, str]) -> dict[str, str]:
    """The listed subagent types whose `optional` flag is off in `env` (`agent_env`), each
    with the name of its flag."""
    return {
        entry.name: entry.optional
        for entry in (config.subagents.subagents if config.subagents else ())
        if not isinstance(entry, str)
        and entry.optional is not None
        and not branch_enabled(entry.optional, env)
    }


def subagent_types(config: BlueprintConfig, env: Mapping[str, str]) -> dict[str, SubagentType]:
    """The subagent types this agent may use now: an `optional` branch whose flag is off in
    `env` (`agent_env`) is left out."""
    off = disabled_types(config, env)
    types: dict[str, SubagentType] = {}
    for entry in config.subagents.subagents if config.subagents else ():
        if isinstance(entry, str):
            types[entry] = SubagentType(entry)
            continue
        if entry.name in off:
            continue
        types[entry.name] = SubagentType(
            entry.name,
            # A resumable child answers later unless the blueprint says to wait.
            blocking=not entry.resumable if entry.blocking is None else entry.blocking,
            resumable=entry.resumable,
            max_instances=entry.max_instances,
            scoped_env=entry.scoped_env,
            message_property=entry.init_user_message_property,
            attachments_property=entry.init_attachments_property,
            parent_communication=entry.parent_communication,
            blueprint=entry.blueprint(),
        )
    return types


class SubagentsMiddleware(Middleware):
    name = "subagents"
    tags = ("subagents",)

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        types = subagent_types(ctx.config, agent_env(ctx.blueprint))
        if not types:
            return None
        listed = ", ".join(sorted(types))
        return (
            "You can delegate with the `task` tool to these subagents: "
            f"{listed}. Give each a complete description; it sees nothing else."
        )

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        children = ctx.state.children
        if not children:
            return
        lines = ["Your subagents (reference, name, type, status):"]
        for child in children:
            note = f" — {child.status_text}" if child.status_text else ""
            title = f" ({child.title})" if child.title else ""
            lines.append(
                f"- {child.reference} {child.name or '-'}{title} {child.subagent_type} "
                f"{child.status}{note}"
            )
        plan.system_prompts.append("\n".join(lines))

    def subagent_tools(self) -> tuple[SubagentTool, ...]:
        return (
            SubagentTool(spec=TASK),
            SubagentTool(spec=CREATE),
            SubagentTool(spec=MESSAGE),
            SubagentTool(spec=TERMINATE),
        )
