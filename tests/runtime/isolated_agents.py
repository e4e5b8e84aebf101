"""Code agents the isolation tests register both isolated and not: each does what a sandbox
allows or forbids and says what happened. At a module's top level, as an isolated agent's
class must be, and importing no more than the agent API (the worker imports this module)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from agency.contracts.events import ChatMessage
from agency.services.agents.code import CodeAgent, ToolCallError

if TYPE_CHECKING:
    from agency import AgentContext


class Echo(CodeAgent):
    class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        greeting: str = "Hello"

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.thinking("answering " + message.content)
        ctx.reply.write(ctx.settings.greeting + ": ")
        async for delta in ctx.ai.stream():
            ctx.reply.write(delta)


class Keeper(CodeAgent):
    """Writes a file with a tool, keeps a count in its state, and reports a failed tool."""

    tags = ("default",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        count = (ctx.state or {}).get("count", 0) + 1
        ctx.reply.action("write_file", {"path": "count.txt"})
        written = await ctx.tools.call("write_file", {"path": "count.txt", "content": str(count)})
        try:
            await ctx.tools.call("no_such_tool")
        except ToolCallError as e:
            refused = str(e).split(";")[0]
        summary = await ctx.ai.generate("summarise " + message.content)
        await ctx.set_state({"count": count, "last": message.content})
        return f"count {count} ({written}; {refused}; {summary}; state {ctx.state['count']})"


class Prober(CodeAgent):
    """Tries to read the variable, the files and the port its settings name."""

    class Settings(msgspec.Struct, kw_only=True):
        variable: str
        paths: list[str]
        port: int

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        seen: dict[str, object] = {
            "variable": os.environ.get(ctx.settings.variable),
            "environ": sorted(os.environ),
        }
        files = {}
        for path in ctx.settings.paths:
            try:
                files[path] = "read: " + _read(path)[:40]
            except OSError as e:
                files[path] = f"denied: {type(e).__name__}"
        seen["files"] = files
        try:
            with socket.create_connection(("127.0.0.1", ctx.settings.port), timeout=2):
                seen["socket"] = "connected"
        except OSError as e:
            seen["socket"] = f"denied: {type(e).__name__}: {e}"
        return json.dumps(seen)


def _read(path: str) -> str:
    return Path(path).read_text()


class Hog(CodeAgent):
    """Holds more memory than its limit, a MiB at a time."""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        ctx.reply.write("allocating ")
        held = [bytearray(1024 * 1024) for _ in range(1024)]
        return str(len(held))


class Spinner(CodeAgent):
    """Spins on the CPU without end."""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.write("spinning")
        while True:
            pass


class Crasher(CodeAgent):
    """Ends its process without a word (`crash`), or writes garbage where messages go."""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.write("about to fail ")
        if message.content == "garbage":
            # The worker's first descriptor past stdio is where its messages go.
            os.write(3, b"this is not a message\n")
            await ctx.ai.generate("never answered")
        os._exit(7)


class Sleeper(CodeAgent):
    """Streams a slow answer, logging as it goes."""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.log.info("streaming", prompt=message.content)
        async for delta in ctx.ai.stream():
            ctx.reply.write(delta)


class Napper(CodeAgent):
    """Waits without end, using no CPU."""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.write("napping")
        await asyncio.sleep(3600)
