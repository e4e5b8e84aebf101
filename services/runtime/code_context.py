"""What a code agent's `on_message` gets as `ctx` in the runtime (the type an agent sees is
`services.agents.AgentContext`): model access, tools, state, the reply and the abort
signal, each acting through the thread's events.

Every effect is an append after the thread's position (`Emitter`), in the order the agent
made it; reply text is buffered and appended at most every 50 ms. An append that finds the
run no longer running (a cancel got there first) aborts the agent: `ctx.aborted` turns
true and the agent's task is cancelled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from opentelemetry import trace

from agency.contracts.events import (
    AgentError,
    AgentStateSet,
    ChatMessage,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    ReplyAction,
    ReplyDelta,
    ReplyThinking,
)
from agency.services.agents.code_ai import MessageLike, ModelAsk, OnDelta, StreamingAi
from agency.services.agents.code_reply import WrittenReply
from agency.services.agents.code_run import RunContextBasics
from agency.services.llm.provider import (
    ModelError,
    ModelRequest,
    ModelResponse,
    Provider,
    recorded_response,
)
from agency.services.runtime.code_emitter import Emitter
from agency.services.runtime.code_tools import Tools
from agency.services.runtime.failures import StreamRoom, fit_message, fit_text

tracer = trace.get_tracer(__name__)

FLUSH_SECONDS = 0.05


class Reply(WrittenReply):
    """The agent's reply, streamed as `reply.*` events; its text is the run's result."""

    def __init__(self, emitter: Emitter) -> None:
        super().__init__()
        self._emitter = emitter

    def _send(self, text: str) -> None:
        self._emitter.queue(ReplyDelta(run_id=self._emitter.run_id, text=text))

    def thinking(self, text: str) -> None:
        if text:
            self._emitter.queue(ReplyThinking(run_id=self._emitter.run_id, text=text))

    def action(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        arguments = json.dumps(dict(args or {}), ensure_ascii=False, default=str)
        self._emitter.queue(
            ReplyAction(run_id=self._emitter.run_id, name=name, arguments=arguments)
        )


def _message(value: MessageLike) -> ChatMessage:
    if isinstance(value, ChatMessage):
        return value
    return msgspec.convert(dict(value), ChatMessage)


class Ai(StreamingAi):
    """Model calls through the runtime's provider, each recorded as `model.started`,
    `model.delta`s and `model.completed` (or `agent.error` when the call fails)."""

    def __init__(
        self,
        emitter: Emitter,
        provider: Provider,
        model: str,
        default_messages: Callable[[], list[ChatMessage]],
        tools: Tools,
        tenant: str = "",
        agency: str = "",
    ) -> None:
        self._tenant = tenant
        self._agency = agency
        self._emitter = emitter
        self._provider = provider
        self._model = model
        self._default_messages = default_messages
        self._tools = tools
        super().__init__()

    def _request(self, ask: ModelAsk) -> ModelRequest:
        if ask.messages is not None:
            chat = [_message(m) for m in ask.messages]
        elif ask.prompt is not None:
            chat = [ChatMessage(role="user", content=ask.prompt)]
        else:
            chat = self._default_messages()
        if ask.system:
            chat = [ChatMessage(role="system", content=ask.system), *chat]
        specs = self._tools.specs_of(ask.tools)
        return ModelRequest(
            model=ask.model or self._model,
            messages=tuple(chat),
            tools=specs,
            tenant=self._tenant,
            agency=self._agency,
        )

    async def _complete(self, ask: ModelAsk, on_delta: OnDelta | None) -> ChatMessage:
        response = await self._call(self._request(ask), on_delta)
        return response.message

    async def _call(
        self, request: ModelRequest, on_delta: Callable[[str], Awaitable[None]] | None
    ) -> ModelResponse:
        emitter = self._emitter
        run_id = emitter.run_id
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
        recorded = emitter.recorded_answer(step)
        if isinstance(recorded, AgentError):
            raise ModelError(recorded.error, retryable=recorded.retryable)
        if recorded is not None:  # a resumed handler: the answer the record holds
            return recorded_response(recorded)
        room = StreamRoom()

        async def deltas(text: str) -> None:
            text = room.take(text)
            if not text:
                return
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
                    reasoning=fit_text(response.reasoning),
                )
            ]
        )
        return ModelResponse(
            message=message,
            usage=response.usage,
            finish_reason=response.finish_reason,
            model=response.model,
            cost_usd=response.cost_usd,
            reasoning=fit_text(response.reasoning),
        )


@dataclass
class CodeRunContext(RunContextBasics):
    """`ctx` of `CodeAgent.on_message` in the runtime (`services.agents.AgentContext`)."""

    ai: Ai
    tools: Tools
    reply: Reply
    _emitter: Emitter

    @property
    def state(self) -> Any:
        """The agent's state: the last value given to `set_state` on this thread."""
        return self._emitter.agent_state

    async def set_state(self, value: Any) -> None:
        """Replace the agent's state (any JSON value), recorded as `agent.state_set`."""
        value = msgspec.to_builtins(value)
        await self._emitter.emit([AgentStateSet(run_id=self.run_id, value=value)])
        self._emitter.agent_state = value

    @property
    def abort_signal(self) -> asyncio.Event:
        return self._emitter.aborted
