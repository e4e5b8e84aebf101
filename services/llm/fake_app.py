"""The fake LLM's HTTP app (`fake_server.py` serves it): its state (scripts, holds, failure
counts, the requests received) and its routes. What it answers is decided in `fake_scripts`,
how it is written in `fake_wire`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, delete, get, post
from litestar.params import FromQuery, JSONBody
from litestar.response import Stream

from agency.services.llm.fake_request import ChatRequest, validate
from agency.services.llm.fake_scripts import (
    Failure,
    Reply,
    Script,
    ScriptBook,
)
from agency.services.llm.fake_wire import (
    FOREIGN_JSON,
    HTML_PAGE,
    MALFORMED_CHUNK,
    OutError,
    OutErrorBody,
    OutModel,
    OutModelList,
    completion,
    encode,
    error_response,
    sse,
    stream_chunks,
)

MODELS = ("fake-model", "gpt-4.1-mini", "gpt-4o-mini")
# Pacing outside `instant` mode, so the demo streams visibly.
FIRST_TOKEN_DELAY = 0.15
CHUNK_DELAY = 0.02
# How long a hanging or stalled answer waits: past any client's timeout.
HANG_SECONDS = 3600.0

# Sleeps for the given seconds; true if the client went away meanwhile.
Pause = Callable[[float], Awaitable[bool]]

_decode_request = msgspec.json.Decoder(ChatRequest).decode
_decode_script = msgspec.json.Decoder(Script).decode


class DroppedConnection(Exception):
    """Raised inside a streamed answer so the server drops the connection mid-body."""


@dataclass(slots=True)
class Call:
    """One chat completion request as the fake saw it: the script it matched (None for the
    demo agent), its step (assistant messages so far), whether its whole answer went out
    (false for a call whose client went away, or that a fault cut short), and the client's
    TCP port (which process made the call, for tests that kill one)."""

    key: str | None
    step: int
    finished: bool = False
    client_port: int | None = None


class FakeLLM:
    """The server's state: scripts, failure counts, and the requests it received.

    `latency_ms=(low, high)` adds a random delay in that range before every answer.
    """

    def __init__(
        self,
        *,
        instant: bool = False,
        keep_requests: int = 10_000,
        latency_ms: tuple[int, int] | None = None,
    ) -> None:
        self.instant = instant
        self.latency_ms = latency_ms
        self.book = ScriptBook()
        self.received: deque[Any] = deque(maxlen=keep_requests)
        self.calls: deque[Call] = deque(maxlen=keep_requests)
        self.holds: dict[str, asyncio.Event] = {}

    def _latency(self) -> float:
        if self.latency_ms is None:
            return 0.0
        low, high = self.latency_ms
        return random.uniform(low, high) / 1000

    def _delays(self, reply: Reply) -> tuple[float, float]:
        if self.instant:
            return reply.delay, reply.stream_delay or 0.0
        first = reply.delay or FIRST_TOKEN_DELAY
        return first, CHUNK_DELAY if reply.stream_delay is None else reply.stream_delay

    async def chat(
        self, body: bytes, pause: Pause, client_port: int | None = None
    ) -> Response[bytes] | Stream:
        try:
            request = _decode_request(body)
        except msgspec.ValidationError as e:
            return error_response(400, f"invalid chat completion request: {e}")
        except msgspec.DecodeError as e:
            return error_response(400, f"request body is not JSON: {e}")
        self.received.append(msgspec.json.decode(body))
        call = Call(key=self.book.match(request), step=request.step, client_port=client_port)
        self.calls.append(call)
        problem = validate(request)
        if problem is not None:
            return error_response(400, problem)
        answer = self.book.answer(request)
        latency = self._latency()
        if isinstance(answer, Failure):
            if await pause(answer.delay + latency):
                return error_response(499, "client closed the request")
            headers = {}
            if answer.retry_after_ms is not None:
                headers["retry-after-ms"] = str(answer.retry_after_ms)
            call.finished = True
            return error_response(answer.status, answer.message, headers)
        if answer.fault == "hang":
            await pause(HANG_SECONDS)
            return error_response(499, "client closed the request")
        first, between = self._delays(answer)
        if await pause(first + latency):
            return error_response(499, "client closed the request")
        if answer.fault == "html":
            call.finished = True
            return Response(HTML_PAGE, media_type="text/html")
        if answer.fault == "not_openai_json":
            call.finished = True
            return Response(FOREIGN_JSON, media_type="application/json")
        if not request.stream or answer.fault == "unstreamed":
            call.finished = True
            return Response(
                encode(completion(answer, request.model)), media_type="application/json"
            )
        include_usage = request.stream_options is not None and request.stream_options.include_usage
        tokens, closing = stream_chunks(answer, request.model, include_usage)
        return Stream(
            _paced(call, answer, tokens, closing, between, self.holds.get(call.key or "")),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )


async def _paced(
    call: Call,
    reply: Reply,
    tokens: list[bytes],
    closing: list[bytes],
    between: float,
    hold: asyncio.Event | None = None,
) -> AsyncIterator[bytes]:
    # A stream fault strikes before the finishing chunk at the latest.
    fault_at = min(reply.fault_after, len(tokens))
    for i, event in enumerate([*tokens, *closing]):
        # The opening role chunk and the first token go out together: the reply's `delay` is
        # the time to first token, `between` the time between tokens.
        if i == 2 and hold is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hold.wait(), HANG_SECONDS)
        if 1 < i < len(tokens) and between:
            await asyncio.sleep(between)
        if reply.stream_error_after == i and i < len(tokens):
            failure = OutError(OutErrorBody(message="scripted stream failure", type="server_error"))
            yield sse(failure)
            return
        if reply.fault is not None and i == fault_at:
            match reply.fault:
                case "malformed_chunk":
                    yield MALFORMED_CHUNK
                case "truncated":
                    return
                case "disconnect":
                    raise DroppedConnection(f"dropped the connection after {i} chunks")
                case "stall":
                    await asyncio.sleep(HANG_SECONDS)
                    return
        yield event
    call.finished = True


async def _pause(request: Request[Any, Any, Any], seconds: float) -> bool:
    """Sleep, but stop early when the client disconnects, so a cancelled caller leaves no
    handler sleeping (and shutdown need not wait for it)."""
    if seconds <= 0:
        return False

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    listener = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait((listener,), timeout=seconds)
        return bool(done)
    finally:
        listener.cancel()
        await asyncio.wait((listener,), timeout=1.0)


EMBEDDING_DIMENSIONS = 64


def fake_embedding(text: str) -> list[float]:
    """A bag of words hashed into a fixed vector: texts sharing words point alike."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in text.lower().split():
        digest = hashlib.sha256(word.strip(".,!?\"'").encode()).digest()
        vector[digest[0] % EMBEDDING_DIMENSIONS] += 1.0
    return vector


