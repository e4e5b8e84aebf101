"""What the loop does next for a thread: a pure function of its state.

`next_action` never performs I/O. It answers with events to append (starting a queued run,
resolving tool calls, finishing a run), a model call to make, or nothing to do until
another event arrives. Each call resolves at most one state tool, so a later state tool
sees the files and todos an earlier one wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.events import (
    AgentCompleted,
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    FileWritten,
    MessageAppended,
    RunCompleted,
    RunError,
    RunPaused,
    RunResumed,
    RunStarted,
    SubagentRequested,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from services.agents.builtin.subagents import subagent_types
from services.agents.tools import StateTool, SubagentTool, Tool
from services.runtime.state import RunView, ThreadState
from services.subagents.naming import child_thread_id

DEFAULT_MAX_STEPS = 25
REJECTED_BY_HUMAN = "The user rejected this tool call; it was not run."


@dataclass(frozen=True, slots=True)
class Append:
    events: tuple[AnyEvent, ...]


@dataclass(frozen=True, slots=True)
class CallModel:
    run_id: str
    step: int


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do until another event (a tool result, an approval) arrives."""


Action = Append | CallModel | Wait

AnyTool = Tool | StateTool | SubagentTool


def max_steps_of(blueprint: BlueprintSpec) -> int:
    value = blueprint.config.get("maxSteps", DEFAULT_MAX_STEPS)
    return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_STEPS


def next_action(
    state: ThreadState, blueprint: BlueprintSpec, tools: Mapping[str, AnyTool]
) -> Action:
    run = state.active_run
    if run is None:
        if state.queue:
            return Append(_start(state, blueprint))
        return Wait()
    if run.status == "paused" and run.reason == "subagent":
        # Resume once every child of the step has reported (its report is the call's outcome).
        waiting = [c for c in state.open_tool_calls() if state.outcome(c.id) is None]
        return Append((RunResumed(run_id=run.run_id),)) if not waiting else Wait()
    if run.status != "running":
        return Wait()
    calls = state.open_tool_calls()
    if calls:
        return _resolve_calls(state, run, calls, offered_tools(blueprint, tools), blueprint)
    last = state.messages[-1] if state.messages else None
    if run.step > 0 and last is not None and last.role == "assistant" and not last.tool_calls:
        return Append(
            (
                AgentCompleted(run_id=run.run_id, result=last.content),
                RunCompleted(run_id=run.run_id, result=last.content),
            )
        )
    if run.step >= run.max_steps:
        return Append(
            (
                RunError(
                    run_id=run.run_id,
                    error=f"the run reached its step limit of {run.max_steps} without finishing",
                    kind="step_limit",
                ),
            )
        )
    return CallModel(run_id=run.run_id, step=run.step + 1)


def _start(state: ThreadState, blueprint: BlueprintSpec) -> tuple[AnyEvent, ...]:
    head = state.queue[0]
    events: list[AnyEvent] = [
        RunStarted(
            run_id=head.run_id, agent_type=state.agent_type, max_steps=max_steps_of(blueprint)
        )
    ]
    events.extend(FileWritten(run_id=head.run_id, path=p, content=c) for p, c in head.files)
    events.extend(MessageAppended(run_id=head.run_id, message=m) for m in head.messages)
    return tuple(events)


def tool_message(call: ToolCall, content: str) -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)


def offered_tools(blueprint: BlueprintSpec, tools: Mapping[str, AnyTool]) -> dict[str, AnyTool]:
    """The tools the model is told about: `task` only when the blueprint names subagents."""
    has_types = bool(subagent_types(blueprint.config))
    return {n: t for n, t in tools.items() if has_types or not isinstance(t, SubagentTool)}


