"""Agent systems that service processes started by tests load with `--app`."""

from __future__ import annotations

import asyncio
from typing import Any

from services.agents.system import AgentSystem
from services.agents.tools import ToolContext, define_tool
from tests.runtime.conftest import make_system


async def slow_lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    """Look a word up, slowly: long enough to kill the service mid-call."""
    await asyncio.sleep(float(args.get("seconds", 2.0)))
    return f"slow definition of {args.get('word')}"


def build() -> AgentSystem:
    tool = define_tool(
        slow_lookup,
        parameters={
            "type": "object",
            "properties": {"word": {"type": "string"}, "seconds": {"type": "number"}},
        },
        timeout=30.0,
    )
    return make_system().add_tool(tool, ["lookup"])


system = build()