def create_app(llm: FakeLLM) -> Litestar:
    @post("/v1/chat/completions", status_code=200)
    async def chat_completions(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        body = await request.body()
        port = request.client.port if request.client else None
        return await llm.chat(body, lambda seconds: _pause(request, seconds), port)

    @post("/v1/embeddings", status_code=200)
    async def embeddings(data: JSONBody[dict[str, Any]]) -> dict[str, Any]:
        texts = data.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        vectors = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(str(t))}
            for i, t in enumerate(texts)
        ]
        return {"object": "list", "data": vectors, "model": data.get("model", ""),
                "usage": {"prompt_tokens": 0, "total_tokens": 0}}  # fmt: skip

    @get("/v1/models")
    async def models() -> OutModelList:
        return OutModelList(data=[OutModel(id=m) for m in MODELS])

    @post("/_scripts")
    async def add_script(request: Request[Any, Any, Any]) -> Response[bytes]:
        try:
            script = _decode_script(await request.body())
            llm.book.add(script.key, script.steps, script.count)
        except (msgspec.DecodeError, ValueError) as e:
            return error_response(400, f"invalid script: {e}")
        return Response(b"", status_code=204)

    @delete("/_scripts", status_code=204)
    async def clear_scripts(key: FromQuery[str | None] = None) -> None:
        llm.book.clear(key)

    return Litestar(
        route_handlers=[chat_completions, embeddings, models, add_script, clear_scripts],
        openapi_config=None,
        # The host process owns logging; Litestar would otherwise configure the root logger.
        logging_config=None,
    )
