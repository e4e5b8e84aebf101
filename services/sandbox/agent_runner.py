"""The worker an isolated code agent's `on_message` runs in, started under bwrap by the
runtime (`services/runtime/code_isolated.py`).

    python -I -B services/sandbox/agent_runner.py ROOT...

It reads the `AgentStart` line from stdin, confines itself as an isolated tool's worker
does (`runner.confine`: the call's environment, CPU time and address-space limits),
imports the agent class by module and qualified name and runs `on_message` with a `ctx`
whose effects are requests to the runtime (`agent_context.py`). It writes the end
(`Finished`, `Raised`, `OutOfMemory`) and exits. What the agent prints goes to stderr, so
it cannot forge a message.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from agency.services.sandbox.agent_context import Channel
    from agency.services.sandbox.agent_protocol import AgentStart, FromWorker


def main() -> None:
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.path[:0] = sys.argv[1:]
    from agency.services.sandbox.agent_context import Channel
    from agency.services.sandbox.agent_protocol import AgentStart, Raised, to_worker
    from agency.services.sandbox.runner import describe

    channel = Channel(out_fd)
    first = sys.stdin.buffer.readline()
    end: FromWorker
    try:
        start = to_worker.decode(first)
        if isinstance(start, AgentStart):
            end = run(start, channel)
        else:
            end = Raised(error=f"the sandboxed worker got {type(start).__name__} before start")
    except Exception as e:  # a broken start: say so rather than die without a word
        end = Raised(error=f"the sandboxed worker could not run the agent ({describe(e)})")
    channel.send(end)
    sys.stderr.flush()
    os._exit(0)


def run(start: AgentStart, channel: Channel) -> FromWorker:
    """Run `on_message` under the limits; every way it can end becomes one end message."""
    import asyncio

    from agency.services.llm.errors import ModelError
    from agency.services.sandbox.agent_protocol import Finished, OutOfMemory, Raised, Started
    from agency.services.sandbox.runner import confine, describe

    # The framework's own modules load before the limits, so the agent's CPU time is its
    # own; the agent's module (its code) is imported under them, in `_handle`.
    for module in (
        "agency.contracts.events",
        "agency.services.agents.isolation",
        "agency.services.agents.tools",
    ):
        importlib.import_module(module)
    confine(start.env, start.cpu_seconds, start.memory_bytes)
    channel.send(Started())  # the wall time is the handler's, not the worker's start
    try:
        result = asyncio.run(_handle(start, channel))
        return Finished(result=result if isinstance(result, str) else None)
    except MemoryError:
        return OutOfMemory()
    except ModelError as e:
        return Raised(error=describe(e), model_kind=e.kind, message=str(e))
    except BaseException as e:  # SystemExit and KeyboardInterrupt included: still one end
        return Raised(error=describe(e))


async def _handle(start: AgentStart, channel: Channel) -> Any:
    import asyncio

    import msgspec

    from agency.contracts.events import ChatMessage
    from agency.services.agents.isolation import resolve_class
    from agency.services.agents.tools import ToolSpec
    from agency.services.sandbox.agent_context import Ai, Reply, Tools, WorkerAgentContext

    cls = resolve_class(start.module, start.qualname)
    schema = getattr(cls, "Settings", None)
    settings = (
        msgspec.convert(start.settings, schema, strict=False)
        if schema is not None
        else dict(start.settings or {})
    )
    ctx = WorkerAgentContext(
        thread_id=start.thread_id,
        run_id=start.run_id,
        agent_type=start.agent_type,
        settings=settings,
        conversation=tuple(msgspec.convert(m, ChatMessage) for m in start.conversation),
        ai=Ai(channel),
        tools=Tools(channel, [ToolSpec(**spec) for spec in start.tools]),
        reply=Reply(channel),
        _channel=channel,
        _state=start.state,
    )
    reader = _read_answers(channel, asyncio.get_running_loop())
    try:
        return await cls().on_message(msgspec.convert(start.message, ChatMessage), ctx)
    finally:
        reader.cancel()


def _read_answers(channel: Channel, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """Read the runtime's lines in a thread and dispatch them on the loop, in order."""
    import asyncio

    from agency.services.sandbox.agent_protocol import to_worker

    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def read() -> None:
        while data := sys.stdin.buffer.readline():
            loop.call_soon_threadsafe(queue.put_nowait, data)
        loop.call_soon_threadsafe(queue.put_nowait, b"")

    threading.Thread(target=read, daemon=True).start()

    async def dispatch() -> None:
        while data := await queue.get():
            await channel.dispatch(to_worker.decode(data))
        channel.close(ConnectionError("the runtime closed the agent's channel"))

    return asyncio.ensure_future(dispatch())


if __name__ == "__main__":
    main()
