"""The provider's own reading of the wire: server-sent events from raw bytes, chunks and
error events, and a stream a server keeps open after `[DONE]`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from agency.contracts.events.base import ChatMessage
from agency.services.llm.errors import ModelResponseError, ModelStatusError, ModelStreamError
from agency.services.llm.provider import ModelRequest, ModelSettings, OpenAIProvider
from agency.services.llm.wire import EventLines, chunk_of

SETTINGS = ModelSettings(timeout=1.0, max_attempts=1)


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps({"id": "c", "model": "m", "choices": [choice]}).encode()


def test_events_are_cut_at_blank_lines_whatever_the_pieces() -> None:
    stream = (
        b": a comment\r\n"
        b"data: one\r\n\r\n"
        b"event: error\ndata:two\ndata: three\n\n"
        b"id: 7\nretry: 10\n\n"  # no data: no event
        b"data: four\n\n"
    )
    whole = EventLines().feed(stream)
    assert whole == [(None, b"one"), (b"error", b"two\nthree"), (None, b"four")]
    lines = EventLines()
    bytewise = [event for i in range(len(stream)) for event in lines.feed(stream[i : i + 1])]
    assert bytewise == whole


def test_a_chunk_an_error_and_what_is_neither() -> None:
    assert chunk_of(None, chunk("hi")).choices[0].delta.content == "hi"
    with pytest.raises(ModelStreamError, match="overloaded") as raised:
        chunk_of(None, b'{"error": {"message": "overloaded", "type": "server_error"}}')
    assert raised.value.kind == "stream_error" and raised.value.retryable
    with pytest.raises(ModelStreamError, match="went wrong"):
        chunk_of(b"error", b'{"message": "went wrong"}')
    # A chunk's text may mention errors; only an `error` member is one.
    said = chunk_of(None, chunk('the "error" was mine', None))
    assert said.choices[0].delta.content == 'the "error" was mine'
    with pytest.raises(ModelResponseError) as foreign:
        chunk_of(None, b'{"object": "list", "data": []}')
    assert foreign.value.kind == "not_openai_json"
    with pytest.raises(ModelResponseError) as broken:
        chunk_of(None, b'{"choices": [{"index": 0, "delta": {"con')
    assert broken.value.kind == "malformed_response" and "not JSON" in str(broken.value)


class RawServer:
    """An HTTP server that answers every request with `head` and `body` pieces, then keeps
    the connection open (it never ends the chunked body) until it is closed."""

    def __init__(self, head: bytes, pieces: list[bytes]) -> None:
        self.head = head
        self.pieces = pieces
        self.served = 0
        self._release = asyncio.Event()
        self._open: set[asyncio.StreamWriter] = set()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in request.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.served += 1
                writer.write(self.head)
                for piece in self.pieces:
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await self._release.wait()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        self._server.close()
        # an idle keep-alive connection holds wait_closed (Python 3.12 on) until it ends
        for writer in self._open:
            writer.close()
        await asyncio.wait_for(self._server.wait_closed(), 5)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


@pytest.fixture
async def held_open() -> AsyncIterator[tuple[RawServer, str]]:
    events = [b"data: " + chunk("all ") + b"\n\n", b"data: " + chunk("done", "stop") + b"\n\n"]
    server = RawServer(STREAM_HEAD, [*events, b"data: [DONE]\n\n"])
    async with server as url:
        yield server, url


async def test_an_answer_ends_at_done_though_the_server_keeps_the_stream_open(
    held_open: tuple[RawServer, str],
) -> None:
    """Waiting for the body's end would fail a whole answer on the read timeout (1 s)."""
    server, url = held_open
    request = ModelRequest(model="m", messages=(ChatMessage(role="user", content="hi"),))
    async with OpenAIProvider(base_url=url, api_key="k", settings=SETTINGS) as provider:
        answer = await provider.complete(request)
    assert answer.message.content == "all done"
    assert server.served == 1


async def test_an_error_status_says_what_the_body_says() -> None:
    body = json.dumps({"error": {"message": "model m does not exist", "code": None}}).encode()
    head = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
    head += b"transfer-encoding: chunked\r\nx-should-retry: false\r\n\r\n"
    server = RawServer(head, [body, b""])  # the empty piece ends the body
    request = ModelRequest(model="m", messages=(ChatMessage(role="user", content="hi"),))
    async with (
        server as url,
        OpenAIProvider(base_url=url, api_key="k", settings=SETTINGS) as provider,
    ):
        with pytest.raises(ModelStatusError) as raised:
            await provider.complete(request)
    assert raised.value.status == 404 and not raised.value.retryable
    assert "model m does not exist" in str(raised.value)


async def test_an_error_quoting_the_key_does_not_carry_it_on() -> None:
    key = "sk-quoted-by-the-provider-1234"
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}."}}).encode()
    head = b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n"
    head += b"transfer-encoding: chunked\r\n\r\n"
    request = ModelRequest(model="m", messages=(ChatMessage(role="user", content="hi"),))
    async with (
        RawServer(head, [body, b""]) as url,
        OpenAIProvider(base_url=url, api_key=key, settings=SETTINGS) as provider,
    ):
        with pytest.raises(ModelStatusError) as raised:
            await provider.complete(request)
    assert key not in str(raised.value) and "Incorrect API key provided: [key]" in str(raised.value)
