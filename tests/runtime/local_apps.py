"""An agent system with tools declared local, for the runtime and replay tests (`--app
tests.runtime.local_apps:system`)."""

from __future__ import annotations

import asyncio
from typing import Any

from agency import AgentContext
from agency.contracts.events import BlueprintSpec, ChatMessage
from agency.contracts.events.blueprint import BlueprintConfig, HitlConfig
from agency.services.agents.code import CodeAgent, ToolCallError
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from tests.runtime.conftest import make_system

WORD = {"type": "object", "properties": {"word": {"type": "string"}}}

# Every call of `define` made in this process, with the thread it answered.
DEFINE_CALLS: list[dict[str, Any]] = []


async def define(args: dict[str, Any], ctx: ToolContext) -> str:
    """Define a word, from what the arguments say alone."""
    DEFINE_CALLS.append({**args, "thread": ctx.thread_id})
    return f"meaning of {args.get('word')}"


def explode(args: dict[str, Any], ctx: ToolContext) -> str:
    """Fails for every word."""
    raise ValueError(f"no such word: {args.get('word')}")


async def dawdle(args: dict[str, Any], ctx: ToolContext) -> str:
    """Takes far longer than a local tool may."""
    await asyncio.sleep(5)
    return "too late"


class Definer(CodeAgent):
    """A code agent calling a local tool that answers and one that fails."""

    tags = ("local",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        meaning = await ctx.tools.call("define", {"word": message.content})
        try:
            await ctx.tools.call("explode", {"word": message.content})
        except ToolCallError as e:
            return f"{meaning}; {e}"
        return meaning


def build() -> AgentSystem:
    local = ["local"]
    return (
        make_system()
        .add_tool(define_tool(define, parameters=WORD, local=True), local)
        .add_tool(define_tool(explode, parameters=WORD, local=True), local)
        .add_tool(define_tool(dawdle, parameters=WORD, local=True, timeout=0.2), local)
        .add_agent(
            BlueprintSpec(
                name="quick",
                prompt="You define words.",
                tags=("default", "lookup", "local"),
                config=BlueprintConfig(max_steps=8),
            )
        )
        .add_agent(
            BlueprintSpec(
                name="quick_approver",
                prompt="You define words once a person agrees.",
                tags=("default", "local", "hitl"),
                config=BlueprintConfig(hitl=HitlConfig(tools=("define",))),
            )
        )
        .code_agent("definer", Definer)
    )


system = build()
