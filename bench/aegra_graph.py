"""The graph Aegra serves for `just bench http`: the approval-gated agent of
`bench.langgraph_hitl`, compiled without a checkpointer (Aegra adds its own).

A `StateGraph` over `MessagesState`: the model (`ChatOpenAI`, streaming, at
`OPENAI_BASE_URL`: the benchmark's fake model) with `write_file` bound, the prebuilt
`ToolNode`, `tools_condition` between them. `write_file` asks for approval with
`interrupt()` before it writes. Loaded by Aegra from its `aegra.json`, in Aegra's own
environment: none of this is a project dependency.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt


@tool
async def write_file(path: str, content: str) -> str:
    """Write a file, once a person approved it."""
    decision = interrupt({"tool": "write_file", "path": path})
    if not (isinstance(decision, dict) and decision.get("approved")):
        return "the person rejected the call"
    return f"wrote {len(content)} characters to {path}"


_model = ChatOpenAI(
    model=os.environ.get("BENCH_MODEL", "fake-model"),
    base_url=os.environ["OPENAI_BASE_URL"],
    api_key="fake",  # type: ignore[arg-type,unused-ignore]
    max_retries=0,
    streaming=True,
).bind_tools([write_file])


async def call_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await _model.ainvoke(state["messages"])]}


_builder = StateGraph(MessagesState)
_builder.add_node("model", call_model)
_builder.add_node("tools", ToolNode([write_file]))
_builder.add_edge(START, "model")
_builder.add_conditional_edges("model", tools_condition)
_builder.add_edge("tools", "model")
graph = _builder.compile()
