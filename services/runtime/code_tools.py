"""`ctx.tools` of a code agent: state tools and tools declared local run in the runtime,
other external tools through the tools service, each call with the usual tool events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agency.contracts.events import (
    AnyEvent,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.limits import limits, truncate_text
from agency.domain.thread_state import ThreadState
from agency.services.agents.code import ToolCallError
from agency.services.agents.tools import StateTool, Tool, ToolSpec
from agency.services.runtime.code_emitter import Emitter
from agency.services.runtime.local_tools import run_local
from agency.services.threads.view import thread_view

# How long past its own timeout and retries an external tool's result may take to arrive.
_TOOL_MARGIN_SECONDS = 30.0


class Tools:
    """The tools of the agent's tags: internal (state) tools run here, in the runtime;
    external tools through the tools service. Each call makes the usual tool events."""

    def __init__(
        self,
        emitter: Emitter,
        reload: Callable[[ThreadState], Awaitable[ThreadState]],
        tools: Mapping[str, Tool | StateTool],
    ) -> None:
        self._emitter = emitter
        self._reload = reload
        self._tools = dict(tools)
        self._calls = 0

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def specs_of(self, wanted: bool | Sequence[str]) -> tuple[ToolSpec, ...]:
        if wanted is True:
            return self.specs
        if not wanted:
            return ()
        return tuple(self._tools[n].spec for n in wanted if n in self._tools)

    async def call(self, name: str, args: Mapping[str, Any] | None = None) -> str:
        """Run a tool; its output, or `ToolCallError` with its error."""
        emitter = self._emitter
        run_id = emitter.run_id
        self._calls += 1
        arguments = json.dumps(dict(args or {}), ensure_ascii=False, default=str)
        call = ToolCall(id=f"call_{self._calls}_{run_id}", name=name, arguments=arguments)
        tool = self._tools.get(name)
        if tool is None:
            error = f"unknown tool {name!r}; available: {', '.join(self.names) or 'none'}"
            await emitter.emit(
                [ToolError(run_id=run_id, tool_call_id=call.id, tool_name=name, error=error)]
            )
            raise ToolCallError(error)
        if isinstance(tool, StateTool):
            return await self._state_tool(tool, call, dict(args or {}))
        if tool.local and tool.isolation is None and tool.mcp is None and tool.remote_agent is None:
            return await self._local(tool, call)
        return await self._external(tool, call)

    async def _state_tool(self, tool: StateTool, call: ToolCall, args: dict[str, Any]) -> str:
        emitter = self._emitter
        run_id = emitter.run_id
        state = await emitter.emit()
        recorded = emitter.recorded_tool(call.id)
        if recorded is not None:  # a resumed handler: the record holds this call
            if isinstance(recorded, ToolError):
                raise ToolCallError(recorded.error)
            return recorded.output
        outcome = tool.fn(args, thread_view(state), run_id)
        output = truncate_text(outcome.output, limits().max_tool_output_bytes)
        started = ToolStarted(
            run_id=run_id, tool_call_id=call.id, tool_name=call.name, arguments=call.arguments
        )
        result: AnyEvent = (
            ToolError(run_id=run_id, tool_call_id=call.id, tool_name=call.name, error=output)
            if outcome.error
            else ToolOutput(run_id=run_id, tool_call_id=call.id, tool_name=call.name, output=output)
        )
        await emitter.emit([started, *outcome.events, result])
        if outcome.error:
            raise ToolCallError(output)
        return output

    async def _local(self, tool: Tool, call: ToolCall) -> str:
        """A tool declared local, run here like the agent loop runs one
        (`services/runtime/local_tools.py`); a resumed handler takes the recorded result."""
        emitter = self._emitter
        state = await emitter.emit()
        result: AnyEvent | None = emitter.recorded_tool(call.id)
        if result is None:
            request = ToolRequested(run_id=emitter.run_id, step=1, call=call)
            events = await run_local(state, request, tool)
            await emitter.emit(events)
            result = events[-1]
        if isinstance(result, ToolError):
            raise ToolCallError(result.error)
        assert isinstance(result, ToolOutput)
        return result.output

    async def _external(self, tool: Tool, call: ToolCall) -> str:
        emitter = self._emitter
        requested = ToolRequested(
            run_id=emitter.run_id,
            step=1,
            call=call,
            timeout_ms=int(tool.timeout * 1000),
            max_attempts=tool.max_attempts,
            mcp=tool.mcp,
            remote_agent=tool.remote_agent,
        )
        state = await emitter.emit([requested])
        bound = tool.timeout * tool.max_attempts + _TOOL_MARGIN_SECONDS
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        wait = 0.02
        while (outcome := state.outcome(call.id)) is None:
            if loop.time() > deadline:
                raise ToolCallError(f"tool {call.name!r} gave no result within {bound:.0f} s")
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.5)
            state = await self._reload(emitter.state)
            emitter.state = state
            run = state.run(emitter.run_id)
            if run is None or run.status != "running":
                emitter.aborted.set()
                raise asyncio.CancelledError
        if outcome.error:
            raise ToolCallError(outcome.output)
        return outcome.output
