"""Agent systems that service processes started by tests load with `--app`."""

from __future__ import annotations

import asyncio
from typing import Any

from agency import AgentContext
from agency.contracts.events import ChatMessage
from agency.services.agents.code import CodeAgent
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from tests.runtime.conftest import make_system


async def slow_lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    """Look a word up, slowly: long enough to kill the service mid-call."""
    await asyncio.sleep(float(args.get("seconds", 2.0)))
    return f"slow definition of {args.get('word')}"


class TwoCalls(CodeAgent):
    """Two model calls around a state tool call and a state change: a worker killed during
    the second call leaves a record for the next one to resume from."""

    tags = ("default",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        first = await ctx.ai.generate(message.content + " first")
        await ctx.tools.call("write_file", {"path": "first.md", "content": first})
        await ctx.set_state({"first": first})
        second = await ctx.ai.generate(message.content + " second")
        return f"{first} / {second}"


def build() -> AgentSystem:
    tool = define_tool(
        slow_lookup,
        parameters={
            "type": "object",
            "properties": {"word": {"type": "string"}, "seconds": {"type": "number"}},
        },
        timeout=30.0,
    )
    return make_system().add_tool(tool, ["lookup"]).code_agent("two_calls", TwoCalls)


system = build()
