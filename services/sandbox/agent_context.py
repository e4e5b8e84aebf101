"""`ctx` of a code agent running in its sandboxed worker: a `services.agents.AgentContext`
like the runtime's (`services/runtime/code_context.py`), each effect a request to the
runtime over the worker's pipes (`agent_protocol.py`). The runtime does the effect with the
real `ctx`, so its events are the same as an agent running in the runtime would make.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agency.contracts.events import ChatMessage
from agency.services.agents.code import ToolCallError
from agency.services.agents.code_ai import ModelAsk, OnDelta, StreamingAi
from agency.services.agents.code_reply import WrittenReply
from agency.services.agents.code_run import RunContextBasics
from agency.services.agents.tools import ToolSpec
from agency.services.llm.errors import ModelError
from agency.services.sandbox.agent_protocol import (
    Action,
    Answered,
    CallTool,
    Complete,
    Delta,
    FromWorker,
    Refused,
    SetState,
    Thinking,
    ToWorker,
    Write,
    line,
)


class Channel:
    """The worker's side of the pipes: requests out, their answers matched back by id."""

    def __init__(self, out_fd: int) -> None:
        self._out = out_fd
        self._ids = 0
        self._waiting: dict[int, tuple[asyncio.Future[Any], Callable[[str], Any] | None]] = {}

    def send(self, message: FromWorker) -> None:
        payload = line(message)
        while payload:
            payload = payload[os.write(self._out, payload) :]

    async def request(
        self, make: Callable[[int], FromWorker], on_delta: Callable[[str], Any] | None = None
    ) -> Any:
        self._ids += 1
        ident = self._ids
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = (future, on_delta)
        try:
            self.send(make(ident))
            return await future
        finally:
            self._waiting.pop(ident, None)

    async def dispatch(self, message: ToWorker) -> None:
        """Deliver one message of the runtime to the request it answers."""
        entry = self._waiting.get(getattr(message, "id", -1))
        if entry is None:
            return
        future, on_delta = entry
        match message:
            case Delta(text=text):
                if on_delta is not None:
                    result = on_delta(text)
                    if asyncio.iscoroutine(result):
                        await result
            case Answered(value=value):
                if not future.done():
                    future.set_result(value)
            case Refused(kind="model", error=error, retryable=retryable, model_kind=kind):
                if not future.done():
                    future.set_exception(ModelError(error, retryable=retryable, kind=kind))  # type: ignore[arg-type]
            case Refused(error=error):
                if not future.done():
                    future.set_exception(ToolCallError(error))

    def close(self, error: BaseException) -> None:
        for future, _ in self._waiting.values():
            if not future.done():
                future.set_exception(error)


class Reply(WrittenReply):
    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel

    def _send(self, text: str) -> None:
        self._channel.send(Write(text=text))

    def thinking(self, text: str) -> None:
        if text:
            self._channel.send(Thinking(text=text))

    def action(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        self._channel.send(Action(name=name, args=msgspec.to_builtins(dict(args or {}))))


class Tools:
    def __init__(self, channel: Channel, specs: Sequence[ToolSpec]) -> None:
        self._channel = channel
        self._specs = {s.name: s for s in specs}

    @property
    def names(self) -> list[str]:
        return sorted(self._specs)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(self._specs.values())

    def specs_of(self, wanted: bool | Sequence[str]) -> tuple[ToolSpec, ...]:
        if wanted is True:
            return self.specs
        if not wanted:
            return ()
        return tuple(self._specs[n] for n in wanted if n in self._specs)

    async def call(self, name: str, args: Mapping[str, Any] | None = None) -> str:
        """Run a tool (in the runtime); its output, or `ToolCallError` with its error."""
        plain = msgspec.to_builtins(dict(args or {}))
        output = await self._channel.request(lambda i: CallTool(id=i, name=name, args=plain))
        return str(output)


class Ai(StreamingAi):
    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel

    async def _complete(self, ask: ModelAsk, on_delta: OnDelta | None) -> ChatMessage:
        """Made by the runtime, asked over the channel."""
        plain = None if ask.messages is None else [msgspec.to_builtins(m) for m in ask.messages]
        chosen: bool | list[str] = ask.tools if isinstance(ask.tools, bool) else list(ask.tools)
        value = await self._channel.request(
            lambda i: Complete(
                id=i,
                prompt=ask.prompt,
                messages=plain,
                system=ask.system,
                model=ask.model,
                tools=chosen,
                stream=on_delta is not None,
            ),
            on_delta,
        )
        return msgspec.convert(value, ChatMessage)


@dataclass
class WorkerAgentContext(RunContextBasics):
    """`ctx` of `CodeAgent.on_message` in the worker (`services.agents.AgentContext`)."""

    ai: Ai
    tools: Tools
    reply: Reply
    _channel: Channel
    _state: Any = None
    _aborted: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def state(self) -> Any:
        return self._state

    async def set_state(self, value: Any) -> None:
        value = msgspec.to_builtins(value)
        await self._channel.request(lambda i: SetState(id=i, value=value))
        self._state = value

    @property
    def abort_signal(self) -> asyncio.Event:
        return self._aborted
