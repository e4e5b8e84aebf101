"""Tool calls that involve other agents: subagents (`task`, `subagent_create`,
`subagent_message`, `subagent_terminate`, exposed dual-AI agents) and handoffs to exposed
ai_human agents."""

from __future__ import annotations

from typing import Any

from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    BlueprintSwitched,
    SubagentMessaged,
    SubagentRequested,
    SubagentTerminateRequested,
    ToolCall,
    ToolError,
    ToolOutput,
)
from agency.contracts.ids import derived_id
from agency.domain.child_naming import child_thread_id
from agency.domain.thread_state import RunView, ThreadState
from agency.infra.sealing import seal
from agency.services.agents.builtin.subagents import (
    CREATE_TOOL,
    MESSAGE_TOOL,
    TERMINATE_TOOL,
    agent_env,
    disabled_types,
    subagent_types,
)
from agency.services.agents.tools import AgentTool
from agency.services.runtime.scoped import EnvRequest, env_required, scoped_values
from agency.services.runtime.toolset import call_arguments


def _attachments(args: dict[str, Any], prop: str = "attachments") -> tuple[str, ...] | str:
    """The paths in argument `prop`: a list of paths, or one path."""
    value = args.get(prop, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return f"{prop} must be a list of file paths"
    return tuple(value)


def _error(run: RunView, call: ToolCall, problem: str) -> tuple[AnyEvent, ...]:
    return (ToolError(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, error=problem),)


def _output(run: RunView, call: ToolCall, text: str) -> ToolOutput:
    """The answer to `call` the runtime gives at once: what became of it."""
    return ToolOutput(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, output=text)


def _missing_files(state: ThreadState, paths: tuple[str, ...]) -> list[str]:
    return [p for p in paths if state.file(p) is None]


def spawn_group_id(run: RunView) -> str:
    """The children one model step spawns share a group: the run and the step name it."""
    return derived_id("spawn_", run.run_id, str(run.step))


def _started_answer(
    state: ThreadState, run: RunView, call: ToolCall, communication: str = "implicit"
) -> ToolOutput:
    child = child_thread_id(state.tenant_id, state.thread_id, call.id)
    later = (
        "it reports to you only when it chooses to (its messages arrive like a user's)."
        if communication == "explicit"
        else "its result will arrive as a message when it is done."
    )
    return _output(run, call, f"Subagent started (reference: {child}). Continue; {later}")


def switched_off(kind: str, flag: str) -> str:
    return (
        f"the subagent branch {kind} is optional and switched off: its flag {flag} is not "
        "`true`, `1` or `yes`"
    )


def subagent_call(
    state: ThreadState, run: RunView, call: ToolCall, blueprint: BlueprintSpec
) -> tuple[AnyEvent, ...]:
    """`task`, `subagent_create` or `subagent_message`: ask the coordinator, or say why not."""
    if call.name == MESSAGE_TOOL:
        return _message(state, run, call, blueprint)
    if call.name == TERMINATE_TOOL:
        return _terminate(state, run, call)
    env = agent_env(blueprint)
    types = subagent_types(blueprint.config, env)
    args = call_arguments(call)
    creating = call.name == CREATE_TOOL
    kind = args.get("subagentType")
    timeout = args.get("timeoutMs")
    name = args.get("name")
    title, about = args.get("title"), args.get("description") if creating else None
    if title is not None and not isinstance(title, str):
        return _error(run, call, "title must be a string")
    if about is not None and not isinstance(about, str):
        return _error(run, call, "description must be a string")
    off = disabled_types(blueprint.config, env)
    if isinstance(kind, str) and kind in off:
        return _error(run, call, switched_off(kind, off[kind]))
    if not isinstance(kind, str) or kind not in types:
        return _error(
            run,
            call,
            f"unknown subagentType {kind!r}; available: {', '.join(sorted(types)) or 'none'}",
        )
    chosen = types[kind]
    # The entry's initUserMessageProperty / initAttachmentsProperty, else the tool's own.
    text_property = chosen.message_property or ("message" if creating else "description")
    text = args.get(text_property)
    attachments = _attachments(args, chosen.attachments_property or "attachments")
    if isinstance(attachments, str):
        return _error(run, call, attachments)
    if not isinstance(text, str) or not text.strip():
        return _error(run, call, f"{call.name} of {kind} needs a non-empty `{text_property}`")
    if creating and (not isinstance(name, str) or not name.strip()):
        return _error(run, call, "subagent_create needs a non-empty `name`")
    if creating and not chosen.resumable:
        return _error(run, call, f"{kind} is not resumable; use `task` for it")
    if not creating and chosen.resumable:
        return _error(run, call, f"{kind} is resumable; create it with subagent_create")
    if timeout is not None and (not isinstance(timeout, int) or timeout <= 0):
        return _error(run, call, "timeoutMs must be a positive integer")
    if missing := _missing_files(state, attachments):
        return _error(run, call, f"no such files to attach: {', '.join(missing)}")
    if creating and chosen.max_instances is not None:
        existing = [
            c
            for c in state.children
            if c.subagent_type == kind and c.resumable and not c.terminated
        ]
        if len(existing) >= chosen.max_instances:
            refs = ", ".join(f"{c.reference} ({c.name})" for c in existing)
            return _error(
                run,
                call,
                f"maxInstances of {chosen.max_instances} reached for {kind}; message an existing "
                f"instance with subagent_message instead: {refs}",
            )
    scoped, missing_env = scoped_values(state, chosen.scoped_env, env)
    if missing_env:
        held = EnvRequest(
            kind,
            chosen.scoped_env,
            missing_env,
            text,
            name if creating else None,
            attachments,
            chosen.blueprint,
        )
        return env_required(state, run, call, held, scoped, timeout)
    requested = SubagentRequested(
        run_id=run.run_id,
        tool_call_id=call.id,
        subagent_type=kind,
        description=text,
        timeout_ms=timeout,
        blocking=chosen.blocking,
        name=name if creating else None,
        resumable=chosen.resumable,
        attachments=attachments,
        sealed_env=seal(scoped),
        title=title.strip() or None if title else None,
        entry_description=about.strip() or None if about else None,
        spawn_group_id=spawn_group_id(run),
        parent_communication=chosen.parent_communication,
        blueprint=chosen.blueprint,
    )
    if chosen.blocking:
        return (requested,)
    return (requested, _started_answer(state, run, call, chosen.parent_communication))


def _message(
    state: ThreadState, run: RunView, call: ToolCall, blueprint: BlueprintSpec
) -> tuple[AnyEvent, ...]:
    args = call_arguments(call)
    reference, text = args.get("reference"), args.get("message")
    attachments = _attachments(args)
    if isinstance(attachments, str):
        return _error(run, call, attachments)
    child = state.child(reference) if isinstance(reference, str) else None
    if child is None or not child.resumable:
        known = ", ".join(f"{c.reference} ({c.name})" for c in state.children if c.resumable)
        return _error(run, call, f"no resumable subagent {reference!r}; known: {known or 'none'}")
    if child.terminated:
        return _error(run, call, f"subagent {child.reference} ({child.name}) is terminated")
    if not isinstance(text, str) or not text.strip():
        return _error(run, call, "subagent_message needs a non-empty `message`")
    off = disabled_types(blueprint.config, agent_env(blueprint))
    if child.subagent_type in off:
        return _error(run, call, switched_off(child.subagent_type, off[child.subagent_type]))
    if missing := _missing_files(state, attachments):
        return _error(run, call, f"no such files to attach: {', '.join(missing)}")
    messaged = SubagentMessaged(
        run_id=run.run_id,
        tool_call_id=call.id,
        child_thread_id=child.reference,
        message=text,
        blocking=child.blocking,
        attachments=attachments,
    )
    if child.blocking:
        return (messaged,)
    later = (
        "it reports to you only when it chooses to."
        if child.parent_communication == "explicit"
        else "its answer will arrive as a message."
    )
    answer = _output(run, call, f"Message sent to {child.reference}; {later}")
    return (messaged, answer)


def _terminate(state: ThreadState, run: RunView, call: ToolCall) -> tuple[AnyEvent, ...]:
    """`subagent_terminate`: a resumable child, by reference or name, is shut down (the
    coordinator has its runtime terminate it); the call is answered at once."""
    args = call_arguments(call)
    reference, name, reason = args.get("reference"), args.get("name"), args.get("reason", "")
    resumable = [c for c in state.children if c.resumable]
    child = next(
        (
            c
            for c in resumable
            if (isinstance(reference, str) and c.reference == reference)
            or (reference is None and isinstance(name, str) and c.name == name)
        ),
        None,
    )
    if child is None:
        known = ", ".join(f"{c.reference} ({c.name})" for c in resumable)
        asked = reference if reference is not None else name
        return _error(run, call, f"no resumable subagent {asked!r}; known: {known or 'none'}")
    if not isinstance(reason, str):
        return _error(run, call, "reason must be a string")
    if child.terminated:
        return _error(run, call, f"subagent {child.reference} ({child.name}) is terminated already")
    return (
        SubagentTerminateRequested(
            run_id=run.run_id,
            tool_call_id=call.id,
            child_thread_id=child.reference,
            reason=reason,
        ),
        _output(run, call, f"Subagent {child.reference} ({child.name}) is being terminated."),
    )


def agent_call(
    state: ThreadState, run: RunView, call: ToolCall, tool: AgentTool
) -> tuple[AnyEvent, ...]:
    """An exposed agent: a handoff on this thread, or a dual-AI session in a child."""
    args = call_arguments(call)
    # The target's initUserMessageProperty / initAttachmentsProperty (`message`,
    # `attachments` unless it names others).
    text = args.get(tool.message_property, "")
    attachments = _attachments(args, tool.attachments_property)
    if isinstance(attachments, str):
        return _error(run, call, attachments)
    if tool.handoff:
        reason = text if isinstance(text, str) else ""
        return (
            BlueprintSwitched(
                run_id=run.run_id,
                from_agent_type=state.agent_type,
                to_agent_type=tool.target,
                reason=reason,
            ),
            _output(run, call, f"Handed off to {tool.target}; it continues this conversation."),
        )
    if not isinstance(text, str) or not text.strip():
        return _error(run, call, f"{call.name} needs a non-empty `{tool.message_property}`")
    if missing := _missing_files(state, attachments):
        return _error(run, call, f"no such files to attach: {', '.join(missing)}")
    return (
        SubagentRequested(
            run_id=run.run_id,
            tool_call_id=call.id,
            subagent_type=tool.target,
            description=text,
            blocking=True,
            attachments=attachments,
        ),
    )
