"""The LangGraph side of `just bench system`: the same approval-gated agent, built the way
LangGraph's documentation builds human-in-the-loop.

A `StateGraph` over `MessagesState`: a model node (`ChatOpenAI` with the tool bound,
streaming), the prebuilt `ToolNode`, `tools_condition` between them. The tool, `write_file`,
asks for approval with `interrupt()` before it writes: the run parks at the first call,
its state checkpointed by `AsyncPostgresSaver` (psycopg pool: autocommit, no prepared
statements, dict rows; `setup()` once), and `Command(resume=...)` on the same thread id
runs the tool and the model's answer until the graph ends.

Imported only after `bench.agent.ensure_langgraph()` installed the pinned packages of
`bench/requirements-langgraph.txt`: none of this is a project dependency.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from bench.langgraph_peer import PostgresPeer


@tool
async def write_file(path: str, content: str) -> str:
    """Write a file, once a person approved it."""
    decision = interrupt({"tool": "write_file", "path": path})
    if not (isinstance(decision, dict) and decision.get("approved")):
        return "the person rejected the call"
    return f"wrote {len(content)} characters to {path}"


class HitlPeer(PostgresPeer):
    """The approval-gated agent: `start` parks a thread, `resume` approves and ends it."""

    def _build(self, saver: AsyncPostgresSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
        model = self._llm.bind_tools([write_file])

        async def call_model(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("model", call_model)
        builder.add_node("tools", ToolNode([write_file]))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
        return builder.compile(checkpointer=saver)

    async def start(self, thread_id: str, text: str) -> bool:
        """A fresh thread until its first interrupt; true if it parked there."""
        state = await self.graph.ainvoke(
            {"messages": [("user", text)]}, {"configurable": {"thread_id": thread_id}}
        )
        return bool(state.get("__interrupt__"))

    async def resume(self, thread_id: str) -> str:
        """Approve the parked call and run to the end; the final answer ("" if none)."""
        state = await self.graph.ainvoke(
            Command(resume={"approved": True}), {"configurable": {"thread_id": thread_id}}
        )
        messages = state["messages"]
        wrote = any(
            isinstance(m, ToolMessage) and str(m.content).startswith("wrote") for m in messages
        )
        last = messages[-1]
        if state.get("__interrupt__") or not wrote or not isinstance(last, AIMessage):
            return ""
        return str(last.content)

    async def first_token(self, thread_id: str, text: str) -> bool:
        """Stream a fresh thread's run until the first text token; true if one came."""
        stream: Any = self.graph.astream(
            {"messages": [("user", text)]},
            {"configurable": {"thread_id": thread_id}},
            stream_mode="messages",
        )
        try:
            async for chunk, _meta in stream:
                if isinstance(chunk, AIMessageChunk) and chunk.content:
                    return True
        finally:
            await stream.aclose()
        return False
