"""What both code-agent model contexts (in the runtime, and in an isolated worker) build
on their own `complete`: `generate` (the text) and `stream` (the text as it arrives)."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agency.contracts.events import ChatMessage

# A message given to `complete`: a `ChatMessage` or its fields as a mapping.
MessageLike = ChatMessage | Mapping[str, Any]


OnDelta = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ModelAsk:
    """What one `complete` asks of the model, as its caller gave it."""

    prompt: str | None
    messages: Sequence[MessageLike] | None
    system: str | None
    model: str | None
    tools: bool | Sequence[str]


class StreamingAi(abc.ABC):
    """`ctx.ai` of a code agent: model calls, each recorded as the thread's events.
    `calls` counts them; each context makes a call its own way (`_complete`)."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        model: str | None = None,
        tools: bool | Sequence[str] = False,
        on_delta: OnDelta | None = None,
    ) -> ChatMessage:
        """One model call; the whole answer (text and any tool calls the model made).
        `prompt` alone is one user message; neither it nor `messages`: the conversation
        and the incoming message. `tools=True` offers every tool of `ctx.tools`, a list
        the ones named."""
        self.calls += 1
        return await self._complete(ModelAsk(prompt, messages, system, model, tools), on_delta)

    @abc.abstractmethod
    async def _complete(self, ask: ModelAsk, on_delta: OnDelta | None) -> ChatMessage:
        """Model call number `calls`; its text handed to `on_delta` as it arrives."""

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
