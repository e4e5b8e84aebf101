"""An OpenAI-compatible LLM over real HTTP, for tests and the offline demo.

    async with FakeLLMServer(instant=True) as llm:
        llm.script("case-42", [ScriptStep(content="hello")])
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")

Routes: `POST /v1/chat/completions` (streamed or not), `GET /v1/models`, and `POST` /
`DELETE /_scripts` to script answers from another process. What it answers is decided in
`fake_scripts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import msgspec
import uvicorn
from litestar import Litestar, Request, Response, delete, get, post
from litestar.params import FromQuery
from litestar.response import Stream

from contracts.events.base import Usage
from services.llm.fake_scripts import (
    ChatRequest,
    Failure,
    Reply,
    Script,
    ScriptBook,
    ScriptStep,
    argument_fragments,
    text_chunks,
    validate,
)

CREATED = 1_700_000_000  # a fixed timestamp keeps answers byte-for-byte deterministic
MODELS = ("fake-model", "gpt-4.1-mini", "gpt-4o-mini")
# Pacing outside `instant` mode, so the demo streams visibly.
FIRST_TOKEN_DELAY = 0.15
CHUNK_DELAY = 0.02

# --- wire output -------------------------------------------------------------------------


class OutFunction(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str = ""


class OutToolCall(msgspec.Struct, omit_defaults=True):
    function: OutFunction
    index: int | None = None
    id: str | None = None
    type: str | None = None


class OutDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[OutToolCall] | None = None


class OutChunkChoice(msgspec.Struct):
    index: int
    delta: OutDelta
    finish_reason: str | None = None


class OutUsage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> OutUsage:
        total = usage.input_tokens + usage.output_tokens
        return cls(usage.input_tokens, usage.output_tokens, total)


class OutChunk(msgspec.Struct, omit_defaults=True):
    id: str
    model: str
    choices: list[OutChunkChoice]
    object: str = "chat.completion.chunk"
    created: int = CREATED
    usage: OutUsage | None = None


class OutMessage(msgspec.Struct):
    role: str
    content: str | None
    tool_calls: list[OutToolCall] | None = None


class OutChoice(msgspec.Struct):
    index: int
    message: OutMessage
    finish_reason: str


class OutCompletion(msgspec.Struct):
    id: str
    model: str
    choices: list[OutChoice]
    usage: OutUsage
    object: str = "chat.completion"
    created: int = CREATED


class OutModel(msgspec.Struct):
    id: str
    object: str = "model"
    created: int = CREATED
    owned_by: str = "fake"


class OutModelList(msgspec.Struct):
    data: list[OutModel]
    object: str = "list"


class OutErrorBody(msgspec.Struct):
    message: str
    type: str
    code: str | None = None


class OutError(msgspec.Struct):
    error: OutErrorBody


# Sleeps for the given seconds; true if the client went away meanwhile.
Pause = Callable[[float], Awaitable[bool]]

_encode = msgspec.json.Encoder().encode
_decode_request = msgspec.json.Decoder(ChatRequest).decode
_decode_script = msgspec.json.Decoder(Script).decode


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response[bytes]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = OutError(OutErrorBody(message=message, type=kind, code=str(status)))
    return Response(
        _encode(body), status_code=status, media_type="application/json", headers=headers
    )


def _sse(value: msgspec.Struct) -> bytes:
    return b"data: " + _encode(value) + b"\n\n"


def completion(reply: Reply, model: str) -> OutCompletion:
    calls = [
        OutToolCall(
            id=c.id, type="function", function=OutFunction(name=c.name, arguments=c.arguments)
        )
        for c in reply.tool_calls
    ]
    message = OutMessage(
        role="assistant",
        content=reply.content if reply.content or not calls else None,
        tool_calls=calls or None,
    )
    return OutCompletion(
        id=reply.id,
        model=model,
        choices=[OutChoice(index=0, message=message, finish_reason=reply.finish_reason)],
        usage=OutUsage.of(reply.usage),
    )


def stream_chunks(reply: Reply, model: str, include_usage: bool) -> tuple[list[bytes], list[bytes]]:
    """The SSE events of a streamed answer, as OpenAI sends them: (tokens, closing)."""

    def chunk(delta: OutDelta, finish_reason: str | None = None) -> bytes:
        choice = OutChunkChoice(index=0, delta=delta, finish_reason=finish_reason)
        return _sse(OutChunk(id=reply.id, model=model, choices=[choice]))

    events = [chunk(OutDelta(role="assistant", content=""))]
    events.extend(chunk(OutDelta(content=piece)) for piece in text_chunks(reply.content))
    for index, call in enumerate(reply.tool_calls):
        head = OutToolCall(
            index=index, id=call.id, type="function", function=OutFunction(name=call.name)
        )
        events.append(chunk(OutDelta(tool_calls=[head])))
        events.extend(
            chunk(
                OutDelta(tool_calls=[OutToolCall(index=index, function=OutFunction(arguments=a))])
            )
            for a in argument_fragments(call.arguments)
        )
    closing = [chunk(OutDelta(), reply.finish_reason)]
    if include_usage:
        closing.append(
            _sse(OutChunk(id=reply.id, model=model, choices=[], usage=OutUsage.of(reply.usage)))
        )
    closing.append(b"data: [DONE]\n\n")
    return events, closing


# --- the app -----------------------------------------------------------------------------


class FakeLLM:
    """The server's state: scripts, failure counts, and the requests it received."""

    def __init__(self, *, instant: bool = False, keep_requests: int = 10_000) -> None:
        self.instant = instant
        self.book = ScriptBook()
        self.received: deque[Any] = deque(maxlen=keep_requests)

    def _delays(self, reply: Reply) -> tuple[float, float]:
        if self.instant:
            return reply.delay, reply.stream_delay or 0.0
        first = reply.delay or FIRST_TOKEN_DELAY
        return first, CHUNK_DELAY if reply.stream_delay is None else reply.stream_delay

    async def chat(self, body: bytes, pause: Pause) -> Response[bytes] | Stream:
        try:
            request = _decode_request(body)
        except msgspec.ValidationError as e:
            return _error(400, f"invalid chat completion request: {e}")
        except msgspec.DecodeError as e:
            return _error(400, f"request body is not JSON: {e}")
        self.received.append(msgspec.json.decode(body))
        problem = validate(request)
        if problem is not None:
            return _error(400, problem)
        answer = self.book.answer(request)
        if isinstance(answer, Failure):
            if await pause(answer.delay):
                return _error(499, "client closed the request")
            headers = {}
            if answer.retry_after_ms is not None:
                headers["retry-after-ms"] = str(answer.retry_after_ms)
            return _error(answer.status, answer.message, headers)
        first, between = self._delays(answer)
        if await pause(first):
            return _error(499, "client closed the request")
        if not request.stream:
            return Response(
                _encode(completion(answer, request.model)), media_type="application/json"
            )
        include_usage = request.stream_options is not None and request.stream_options.include_usage
        tokens, closing = stream_chunks(answer, request.model, include_usage)
        return Stream(
            _paced(tokens, closing, between, answer.stream_error_after),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )


