"""Immediate subagents: children spawned as soon as an agent's prompt becomes active.

A prompt becomes active at the thread's first run and at a handoff to it
(`thread.blueprint_switched`); the state marks it (`prompt_activated`) until the next model
step. If the active blueprint lists entries with `immediate`, the runtime answers, before
that step, with an assistant message of its own holding one `task` (or, for resumable
entries, `subagent_create`) call per entry. From there the calls take the model-driven
path: `subagent.requested`, the coordinator's spawn, the report as the call's tool
message. So the log holds the bootstrap like any other delegation, and replay,
re-execution and fork need nothing new; the model sees the calls and their results in its
history when it takes its first step.

Arguments: the child's task is the value of the entry's `descriptionEnv` variable when set,
else the latest user message (the request that started the run); a resumable child's name
is the value of `nameEnv`, else the entry's name. Both are model-visible hints; the
`scopedEnv` values never appear here (the spawn carries them out of the model's sight).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from agency.contracts.events import AnyEvent, BlueprintSpec, ChatMessage, MessageAppended, ToolCall
from agency.contracts.events.blueprint import SubagentEntry
from agency.contracts.ids import derived_id
from agency.domain.thread_state import RunView, ThreadState
from agency.services.agents.builtin.subagents import (
    CREATE_TOOL,
    TASK_TOOL,
    agent_env,
    branch_enabled,
)

DEFAULT_TASK = "Begin your work."


def immediate_entries(
    blueprint: BlueprintSpec, env: Mapping[str, str] | None = None
) -> tuple[SubagentEntry, ...]:
    """The blueprint's enabled entries with `immediate` set, in their order."""
    env = agent_env(blueprint, env)
    entries = blueprint.config.subagents.subagents if blueprint.config.subagents else ()
    return tuple(
        e
        for e in entries
        if isinstance(e, SubagentEntry)
        and e.immediate_config is not None
        and branch_enabled(e.optional, env)
    )


def _latest_user_text(state: ThreadState) -> str:
    for message in reversed(state.messages):
        if message.role == "user" and message.content.strip():
            return message.content
    return ""


def _hint(name: str | None, env: Mapping[str, str]) -> str:
    return env.get(name, "").strip() if name else ""


def immediate_call(
    state: ThreadState, run: RunView, entry: SubagentEntry, env: Mapping[str, str]
) -> ToolCall:
    settings = entry.immediate_config
    assert settings is not None
    task = _hint(settings.description_env, env) or _latest_user_text(state) or DEFAULT_TASK
    # One activation per position in the history: a second handoff to the same agent in
    # one run gets calls (and children) of its own.
    call_id = derived_id("call_", run.run_id, str(len(state.messages)), entry.name)
    # The task goes in the argument the entry maps to the child's first message.
    if entry.resumable:
        name = _hint(settings.name_env, env) or entry.name
        text = entry.init_user_message_property or "message"
        arguments = {"name": name, "subagentType": entry.name, text: task}
        return ToolCall(id=call_id, name=CREATE_TOOL, arguments=json.dumps(arguments))
    text = entry.init_user_message_property or "description"
    arguments = {text: task, "subagentType": entry.name}
    return ToolCall(id=call_id, name=TASK_TOOL, arguments=json.dumps(arguments))


def immediate_bootstrap(
    state: ThreadState,
    run: RunView,
    blueprint: BlueprintSpec,
    offered: frozenset[str],
    env: Mapping[str, str] | None = None,
) -> tuple[AnyEvent, ...]:
    """The bootstrap of a newly active prompt: an assistant message calling each immediate
    entry, or nothing (no prompt just activated, no immediate entries, or no subagent tool
    offered to this agent)."""
    if not state.prompt_activated:
        return ()
    env = agent_env(blueprint, env)
    calls = tuple(
        immediate_call(state, run, entry, env)
        for entry in immediate_entries(blueprint, env)
        if (CREATE_TOOL if entry.resumable else TASK_TOOL) in offered
    )
    if not calls:
        return ()
    message = ChatMessage(role="assistant", content="", tool_calls=calls, name=state.side)
    return (MessageAppended(run_id=run.run_id, message=message),)
