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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
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
from agency.contracts.limits import limits
from agency.services.agents.code_ai import MessageLike, StreamingAi
from agency.services.llm.provider import ModelError, ModelRequest, ModelResponse, Provider
from agency.services.runtime.code_emitter import Emitter
from agency.services.runtime.code_tools import Tools
from agency.services.runtime.failures import fit_message, fit_text

tracer = trace.get_tracer(__name__)

FLUSH_SECONDS = 0.05


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
        return ModelRequest(
            model=model or self._model,
            messages=tuple(chat),
            tools=specs,
            tenant=self._tenant,
            agency=self._agency,
        )

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
        recorded = emitter.recorded_answer(step)
        if isinstance(recorded, AgentError):
            raise ModelError(recorded.error, retryable=recorded.retryable)
        if recorded is not None:  # a resumed handler: the answer the record holds
            return ModelResponse(
                message=recorded.message,
                usage=recorded.usage,
                finish_reason=recorded.finish_reason,
                model=recorded.model,
                cost_usd=recorded.cost_usd,
                reasoning=recorded.reasoning,
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
class CodeRunContext:
    """`ctx` of `CodeAgent.on_message` in the runtime (`services.agents.AgentContext`)."""

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
        return self._emitter.agent_state

    async def set_state(self, value: Any) -> None:
        """Replace the agent's state (any JSON value), recorded as `agent.state_set`."""
        value = msgspec.to_builtins(value)
        await self._emitter.emit([AgentStateSet(run_id=self.run_id, value=value)])
        self._emitter.agent_state = value

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