async def _paced(
    tokens: list[bytes], closing: list[bytes], between: float, error_after: int | None
) -> AsyncIterator[bytes]:
    for i, event in enumerate(tokens):
        # The opening role chunk and the first token go out together: the reply's `delay` is
        # the time to first token, `between` the time between tokens.
        if i > 1 and between:
            await asyncio.sleep(between)
        if error_after is not None and i == error_after:
            failure = OutError(OutErrorBody(message="scripted stream failure", type="server_error"))
            yield _sse(failure)
            return
        yield event
    for event in closing:
        yield event


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


def create_app(llm: FakeLLM) -> Litestar:
    @post("/v1/chat/completions", status_code=200)
    async def chat_completions(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        body = await request.body()
        return await llm.chat(body, lambda seconds: _pause(request, seconds))

    @get("/v1/models")
    async def models() -> OutModelList:
        return OutModelList(data=[OutModel(id=m) for m in MODELS])

    @post("/_scripts")
    async def add_script(request: Request[Any, Any, Any]) -> Response[bytes]:
        try:
            script = _decode_script(await request.body())
            llm.book.add(script.key, script.steps)
        except (msgspec.DecodeError, ValueError) as e:
            return _error(400, f"invalid script: {e}")
        return Response(b"", status_code=204)

    @delete("/_scripts", status_code=204)
    async def clear_scripts(key: FromQuery[str | None] = None) -> None:
        llm.book.clear(key)

    return Litestar(
        route_handlers=[chat_completions, models, add_script, clear_scripts],
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
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        instant: bool = False,
        start_timeout: float = 10.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self._host = host
        self._port = port
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._llm = FakeLLM(instant=instant)
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

    def script(self, key: str, steps: Sequence[ScriptStep | Mapping[str, Any]]) -> None:
        """Answer requests mentioning `key` with `steps`, by step index; replaces a script."""
        self._llm.book.add(key, steps)

    def clear_scripts(self, key: str | None = None) -> None:
        self._llm.book.clear(key)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
