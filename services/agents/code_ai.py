"""What both code-agent model contexts (in the runtime, and in an isolated worker) build
on their own `complete`: `generate` (the text) and `stream` (the text as it arrives)."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from agency.contracts.events import ChatMessage

# A message given to `complete`: a `ChatMessage` or its fields as a mapping.
MessageLike = ChatMessage | Mapping[str, Any]


class StreamingAi(abc.ABC):
    """`ctx.ai` of a code agent: model calls, each recorded as the thread's events."""

    @abc.abstractmethod
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
        """One model call; the whole answer."""

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
