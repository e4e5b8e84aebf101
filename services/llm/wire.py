"""One chat completion call on the wire: the request as built, the answer's server-sent
events decoded straight into chunk structs.

The provider sends the body it built (already the wire's shape) with the HTTP client and
reads the event stream itself: the SDK's request machinery and its event decoder (a JSON
document per event, then a conversion) were a third of a call's CPU
(`docs/performance.md`). What goes wrong on the wire is reported here in the provider's
terms: `WireBroken` for a transport failure while reading, a `ModelError` for an answer
that is not a chat completion stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

import httpx2
import msgspec

from agency.services.llm.assembly import snippet
from agency.services.llm.chunks import StreamChunk
from agency.services.llm.errors import ModelResponseError, ModelStreamError

_DONE = b"[DONE]"
# Seconds the rest of a stream is read for after `[DONE]`.
_DRAIN_SECONDS = 0.1


class _ErrorBody(msgspec.Struct):
    message: str | None = None


class _Event(msgspec.Struct):
    """An event's `error`, if it has one (its other fields are left undecoded)."""

    error: _ErrorBody | str | None = None


_encoder = msgspec.json.Encoder()
_event = msgspec.json.Decoder(_Event)
_chunk = msgspec.json.Decoder(StreamChunk)


def encode_body(body: dict[str, object]) -> bytes:
    return _encoder.encode(body)


class WireBroken(Exception):
    """The transport failed while the answer was being read (`cause` says how)."""

    def __init__(self, cause: Exception) -> None:
        self.cause = cause
        super().__init__(f"{type(cause).__name__}: {cause}")


class EventLines:
    """Server-sent events from the bytes of a stream: `feed` returns the events completed
    by each piece, as (event name or None, data)."""

    def __init__(self) -> None:
        self._rest = b""
        self._name: bytes | None = None
        self._data: list[bytes] = []

    def feed(self, piece: bytes) -> list[tuple[bytes | None, bytes]]:
        lines = (self._rest + piece).split(b"\n")
        self._rest = lines.pop()
        events: list[tuple[bytes | None, bytes]] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    events.append((self._name, b"\n".join(self._data)))
                self._name, self._data = None, []
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                self._data.append(value)
            elif field == b"event":
                self._name = value
            # `id`, `retry` and comments (a line starting with ":") carry nothing for us.
        return events


def chunk_of(name: bytes | None, data: bytes) -> StreamChunk:
    """One event's data as a chunk; an error event, or data that is not a chunk, raises."""
    try:
        if name == b"error" or b'"error"' in data:
            event = _event.decode(data)
            if name == b"error" or event.error is not None:
                error = event.error
                said = error.message if isinstance(error, _ErrorBody) else error
                raise ModelStreamError(
                    f"the model stream reported an error: {said or snippet(data.decode())}",
                    kind="stream_error",
                )
        return _chunk.decode(data)
    except msgspec.ValidationError as e:
        raise ModelResponseError(
            f"the model stream sent a chunk that is not an OpenAI chat completion chunk "
            f"({e}): {snippet(data.decode(errors='replace'))}",
            kind="not_openai_json",
        ) from e
    except msgspec.DecodeError as e:
        raise ModelResponseError(
            f"the model stream sent a chunk that is not JSON ({e}): "
            f"{snippet(data.decode(errors='replace'))}",
            kind="malformed_response",
        ) from e


class ChunkReader:
    """The chunks of an event stream until `[DONE]` or its end; `done` says afterwards
    whether `[DONE]` came (a stream that ends without it was cut off)."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.done = False

    async def chunks(self) -> AsyncGenerator[StreamChunk, None]:
        events = EventLines()
        pieces = self._response.aiter_bytes()
        while True:
            try:
                piece = await anext(pieces, None)
            except (httpx2.TimeoutException, httpx2.RequestError) as e:
                raise WireBroken(e) from e
            if piece is None:
                return
            for name, data in events.feed(piece):
                if data == _DONE:
                    self.done = True
                    await _drain(pieces)
                    return
                yield chunk_of(name, data)


async def _drain(pieces: AsyncIterator[bytes]) -> None:
    """Read what follows `[DONE]` (the body's end, as a rule) for a moment at most: a
    response read to its end gives its connection back to the pool for the next call,
    one closed before that closes it. Nothing found here fails the answer."""
    with contextlib.suppress(TimeoutError, httpx2.HTTPError, httpx2.StreamError):
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for _ in pieces:
                pass