def _resolve_calls(
    state: ThreadState,
    run: RunView,
    calls: tuple[ToolCall, ...],
    tools: Mapping[str, AnyTool],
    blueprint: BlueprintSpec,
) -> Action:
    overrides = dict(run.hitl_overrides)
    events: list[AnyEvent] = []
    blocking_spawned = False
    for call in calls:
        if call.id in run.hitl_rejected:
            events.append(
                MessageAppended(run_id=run.run_id, message=tool_message(call, REJECTED_BY_HUMAN))
            )
            continue
        outcome = state.outcome(call.id)
        if outcome is not None:
            events.append(
                MessageAppended(run_id=run.run_id, message=tool_message(call, outcome.output))
            )
            continue
        if call.id in state.requested:
            continue
        effective = overrides.get(call.id, call)
        tool = tools.get(effective.name)
        if isinstance(tool, StateTool):
            if events:
                break  # append what is decided first; the state tool then sees it
            return Append(_run_state_tool(state, run, effective, tool))
        if isinstance(tool, SubagentTool):
            spawn = _spawn(state, run, effective, blueprint)
            events.extend(spawn)
            blocking_spawned |= any(isinstance(e, SubagentRequested) and e.blocking for e in spawn)
            continue
        if tool is None:
            error = (
                f"unknown tool {effective.name!r}; available: {', '.join(sorted(tools)) or 'none'}"
            )
            events.append(
                ToolError(
                    run_id=run.run_id, tool_call_id=call.id, tool_name=effective.name, error=error
                )
            )
            continue
        events.append(
            ToolRequested(
                run_id=run.run_id,
                step=run.step,
                call=effective,
                timeout_ms=int(tool.timeout * 1000),
                max_attempts=tool.max_attempts,
            )
        )
    if blocking_spawned:
        events.append(RunPaused(run_id=run.run_id, reason="subagent"))
    return Append(tuple(events)) if events else Wait()


def _spawn(
    state: ThreadState, run: RunView, call: ToolCall, blueprint: BlueprintSpec
) -> tuple[AnyEvent, ...]:
    """A `task` call: ask the coordinator for a child, or answer why not."""
    types = subagent_types(blueprint.config)
    try:
        args: Any = json.loads(call.arguments or "{}")
    except ValueError:
        args = None
    description = args.get("description") if isinstance(args, dict) else None
    kind = args.get("subagentType") if isinstance(args, dict) else None
    timeout = args.get("timeoutMs") if isinstance(args, dict) else None
    problem = None
    if not isinstance(description, str) or not description.strip():
        problem = "task needs a non-empty `description`"
    elif not isinstance(kind, str) or kind not in types:
        problem = f"unknown subagentType {kind!r}; available: {', '.join(sorted(types)) or 'none'}"
    elif timeout is not None and (not isinstance(timeout, int) or timeout <= 0):
        problem = "timeoutMs must be a positive integer"
    if problem is not None:
        return (
            ToolError(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, error=problem),
        )
    assert isinstance(kind, str) and isinstance(description, str)
    blocking = types[kind].blocking
    requested = SubagentRequested(
        run_id=run.run_id,
        tool_call_id=call.id,
        subagent_type=kind,
        description=description,
        timeout_ms=timeout,
        blocking=blocking,
    )
    if blocking:
        return (requested,)
    child = child_thread_id(state.tenant_id, state.thread_id, call.id)
    answer = (
        f"Subagent started (reference: {child}). Continue; its result will arrive as a "
        "message when it is done."
    )
    return (
        requested,
        ToolOutput(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, output=answer),
    )


def _run_state_tool(
    state: ThreadState, run: RunView, call: ToolCall, tool: StateTool
) -> tuple[AnyEvent, ...]:
    started = ToolStarted(
        run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, arguments=call.arguments
    )
    problem: str | None
    try:
        args: Any = json.loads(call.arguments or "{}")
    except ValueError as e:
        args, problem = None, f"arguments are not valid JSON: {e}"
    else:
        problem = None if isinstance(args, dict) else "arguments must be a JSON object"
    if problem is not None:
        outcome_events: tuple[AnyEvent, ...] = ()
        output, failed = problem, True
    else:
        outcome = tool.fn(args, state, run.run_id)
        outcome_events, output, failed = outcome.events, outcome.output, outcome.error
    result: AnyEvent = (
        ToolError(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, error=output)
        if failed
        else ToolOutput(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, output=output)
    )
    return (
        started,
        *outcome_events,
        result,
        MessageAppended(run_id=run.run_id, message=tool_message(call, output)),
    )
