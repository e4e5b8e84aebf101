"""An OpenAI-compatible LLM over real HTTP, for tests and the offline demo.

    async with FakeLLMServer(instant=True) as llm:
        llm.script("case-42", [ScriptStep(content="hello")])
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")

Routes: `POST /v1/chat/completions` (streamed or not), `POST /v1/embeddings` (a bag of
words hashed into 64 numbers), `GET /v1/models`, and `POST` /
`DELETE /_scripts` to script answers from another process (`docs/models.md`, "The offline
model"; a posted script counts its steps per turn unless it says `"count": "conversation"`).
The app and its state are `fake_app`'s; what it answers is decided in `fake_scripts`
(including the faults of a misbehaving server), how it is written in `fake_wire`. Every
request is recorded (`FakeLLMServer.calls`) with its script key, its step and whether its
whole answer was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import uvicorn

from agency.services.llm.fake_app import Call, DroppedConnection, FakeLLM, create_app
from agency.services.llm.fake_scripts import ScriptStep, StepCount


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
