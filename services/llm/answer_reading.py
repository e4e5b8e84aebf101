"""Reading a model provider's HTTP answer (`provider.py`): a body up to a limit, what an
error answer says and how long it asks us to wait, and a stream's chunks handed on in time."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import msgspec

from agency.services.llm.assembly import Assembly, Coalescer, snippet
from agency.services.llm.chunks import StreamChunk


def status_detail(body: bytes) -> str:
    """What an error answer says: its JSON's `error.message`, or the start of its text."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict):
        inner = decoded.get("error", decoded)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return snippet(body.decode(errors="replace")) or "no body"


def retry_after_header(headers: Any) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `retry-after` seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(millis) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time())
    return None


async def read_into(body: bytearray, response: httpx2.Response, limit: int) -> None:
    """The response's body added to `body` until it ends or passes `limit` bytes (what was
    read stays in `body` when the transport fails)."""
    async for piece in response.aiter_bytes():
        body += piece
        if len(body) > limit:
            return


async def _next_chunk(chunks: AsyncIterator[StreamChunk]) -> StreamChunk | None:
    return await anext(chunks, None)


async def read_chunks(
    chunks: AsyncIterator[StreamChunk], assembly: Assembly, coalescer: Coalescer, timeout: float
) -> None:
    """The stream's chunks into `assembly`, their text handed to `coalescer` on time;
    `timeout` bounds the wait for a read abandoned on the way out."""
    # While text is buffered, the next chunk is read in its own task so the text can be
    # flushed on time while the model pauses, without cancelling (and so breaking) the
    # stream's read. With nothing buffered nothing is due: the read is awaited directly.
    pending: asyncio.Future[StreamChunk | None] | None = None
    try:
        while True:
            budget = coalescer.wait_budget()
            if pending is None and budget is None:
                chunk = await _next_chunk(chunks)
            else:
                if pending is None:
                    pending = asyncio.ensure_future(_next_chunk(chunks))
                # A zero budget still gives the read one turn: a chunk already
                # received joins the text that is due.
                done, _ = await asyncio.wait((pending,), timeout=budget)
                if not done:
                    await coalescer.flush()
                    continue
                chunk = pending.result()
                pending = None
            if chunk is None:
                return
            coalescer.add(assembly.add(chunk))
            if coalescer.overdue():
                await coalescer.flush()
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait((pending,), timeout=timeout)
            if pending.done() and not pending.cancelled():
                pending.exception()  # retrieved: the stream is being abandoned anyway
