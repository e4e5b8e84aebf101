"""What the loop does next for a thread: a pure function of its state.

`next_action` never performs I/O. It answers with events to append (starting a queued run,
resolving tool calls, handing a dual-AI turn over, finishing a run), a model call to make,
or nothing to do until another event arrives. Each call resolves at most one tool that
changes the thread's own state, so a later one sees what an earlier one wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agency.contracts.events import (
    AgentCompleted,
    AnyEvent,
    BlueprintSpec,
    BlueprintSwitched,
    FileWritten,
    MessageAppended,
    RequestInjected,
    RunCompleted,
    RunPaused,
    RunResumed,
    RunStarted,
    SessionTurn,
    SubagentMessaged,
    SubagentRequested,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.limits import limits, truncate_text
from agency.domain.run_cancel import tool_message
from agency.domain.thread_state import QueuedRequest, RunView, ThreadState
from agency.services.agents.tools import AgentTool, SessionTool, StateTool, SubagentTool, Tool
from agency.services.runtime.immediate import immediate_bootstrap
from agency.services.runtime.session import end_turn, session_call, turn_over
from agency.services.runtime.spawn import agent_call, subagent_call
from agency.services.threads.view import thread_view
from agency.services.tool_execution.registered import AnyTool

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


def max_steps_of(blueprint: BlueprintSpec) -> int:
    return blueprint.config.max_steps or DEFAULT_MAX_STEPS


def next_action(
    state: ThreadState, blueprint: BlueprintSpec, tools: Mapping[str, AnyTool]
) -> Action:
    run = state.active_run
    if run is None:
        if state.queue and not state.terminated:
            switched = _switch(state, state.queue[0])
            # The blueprint switch first: the run starts as the blueprint it names.
            return Append(switched) if switched else Append(_start(state, blueprint))
        return Wait()
    if run.status == "paused" and run.reason == "exhausted":
        # Out of steps: the next request (whatever its strategy) continues the run, with
        # another blueprint's worth of steps; one of another blueprint waits for its end.
        joining = _of_blueprint(state, state.queue)
        if not joining:
            return Wait()
        resumed = RunResumed(run_id=run.run_id, max_steps=run.step + max_steps_of(blueprint))
        return Append((*inject(run.run_id, joining), resumed))
    if run.status == "paused" and run.reason == "hitl" and not run.hitl_pending:
        # A person has decided: resume here, where middleware sees the resume.
        return Append((RunResumed(run_id=run.run_id),))
    if run.status == "paused" and run.reason == "breakpoint" and not run.at_breakpoint:
        # Approved at a breakpoint: the model call it paused before goes ahead.
        return Append((RunResumed(run_id=run.run_id),))
    if run.status == "paused" and run.reason == "subagent":
        # Resume once every child of the step has reported (its report is the call's outcome).
        waiting = [c for c in state.open_tool_calls() if state.outcome(c.id) is None]
        return Append((RunResumed(run_id=run.run_id),)) if not waiting else Wait()
    if run.status != "running":
        return Wait()
    dual = blueprint.type == "dual_ai"
    if dual and state.side is None:
        return Append((SessionTurn(run_id=run.run_id, side="A", turn=1),))
    calls = state.open_tool_calls()
    if calls:
        return _resolve_calls(state, run, calls, tools, blueprint)
    if run.held_messages:
        # What an approval added to the state: after the step's tool results.
        held = run.held_messages
        return Append(tuple(MessageAppended(run_id=run.run_id, message=m) for m in held))
    bootstrap = immediate_bootstrap(state, run, blueprint, frozenset(tools))
    if bootstrap:
        # The prompt just became active: its immediate subagents go before its first step.
        return Append(bootstrap)
    if dual:
        if turn_over(state, blueprint):
            return Append(end_turn(state, run, blueprint))
    else:
        last = state.messages[-1] if state.messages else None
        if run.step > 0 and last is not None and last.role == "assistant" and not last.tool_calls:
            return Append(
                (
                    AgentCompleted(run_id=run.run_id, result=last.content),
                    RunCompleted(run_id=run.run_id, result=last.content),
                )
            )
    if run.step >= run.max_steps:
        return Append((RunPaused(run_id=run.run_id, reason="exhausted"),))
    joining = injectable(state) if run.step > 0 else ()
    if joining:
        # Messages queued while the run executes join it before its next model step.
        return Append(inject(run.run_id, joining))
    if breakpoint_before_model(state, run):
        return Append((RunPaused(run_id=run.run_id, reason="breakpoint"),))
    return CallModel(run_id=run.run_id, step=run.step + 1)


def breakpoint_before_model(state: ThreadState, run: RunView) -> bool:
    """The run pauses before its next model call: its invoke asked for a pause before every
    model call (`pause_before_model`), or before each that follows a tool step's results
    (`pause_after_tools`: the last answer had tool calls), and no approval let this call
    through yet."""
    if run.breakpoint_passed == run.step + 1:
        return False
    if run.pause_before_model:
        return True
    last = state.last_assistant()
    return run.pause_after_tools and run.step > 0 and last is not None and bool(last.tool_calls)


def injectable(state: ThreadState) -> tuple[QueuedRequest, ...]:
    """The queued requests (strategy `queue`) at the head of the queue, in order: those an
    executing run (one that has made a model call) takes up before its next model step. A
    request queued before the run's first call, or behind an `after` one, waits its turn."""
    taken: list[QueuedRequest] = []
    for queued in state.queue:
        if queued.strategy != "queue":
            break
        taken.append(queued)
    return _of_blueprint(state, tuple(taken))


