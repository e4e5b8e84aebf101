"""What a code agent's `on_message` gets as `ctx`: model access, tools, state, the reply
and the abort signal, each acting through the thread's events.

Every effect is an append after the thread's position (`Emitter`), in the order the agent
made it; reply text is buffered and appended at most every 50 ms. An append that finds the
run no longer running (a cancel got there first) aborts the agent: `ctx.aborted` turns
true and the agent's task is cancelled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import structlog
from opentelemetry import trace

from contracts.events import (
    AgentError,
    AgentStateSet,
    AnyEvent,
    ChatMessage,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    ReplyAction,
    ReplyDelta,
    ReplyThinking,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from contracts.limits import limits, truncate_text
from services.agents.code import ToolCallError
from services.agents.tools import StateTool, Tool, ToolSpec
from services.llm.provider import ModelError, ModelRequest, ModelResponse, Provider
from services.runtime.failures import fit_message
from services.runtime.state import ThreadState

if TYPE_CHECKING:
    from services.runtime.loop import ThreadDriver

tracer = trace.get_tracer(__name__)

FLUSH_SECONDS = 0.05
_CONFLICT_ATTEMPTS = 100
# How long past its own timeout and retries an external tool's result may take to arrive.
_TOOL_MARGIN_SECONDS = 30.0


class Emitter:
    """Appends one code run's events in order; reply events wait in `pending` for the next
    append (or the periodic flush)."""

    def __init__(self, driver: ThreadDriver, state: ThreadState, run_id: str) -> None:
        self._driver = driver
        self.state = state
        self.run_id = run_id
        self.pending: list[AnyEvent] = []
        self.aborted = asyncio.Event()
        self._lock = asyncio.Lock()

    def queue(self, event: AnyEvent) -> None:
        last = self.pending[-1] if self.pending else None
        if isinstance(event, ReplyDelta) and isinstance(last, ReplyDelta):
            self.pending[-1] = ReplyDelta(run_id=self.run_id, text=last.text + event.text)
        else:
            self.pending.append(event)

    async def emit(self, events: Sequence[AnyEvent] = ()) -> ThreadState:
        """Append what is pending and `events`. Raises `CancelledError` (after setting
        `aborted`) when the run stopped running meanwhile."""
        async with self._lock:
            if self.aborted.is_set():
                raise asyncio.CancelledError
            batch = [*self.pending, *events]
            self.pending = []
            if not batch:
                return self.state
            for _ in range(_CONFLICT_ATTEMPTS):
                state, appended = await self._driver.append(self.state, batch)
                self.state = state
                if appended:
                    return state
                run = state.run(self.run_id)
                if run is None or run.status != "running":
                    self.aborted.set()
                    raise asyncio.CancelledError
            raise RuntimeError(f"run {self.run_id}: could not append after repeated conflicts")


@dataclass
class Reply:
    """The agent's reply, streamed as `reply.*` events; its text is the run's result."""

    _emitter: Emitter
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def write(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self._emitter.queue(ReplyDelta(run_id=self._emitter.run_id, text=text))

    def thinking(self, text: str) -> None:
        if text:
            self._emitter.queue(ReplyThinking(run_id=self._emitter.run_id, text=text))

    def action(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        arguments = json.dumps(dict(args or {}), ensure_ascii=False, default=str)
        self._emitter.queue(
            ReplyAction(run_id=self._emitter.run_id, name=name, arguments=arguments)
        )


MessageLike = ChatMessage | Mapping[str, Any]


def _message(value: MessageLike) -> ChatMessage:
    if isinstance(value, ChatMessage):
        return value
    return msgspec.convert(dict(value), ChatMessage)


class Ai:
    """Model calls through the runtime's provider, each recorded as `model.started`,
    `model.delta`s and `model.completed` (or `agent.error` when the call fails)."""

    def __init__(
        self,
        emitter: Emitter,
        provider: Provider,
        model: str,
        default_messages: Callable[[], list[ChatMessage]],
        tools: Tools,
    ) -> None:
        self._emitter = emitter
        self._provider = provider
        self._model = model
        self._default_messages = default_messages
        self._tools = tools
        self.calls = 0

    def _request(
        self,
        prompt: str | None,
        messages: Sequence[MessageLike] | None,
        system: str | None,
        model: str | None,
        tools: bool | Sequence[str],
    ) -> ModelRequest:
        if messages is not None:
            chat = [_message(m) for m in messages]
        elif prompt is not None:
            chat = [ChatMessage(role="user", content=prompt)]
        else:
            chat = self._default_messages()
        if system:
            chat = [ChatMessage(role="system", content=system), *chat]
        specs = self._tools.specs_of(tools)
        return ModelRequest(model=model or self._model, messages=tuple(chat), tools=specs)

    async def complete(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        model: str | None = None,
        tools: bool | Sequence[str] = False,
        on_delta: Callable[[str], Awaitable[None]] | None = None,
    ) -> ChatMessage:
        """One model call; the whole answer (text and any tool calls the model made).
        `prompt` alone is one user message; neither it nor `messages`: the conversation
        and the incoming message. `tools=True` offers every tool of `ctx.tools`, a list
        the ones named."""
        request = self._request(prompt, messages, system, model, tools)
        response = await self._call(request, on_delta)
        return response.message

    async def generate(self, prompt: str | None = None, **options: Any) -> str:
        """The text of one model call (see `complete`)."""
        return (await self.complete(prompt, **options)).content

    async def stream(self, prompt: str | None = None, **options: Any) -> AsyncIterator[str]:
        """The text of one model call as it arrives (see `complete`)."""
        deltas: asyncio.Queue[str | None] = asyncio.Queue()

        async def on_delta(text: str) -> None:
            deltas.put_nowait(text)

        task = asyncio.ensure_future(self.complete(prompt, on_delta=on_delta, **options))
        task.add_done_callback(lambda _: deltas.put_nowait(None))
        shown = ""
        try:
            while (text := await deltas.get()) is not None:
                shown += text
                yield text
            answer = task.result().content
            if answer.startswith(shown) and len(answer) > len(shown):
                # An answer complete within the first coalescing window has no delta.
                yield answer[len(shown) :]
        finally:
            if not task.done():
                task.cancel()

    async def _call(
        self, request: ModelRequest, on_delta: Callable[[str], Awaitable[None]] | None
    ) -> ModelResponse:
        emitter = self._emitter
        run_id = emitter.run_id
        self.calls += 1
        step = self.calls
        await emitter.emit(
            [
                ModelStarted(
                    run_id=run_id,
                    step=step,
                    model=request.model,
                    message_count=len(request.messages),
                )
            ]
        )
        room = [limits().max_message_bytes]

        async def deltas(text: str) -> None:
            text = text[: room[0]]
            if not text:
                return
            room[0] -= len(text)
            await emitter.emit([ModelDelta(run_id=run_id, step=step, delta=text)])
            if on_delta is not None:
                await on_delta(text)

        try:
            with tracer.start_as_current_span(
                f"model {request.model}", kind=trace.SpanKind.CLIENT
            ) as span:
                span.set_attribute("agency.run_id", run_id)
                span.set_attribute("agency.step", step)
                response = await self._provider.complete(request, deltas)
        except ModelError as e:
            await emitter.emit([AgentError(run_id=run_id, error=str(e), retryable=e.retryable)])
            raise
        message = fit_message(response.message)
        await emitter.emit(
            [
                ModelCompleted(
                    run_id=run_id,
                    step=step,
                    model=response.model or request.model,
                    message=message,
                    usage=response.usage,
                    finish_reason=response.finish_reason,
                    cost_usd=response.cost_usd,
                )
            ]
        )
        return ModelResponse(
            message=message,
            usage=response.usage,
            finish_reason=response.finish_reason,
            model=response.model,
            cost_usd=response.cost_usd,
        )


class Tools:
    """The tools of the agent's tags: internal (state) tools run here, in the runtime;
    external tools through the tools service. Each call makes the usual tool events."""

    def __init__(
        self, emitter: Emitter, driver: ThreadDriver, tools: Mapping[str, Tool | StateTool]
    ) -> None:
        self._emitter = emitter
        self._driver = driver
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
        return await self._external(tool, call)

    async def _state_tool(self, tool: StateTool, call: ToolCall, args: dict[str, Any]) -> str:
        emitter = self._emitter
        run_id = emitter.run_id
        state = await emitter.emit()
        outcome = tool.fn(args, state, run_id)
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

    async def _external(self, tool: Tool, call: ToolCall) -> str:
        emitter = self._emitter
        requested = ToolRequested(
            run_id=emitter.run_id,
            step=1,
            call=call,
            timeout_ms=int(tool.timeout * 1000),
            max_attempts=tool.max_attempts,
            mcp=tool.mcp,
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
            state = await self._driver.reload(emitter.state)
            emitter.state = state
            run = state.run(emitter.run_id)
            if run is None or run.status != "running":
                emitter.aborted.set()
                raise asyncio.CancelledError
        if outcome.error:
            raise ToolCallError(outcome.output)
        return outcome.output


@dataclass
class AgentContext:
    """`ctx` of `CodeAgent.on_message`."""

    thread_id: str
    run_id: str
    agent_type: str
    settings: Any
    conversation: tuple[ChatMessage, ...]
    ai: Ai
    tools: Tools
    reply: Reply
    _emitter: Emitter

    @property
    def state(self) -> Any:
        """The agent's state: the last value given to `set_state` on this thread."""
        return self._emitter.state.agent_state

    async def set_state(self, value: Any) -> None:
        """Replace the agent's state (any JSON value), recorded as `agent.state_set`."""
        value = msgspec.to_builtins(value)
        await self._emitter.emit([AgentStateSet(run_id=self.run_id, value=value)])

    @property
    def log(self) -> Any:
        """A structlog logger bound to the thread and run."""
        return structlog.get_logger("agency.code_agent").bind(
            agent_type=self.agent_type, thread_id=self.thread_id, run_id=self.run_id
        )

    @property
    def aborted(self) -> bool:
        """True once the run was canceled or its drive stopped (shutdown, a lost lease):
        the agent's task is then cancelled."""
        return self._emitter.aborted.is_set()

    @property
    def abort_signal(self) -> asyncio.Event:
        return self._emitter.aborted
