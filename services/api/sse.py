"""An answer of Server-Sent Events, as every streaming route gives it: not cached, not
buffered by a proxy, and whatever feeds it closed once it ends (the response does not
close its iterator when the client goes away)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

EVENT_STREAM = "text/event-stream"
# A comment frame: it keeps an idle connection open through proxies.
KEEPALIVE = b": keep-alive\n\n"
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

T = TypeVar("T")


def sse_answer(
    frames: AsyncIterator[bytes],
    close: Callable[[], Awaitable[object]],
    headers: Mapping[str, str] | None = None,
    response: type[Stream] = Stream,
) -> Stream:
    """`frames` as the answer; `close` runs once it has ended; `headers` beside the usual."""
    return response(
        frames,
        media_type=EVENT_STREAM,
        headers={**_HEADERS, **(headers or {})},
        background=BackgroundTask(close),
    )


async def stored_then_live(
    stored: Iterable[T], live: AsyncIterator[list[T]]
) -> AsyncIterator[T | None]:
    """The stored events, then each live one as it comes; None for a quiet spell, which a
    stream answers with `KEEPALIVE`."""
    for event in stored:
        yield event
    async for batch in live:
        if not batch:
            yield None
        for event in batch:
            yield event