def _of_blueprint(
    state: ThreadState, requests: tuple[QueuedRequest, ...]
) -> tuple[QueuedRequest, ...]:
    """The leading requests that may join the active run: none of another blueprint (its
    run starts as that blueprint once the active run ends), nor any behind it."""
    taken: list[QueuedRequest] = []
    for queued in requests:
        if queued.agent_type is not None and queued.agent_type != state.agent_type:
            break
        taken.append(queued)
    return tuple(taken)


def _switch(state: ThreadState, head: QueuedRequest) -> tuple[AnyEvent, ...]:
    """The switch to the blueprint the queued request runs as, if the thread runs another."""
    if head.agent_type is None or head.agent_type == state.agent_type:
        return ()
    return (
        BlueprintSwitched(
            run_id=head.run_id,
            from_agent_type=state.agent_type,
            to_agent_type=head.agent_type,
            reason="a run of this blueprint was queued and starts now",
        ),
    )


def inject(run_id: str, requests: tuple[QueuedRequest, ...]) -> tuple[AnyEvent, ...]:
    """Each request joins `run_id`: `request.injected`, then its files and messages."""
    events: list[AnyEvent] = []
    for request in requests:
        events.append(
            RequestInjected(
                run_id=run_id,
                request_run_id=request.run_id,
                idempotency_key=request.idempotency_key,
            )
        )
        events.extend(
            FileWritten(run_id=run_id, path=p, content=c, origin="attachment")
            for p, c in request.files
        )
        events.extend(MessageAppended(run_id=run_id, message=m) for m in request.messages)
    return tuple(events)


def _start(state: ThreadState, blueprint: BlueprintSpec) -> tuple[AnyEvent, ...]:
    head = state.queue[0]
    events: list[AnyEvent] = [
        RunStarted(
            run_id=head.run_id, agent_type=state.agent_type, max_steps=max_steps_of(blueprint)
        )
    ]
    events.extend(
        FileWritten(run_id=head.run_id, path=p, content=c, origin="attachment")
        for p, c in head.files
    )
    events.extend(MessageAppended(run_id=head.run_id, message=m) for m in head.messages)
    return tuple(events)


def _resolve_calls(
    state: ThreadState,
    run: RunView,
    calls: tuple[ToolCall, ...],
    tools: Mapping[str, AnyTool],
    blueprint: BlueprintSpec,
) -> Action:
    overrides = dict(run.hitl_overrides)
    events: list[AnyEvent] = []
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
        if tool is None and run.client_tool(effective.name):
            continue  # the client answers it, in its next request
        local = _local_call(state, run, effective, tool, blueprint)
        if local is not None:
            if events:
                break  # append what is decided first; this call then sees it
            return Append(local)
        if isinstance(tool, SubagentTool):
            events.extend(subagent_call(state, run, effective, blueprint))
            continue
        if isinstance(tool, AgentTool) and not tool.handoff:
            events.extend(agent_call(state, run, effective, tool))
            continue
        if not isinstance(tool, Tool):
            available = ", ".join(sorted(tools)) or "none"
            error = f"unknown tool {effective.name!r}; available: {available}"
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
                mcp=tool.mcp,
                remote_agent=tool.remote_agent,
            )
        )
    if any(isinstance(e, SubagentRequested | SubagentMessaged) and e.blocking for e in events):
        events.append(RunPaused(run_id=run.run_id, reason="subagent"))
    if not events and all(run.client_tool(c.name) and c.name not in tools for c in calls):
        # Only the client's calls are left: the run ends, and its client answers them.
        return Append((AgentCompleted(run_id=run.run_id), RunCompleted(run_id=run.run_id)))
    return Append(tuple(events)) if events else Wait()


def _local_call(
    state: ThreadState,
    run: RunView,
    call: ToolCall,
    tool: AnyTool | None,
    blueprint: BlueprintSpec,
) -> tuple[AnyEvent, ...] | None:
    """Calls the runtime answers itself, one at a time: state tools, session tools, handoffs."""
    if isinstance(tool, StateTool):
        return _run_state_tool(state, run, call, tool)
    if isinstance(tool, SessionTool):
        return session_call(state, run, call, tool, blueprint)
    if isinstance(tool, AgentTool) and tool.handoff:
        return agent_call(state, run, call, tool)
    return None


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
        outcome = tool.fn(args, thread_view(state), run.run_id)
        outcome_events, output, failed = outcome.events, outcome.output, outcome.error
    output = truncate_text(output, limits().max_tool_output_bytes)
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
