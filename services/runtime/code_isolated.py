"""Running an isolated code agent's `on_message` in a sandboxed worker process.

The worker (`services/sandbox/agent_runner.py`) is started under bubblewrap with the same
command line as an isolated tool's (`services/sandbox/host.py`: no network unless
`Isolation.network`, only `Isolation.env`, the code read-only, a tmpfs scratch directory)
and confines itself the same way (CPU time and address space). It runs the handler with a
`ctx` whose effects are requests on its stdout (`services/sandbox/agent_protocol.py`); this
side does each with the run's real `ctx` (so the events are those of an in-process run:
replay, re-execution and forks see no difference) and answers on its stdin. The handler's
wall time is `Isolation.wall_seconds`, counted from the worker's `Started` (its sandbox,
interpreter and the framework's modules loaded: a busy machine's slow start is not the
agent's time); the start itself is bounded by `START_TIMEOUT`.

A cancel of the handler (a run cancel, an abort, the drive stopping) kills the worker's
process group. A worker that ends without an end message, writes what is not a message,
exceeds a limit or cannot start its sandbox raises `IsolatedAgentFailed`, whose message is
the `run.error`'s reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agency.services.agents.code import ToolCallError
from agency.services.agents.isolation import Isolation, NotIsolatable, class_reference
from agency.services.llm.errors import ModelError
from agency.services.sandbox import agent_runner
from agency.services.sandbox.agent_protocol import (
    Action,
    AgentStart,
    Answered,
    CallTool,
    Complete,
    Delta,
    Finished,
    FromWorker,
    OutOfMemory,
    Raised,
    Refused,
    SetState,
    Started,
    Thinking,
    ToWorker,
    Write,
    from_worker,
    line,
)
from agency.services.sandbox.host import (
    NoSandbox,
    bubblewrap,
    ended_message,
    kill_group,
    memory_message,
    start_sandboxed,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from agency.contracts.events import ChatMessage
    from agency.services.agents.code_context import AgentContext
    from agency.services.agents.system import CodeAgentSpec

AGENT_RUNNER = Path(agent_runner.__file__).resolve()
# The longest line either side may write (a model answer, a tool output, a state).
LINE_LIMIT = 16 * 1024 * 1024
_STDERR_TAIL = 8000
# The longest a worker may take to start (sandbox, interpreter, framework) before its
# handler's wall time begins.
START_TIMEOUT = 60.0
_EXIT_WAIT = 5.0


class IsolatedAgentFailed(Exception):
    """The isolated handler raised, or its worker ended without an answer: the message says
    which and why."""


async def run_isolated(spec: CodeAgentSpec, message: ChatMessage, ctx: AgentContext) -> Any:
    """What `spec.cls().on_message(message, ctx)` returns, run in a sandboxed worker."""
    isolation = spec.isolation
    assert isolation is not None
    what = f"isolated code agent {spec.name!r}"
    try:
        bwrap = bubblewrap(what, "the runtime", "agent")
        module, qualname = class_reference(spec.name, spec.cls)
    except (NoSandbox, NotIsolatable) as e:
        raise IsolatedAgentFailed(str(e)) from e
    start = AgentStart(
        module=module,
        qualname=qualname,
        agent_type=ctx.agent_type,
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        message=msgspec.to_builtins(message),
        conversation=[msgspec.to_builtins(m) for m in ctx.conversation],
        settings=msgspec.to_builtins(ctx.settings),
        state=ctx.state,
        tools=[
            {"name": s.name, "description": s.description, "parameters": s.parameters}
            for s in ctx.tools.specs
        ],
        env=dict(isolation.env),
        cpu_seconds=isolation.cpu_seconds,
        memory_bytes=isolation.memory_bytes,
    )
    process = await start_sandboxed(bwrap, isolation, module, AGENT_RUNNER, limit=LINE_LIMIT)
    session = _Session(process, ctx, what, isolation)
    try:
        async with asyncio.timeout(START_TIMEOUT) as deadline:
            session.on_started = lambda: deadline.reschedule(
                asyncio.get_running_loop().time() + isolation.wall_seconds
            )
            return await session.run(start)
    except TimeoutError:
        if not session.started:
            raise IsolatedAgentFailed(f"{what} did not start within {START_TIMEOUT:g} s") from None
        raise IsolatedAgentFailed(
            f"{what} exceeded its wall time of {isolation.wall_seconds} s"
        ) from None
    except _WorkerEnded:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), _EXIT_WAIT)
        stderr = await session.stderr_tail()
        raise IsolatedAgentFailed(
            ended_message(what, isolation, process.returncode or 0, stderr)
        ) from None
    finally:
        await kill_group(process)
        await session.close()


class _WorkerEnded(Exception):
    pass


class _Session:
    """One worker's conversation: its requests done with the real `ctx`, in order made."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        ctx: AgentContext,
        what: str,
        isolation: Isolation,
    ) -> None:
        assert process.stdin and process.stdout and process.stderr
        self._process = process
        self._isolation = isolation
        self._ctx = ctx
        self._what = what
        self._lock = asyncio.Lock()
        self._requests: set[asyncio.Task[None]] = set()
        # Set when doing a request failed in a way the handler cannot be told about (the
        # run was canceled meanwhile, its record diverged): the handler ends with it.
        self._fatal: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self._stderr = bytearray()
        self._errors = asyncio.ensure_future(self._read_errors())
        # Told when the worker says it started (its handler's wall time begins).
        self.started = False
        self.on_started: Callable[[], None] = lambda: None

    async def run(self, start: AgentStart) -> Any:
        await self._send(start)
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            reading = asyncio.ensure_future(stdout.readline())
            either: set[asyncio.Future[Any]] = {reading, self._fatal}
            try:
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not reading.done():
                    reading.cancel()
            if self._fatal.done():
                raise self._fatal.result()
            try:
                data = reading.result()
            except ValueError as e:  # a line past LINE_LIMIT
                raise IsolatedAgentFailed(f"{self._what} wrote an overlong message ({e})") from e
            if not data:
                raise _WorkerEnded
            try:
                message = from_worker.decode(data)
            except msgspec.DecodeError as e:
                raise IsolatedAgentFailed(
                    f"{self._what} wrote an unreadable message ({e}): {data[:200]!r}"
                ) from e
            ended, result = self._take(message)
            if ended:
                return result

    def _take(self, message: FromWorker) -> tuple[bool, Any]:
        ctx = self._ctx
        match message:
            case Started():
                self.started = True
                self.on_started()
            case Write(text=text):
                ctx.reply.write(text)
            case Thinking(text=text):
                ctx.reply.thinking(text)
            case Action(name=name, args=args):
                ctx.reply.action(name, args)
            case Complete() | CallTool() | SetState():
                task = asyncio.ensure_future(self._request(message))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
            case Finished(result=result):
                return True, result
            case Raised(model_kind=str(kind), message=text):
                raise ModelError(text, retryable=False, kind=kind)  # type: ignore[arg-type]
            case Raised(error=error):
                raise IsolatedAgentFailed(error)
            case OutOfMemory():
                raise IsolatedAgentFailed(memory_message(self._what, self._isolation))
        return False, None

    async def _request(self, request: Complete | CallTool | SetState) -> None:
        ctx = self._ctx
        try:
            match request:
                case Complete():
                    answer = await ctx.ai.complete(
                        request.prompt,
                        messages=request.messages,
                        system=request.system,
                        model=request.model,
                        tools=request.tools,
                        on_delta=self._deltas(request.id) if request.stream else None,
                    )
                    await self._send(Answered(id=request.id, value=msgspec.to_builtins(answer)))
                case CallTool(name=name, args=args):
                    output = await ctx.tools.call(name, args)
                    await self._send(Answered(id=request.id, value=output))
                case SetState(value=value):
                    await ctx.set_state(value)
                    await self._send(Answered(id=request.id))
        except ToolCallError as e:
            await self._send(Refused(id=request.id, kind="tool", error=str(e)))
        except ModelError as e:
            await self._send(
                Refused(
                    id=request.id,
                    kind="model",
                    error=str(e),
                    retryable=e.retryable,
                    model_kind=e.kind,
                )
            )
        except BaseException as e:  # the handler ends with it, whatever it is
            if not self._fatal.done():
                self._fatal.set_result(e)

    def _deltas(self, ident: int) -> Any:
        async def on_delta(text: str) -> None:
            await self._send(Delta(id=ident, text=text))

        return on_delta

    async def _send(self, message: ToWorker) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        async with self._lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write(line(message))
                await stdin.drain()

    async def _read_errors(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        while chunk := await stderr.read(64 * 1024):
            self._stderr = (self._stderr + chunk)[-_STDERR_TAIL:]

    async def stderr_tail(self) -> bytes:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._errors), _EXIT_WAIT)
        return bytes(self._stderr)

    async def close(self) -> None:
        pending = [*self._requests, self._errors]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
