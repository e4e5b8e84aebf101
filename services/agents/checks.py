"""What a blueprint names must exist in the agent system: its tags, its hooks, the tools its
`hitl.tools` guards.

A misspelt tag selects nothing and a misspelt tool name in `hitl.tools` guards nothing, so
either would leave an agent without its tools or a tool without its approval, silently.
Checked where a blueprint comes in (over HTTP: a saved blueprint, a workflow's inline
members, the inline blueprints of their subagents; the static blueprints of an app when it
loads), never on reading a stored one back. An app's static blueprints must be right on
every count. Over HTTP an unknown tag or hook is refused (the OpenAPI document lists those
the system has), while a `hitl.tools` name that is none of the blueprint's tools is taken
and answered as a warning: which tools a blueprint has depends on its tags, hooks, sides
and MCP servers, which no schema can state, so a body valid by the document is never
refused for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from agency.contracts.events import BlueprintSpec, McpServer
from agency.contracts.events.blueprint import (
    SessionToolBinding,
    SideConfig,
    SubagentEntry,
)
from agency.services.agents.builtin.parent import NOTIFY_TOOL, STATUS_TOOL

MCP_SEPARATOR = "__"  # `services/mcpclient/config.py`: an MCP tool is `<server>__<tool>`
HITL_MIDDLEWARE = "hitl"


class BlueprintInvalid(Exception):
    """A blueprint naming what its agent system does not have; the message lists each."""

    def __init__(self, name: str, problems: Iterable[str]) -> None:
        self.name = name
        self.problems = tuple(problems)
        super().__init__(f"blueprint {name!r}: {'; '.join(self.problems)}")


class ToolCatalogue(Protocol):
    """What a blueprint is checked against: what an `AgentSystem` offers, by name."""

    @property
    def tags(self) -> frozenset[str]: ...

    @property
    def middleware_names(self) -> frozenset[str]: ...

    def tools_for(self, blueprint: BlueprintSpec) -> Mapping[str, object]: ...

    def registrable_for(self, blueprint: BlueprintSpec) -> Mapping[str, object]: ...

    def mcp_servers_for(self, blueprint: BlueprintSpec) -> Sequence[McpServer]: ...


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _unknown(names: Iterable[str], known: frozenset[str], problem: str, kind: str) -> list[str]:
    """`problem` with each of `names` (once) that is not `known`, listing the `kind` known."""
    return [
        f"{problem} {name!r} (the {kind} of this agent system: {_listed(known)})"
        for name in dict.fromkeys(names)
        if name not in known
    ]


def blueprint_problems(system: ToolCatalogue, blueprint: BlueprintSpec, at: str = "") -> list[str]:
    """Each tag, hook and `hitl.tools` name of `blueprint` that `system` does not know, in
    a sentence naming the field (under `at`, e.g. `agents.reviewer.`) and listing what
    exists. Empty when all is known."""
    return naming_problems(system, blueprint, at) + unguarded_names(system, blueprint, at)


def naming_problems(system: ToolCatalogue, blueprint: BlueprintSpec, at: str = "") -> list[str]:
    """`blueprint_problems` but for `hitl.tools` names: unknown tags and hooks, and
    `hitl.tools` given in a system without the hitl middleware."""
    middleware = system.middleware_names
    problems = [
        *_unknown(blueprint.tags, system.tags, f"field '{at}tags': unknown tag", "tags"),
        *_unknown(blueprint.hooks, middleware, f"field '{at}hooks': no middleware", "middleware"),
    ]
    guarded = blueprint.config.hitl.tools if blueprint.config.hitl else ()
    if guarded and HITL_MIDDLEWARE not in middleware:
        problems.append(
            f"field '{at}config.hitl': this agent system has no hitl middleware to hold the "
            "calls for approval (AgentSystem.defaults() adds it)"
        )
    return problems


def unguarded_names(system: ToolCatalogue, blueprint: BlueprintSpec, at: str = "") -> list[str]:
    """Each `hitl.tools` name that is none of the blueprint's tools (it guards nothing),
    listing the tools it has."""
    guarded = blueprint.config.hitl.tools if blueprint.config.hitl else ()
    if not guarded or HITL_MIDDLEWARE not in system.middleware_names:
        return []
    problems: list[str] = []
    tools = tool_names(system, blueprint)
    servers = [s.name for s in system.mcp_servers_for(blueprint)]
    for name in dict.fromkeys(guarded):
        if name in tools or any(name.startswith(s + MCP_SEPARATOR) for s in servers):
            continue
        mcp = "".join(f", {s}{MCP_SEPARATOR}<tool>" for s in sorted(servers))
        problems.append(
            f"field '{at}config.hitl.tools': {name!r} is no tool of this blueprint (its "
            f"tools: {_listed(tools)}{mcp})"
        )
    return problems


def problems_with_inline(
    system: ToolCatalogue,
    blueprint: BlueprintSpec,
    at: str = "",
    check: Callable[[ToolCatalogue, BlueprintSpec, str], list[str]] = blueprint_problems,
) -> list[str]:
    """`check` (`blueprint_problems` unless told) of the blueprint and of every subagent
    blueprint it defines inline (`config.subagents.subagents[i]`), at any depth, each
    naming its field."""
    problems = check(system, blueprint, at)
    subagents = blueprint.config.subagents
    for i, entry in enumerate(subagents.subagents if subagents is not None else ()):
        inline = entry.blueprint() if isinstance(entry, SubagentEntry) else None
        if inline is not None:
            where = f"{at}config.subagents.subagents[{i}]."
            problems.extend(problems_with_inline(system, inline, where, check))
    return problems


def tool_names(system: ToolCatalogue, blueprint: BlueprintSpec) -> set[str]:
    """The names of the tools the blueprint's agent may call, but for MCP servers' tools
    (fetched only when a run starts): its own, its middleware's (registrable ones too), the
    agents it may call (its own and remote A2A agents), its sides' session tools and the
    escalation tools of an explicit child."""
    names = set(system.tools_for(blueprint)) | set(system.registrable_for(blueprint))
    names |= set(blueprint.config.callable_agents)
    names |= {agent.name for agent in blueprint.config.remote_agents}
    for side in (blueprint.side_a, blueprint.side_b):
        names |= _session_tool_names(side)
    return names | {NOTIFY_TOOL, STATUS_TOOL}


def _session_tool_names(side: SideConfig | None) -> set[str]:
    if side is None:
        return set()
    bindings: list[str | SessionToolBinding | None] = [
        side.session_stop,
        side.session_fail,
        side.session_status,
        side.stop_tool,
    ]
    return {b if isinstance(b, str) else b.name for b in bindings if b is not None}
