"""Tools declared local (`define_tool(..., local=True)`) run here, in the runtime worker.

A local tool is pure, fast, in-process and safe to run again: its author declares that it
changes nothing outside the run. The loop decides tool calls as always (`next_action`
gives a `tool.requested` per external call); before those are appended, the requests of
local tools are run right here, each under a short timeout, and replaced by what the tools
service would have appended for them: `tool.started` (attempt 1) and one `tool.output` or
`tool.error`, same payloads, same texts (the tools service's `execute` makes them). The
loop then answers the call with its tool message and goes on to the next model call in
the same append, without a trip through the tools service and back.

The `tool.requested` itself is not appended for a local call: it is the tools service's
work order, read by no projection, and appending it would hand the service a delivery to
dismiss. The log of a local call reads like a state tool's (started, result, message).

Nothing is appended while a local tool runs, so a worker killed meanwhile leaves the call
open and the next drive runs it again: that is why a local tool must be safe to repeat.

The result is a trigger like any (`runtime-triggers` consumes tool results); the worker
that receives it does not drive the thread for it (`is_own_result`): the drive that
appended it went on deciding after it.

Never local, whatever the declaration: an isolated tool (it runs in a sandbox), an MCP
server's tool, and a call that needs a person's approval (the blueprint's `hitl.tools`,
a call of a run whose invoke pauses before every tool call, or a call a person modified).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from agency.contracts.events import (
    TOOL_RESULT_TYPES,
    AnyEvent,
    BlueprintSpec,
    ToolRequested,
    ToolStarted,
)
from agency.domain.thread_state import RunView, ThreadState
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.builtin.hitl import guarded_tools
from agency.services.agents.tools import Tool, ToolContext
from agency.services.tool_execution.executor import execute
from agency.services.tool_execution.registered import AnyTool

# Seconds a local tool's call may take, at most (a tool's own shorter `timeout` wins). The
# worker holds the thread's lease meanwhile: a tool that needs longer is not local.
LOCAL_TOOL_TIMEOUT = 2.0


def local_tool(
    tool: AnyTool | None, request: ToolRequested, run: RunView, blueprint: BlueprintSpec
) -> Tool | None:
    """The tool when the runtime may run this request itself, else None."""
    if not isinstance(tool, Tool) or not tool.local:
        return None
    if tool.isolation is not None or tool.mcp is not None or request.mcp is not None:
        return None
    if tool.remote_agent is not None or request.remote_agent is not None:
        return None
    call = request.call
    if call.name in guarded_tools(blueprint.config) or call.id in dict(run.hitl_overrides):
        return None
    if run.pause_before_tools:
        return None
    return tool


async def run_local_calls(
    state: ThreadState,
    blueprint: BlueprintSpec,
    tools: Mapping[str, AnyTool],
    events: Sequence[AnyEvent],
) -> Sequence[AnyEvent]:
    """`events` with each request of a local tool replaced by its run's events (the calls
    run side by side); every other event as it was. A tool's failure is its `tool.error`;
    only what is no `Exception` (a cancel) goes through."""
    run = state.active_run
    if run is None:
        return events
    local: dict[int, tuple[ToolRequested, Tool]] = {}
    for index, event in enumerate(events):
        if isinstance(event, ToolRequested):
            tool = local_tool(tools.get(event.call.name), event, run, blueprint)
            if tool is not None:
                local[index] = (event, tool)
    if not local:
        return events
    ran = await asyncio.gather(
        *(run_local(state, request, tool) for request, tool in local.values())
    )
    outcomes = dict(zip(local, ran, strict=True))
    answered: list[AnyEvent] = []
    for index, event in enumerate(events):
        answered.extend(outcomes.get(index, (event,)))
    return answered


async def run_local(state: ThreadState, request: ToolRequested, tool: Tool) -> tuple[AnyEvent, ...]:
    """One call of a local tool: its `tool.started` and its result event. A tool that
    raises or outlasts its timeout gives a `tool.error` naming why; it is tried once."""
    bounded = ToolRequested(
        run_id=request.run_id,
        step=request.step,
        call=request.call,
        timeout_ms=int(min(tool.timeout, LOCAL_TOOL_TIMEOUT) * 1000),
        max_attempts=1,
    )
    context = ToolContext.of_request(state.tenant_id, state.agency_id, state.thread_id, request)
    started: list[ToolStarted] = []

    async def on_attempt(event: ToolStarted) -> None:
        started.append(event)

    result = await execute(bounded, tool, context, on_attempt=on_attempt, backoff=())
    return (*started, result)


def is_own_result(event: RecordedEvent) -> bool:
    """A `tool.output` / `tool.error` a runtime drive appended (a local or state tool's, an
    unknown tool's): it carries neither an idempotency key nor a causation, which every
    writer outside the runtime stamps (the tools service, a fork's copies; see
    `services/runtime/replay/recorded.py`). Such a result wakes nobody: the drive that appended it
    decided on from there, and had it died, the trigger or command that started it (or the
    watchdog) drives the thread again."""
    env = event.envelope
    return (
        env.type in TOOL_RESULT_TYPES and env.idempotency_key is None and env.causation_id is None
    )
