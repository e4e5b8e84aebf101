"""An OpenAI-compatible LLM over real HTTP, for tests and the offline demo.

    async with FakeLLMServer(instant=True) as llm:
        llm.script("case-42", [ScriptStep(content="hello")])
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")

Routes: `POST /v1/chat/completions` (streamed or not), `POST /v1/embeddings` (a bag of
words hashed into 64 numbers), `GET /v1/models`, and `POST` /
`DELETE /_scripts` to script answers from another process (`docs/models.md`, "The offline
model"; a posted script counts its steps per turn unless it says `"count": "conversation"`).
What it answers is decided in `fake_scripts` (including the faults of a misbehaving
server), how it is written in `fake_wire`. Every request is recorded (`FakeLLMServer.calls`)
with its script key, its step and whether its whole answer was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import msgspec
import uvicorn
from litestar import Litestar, Request, Response, delete, get, post
from litestar.params import FromQuery, JSONBody
from litestar.response import Stream

from agency.services.llm.fake_request import ChatRequest, validate
from agency.services.llm.fake_scripts import (
    Failure,
    Reply,
    Script,
    ScriptBook,
    ScriptStep,
    StepCount,
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


class _QuietDrops(logging.Filter):
    """Keeps the server's error log free of the tracebacks of connections dropped on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        seen: set[int] = set()
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            if isinstance(error, DroppedConnection):
                return False
            if isinstance(error, BaseExceptionGroup) and any(
                isinstance(e, DroppedConnection) for e in error.exceptions
            ):
                return False
            error = error.__cause__ or error.__context__
        return True


_QUIET_DROPS = _QuietDrops()


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


# --- the app -----------------------------------------------------------------------------


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


# --- the server --------------------------------------------------------------------------


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to the process hosting us (pytest, `agency up`), not to the fake.
        yield


class FakeLLMServer:
    """The fake LLM served on 127.0.0.1 (port 0: a free port). An async context manager.

    `instant=True` drops the pacing meant for the demo; scripted delays still apply.
    `latency_ms=(low, high)` adds a random delay in that range before every answer.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        instant: bool = False,
        latency_ms: tuple[int, int] | None = None,
        start_timeout: float = 10.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self._host = host
        self._port = port
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._llm = FakeLLM(instant=instant, latency_ms=latency_ms)
        self._socket: socket.socket | None = None
        self._bound_port: int | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("the fake LLM server is not started")
        return self._bound_port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    @property
    def requests(self) -> list[Any]:
        """Bodies of the chat completion requests received, oldest first."""
        return list(self._llm.received)

    @property
    def calls(self) -> list[Call]:
        """Every chat completion request received, oldest first (see `Call`)."""
        return list(self._llm.calls)

    def script(
        self,
        key: str,
        steps: Sequence[ScriptStep | Mapping[str, Any]],
        *,
        count: StepCount = "conversation",
    ) -> None:
        """Answer requests mentioning `key` with `steps`, by step index; replaces a script.
        The index counts the conversation's assistant messages, or with `count="turn"`
        those since the latest user message (as `POST /_scripts` does by default)."""
        self._llm.book.add(key, steps, count)

    def clear_scripts(self, key: str | None = None) -> None:
        self._llm.book.clear(key)

    def hold(self, key: str) -> asyncio.Event:
        """Streamed answers of the script `key` stop after their first token until the
        event returned is set (an event of the server's loop; an hour at most)."""
        return self._llm.holds.setdefault(key, asyncio.Event())

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._socket is not None:
            raise RuntimeError("the fake LLM server is already started")
        # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only for sockets that say they
        # are TCP, and without it every response waits ~40 ms for a delayed ACK.
        self._socket = sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            self._bound_port = sock.getsockname()[1]
            config = uvicorn.Config(
                create_app(self._llm),
                log_level="warning",
                log_config=None,
                lifespan="off",
                ws="none",
                access_log=False,
                timeout_graceful_shutdown=max(1, int(self._stop_timeout / 2)),
            )
            self._server = _EmbeddedServer(config)
            logging.getLogger("uvicorn.error").addFilter(_QUIET_DROPS)  # idempotent
            self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="fake-llm")
            await self._until_started()
        except BaseException:
            await self.close()
            raise

    async def _until_started(self) -> None:
        assert self._server is not None and self._task is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._start_timeout
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the fake LLM server stopped while starting")
            if loop.time() >= deadline:
                raise TimeoutError(f"the fake LLM server did not start in {self._start_timeout}s")
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        """Stop serving; idempotent and bounded by `stop_timeout`."""
        server, task, sock = self._server, self._task, self._socket
        self._server, self._task, self._socket = None, None, None
        if server is not None and task is not None:
            server.should_exit = True
            done, _ = await asyncio.wait((task,), timeout=self._stop_timeout)
            if not done:
                server.force_exit = True
                task.cancel()
                await asyncio.wait((task,), timeout=1.0)
            if task.done() and not task.cancelled():
                task.result()
        if sock is not None:
            sock.close()
