"""An assistant's graph and schemas: every blueprint runs the same agent loop.

The loop is LangGraph's agent shape: the model answers, its tool calls run, and the model
answers again until it calls none. Its state is the thread's `values`: messages, todos and
files (`docs/langgraph.md`).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import get
from litestar.params import QueryParameter

from agency.services.api.langgraph.scope import (
    AgencyCaller,
    AssistantIdPath,
    LgCaller,
    assistant_named,
)
from agency.services.api.langgraph.wire import Assistant

GRAPH: dict[str, list[dict[str, Any]]] = {
    "nodes": [
        {"id": "__start__", "type": "schema", "data": "__start__"},
        {"id": "model", "type": "runnable", "data": {"id": ["agency", "model"], "name": "model"}},
        {"id": "tools", "type": "runnable", "data": {"id": ["agency", "tools"], "name": "tools"}},
        {"id": "__end__", "type": "schema", "data": "__end__"},
    ],
    "edges": [
        {"source": "__start__", "target": "model"},
        {"source": "model", "target": "tools", "conditional": True},
        {"source": "model", "target": "__end__", "conditional": True},
        {"source": "tools", "target": "model"},
    ],
}

_MESSAGES = {"type": "array", "items": {"type": "object"}, "title": "Messages"}
_TODOS = {"type": "array", "items": {"type": "object"}}
_FILES = {"type": "object", "additionalProperties": {"type": "string"}}
_INPUT = {
    "title": "Input",
    "type": "object",
    "properties": {"messages": _MESSAGES, "files": _FILES},
}
_STATE = {
    "title": "State",
    "type": "object",
    "properties": {"messages": _MESSAGES, "todos": _TODOS, "files": _FILES},
    "required": ["messages"],
}


async def _assistant(caller: AgencyCaller, assistant_id: str) -> Assistant:
    """The assistant `assistant_id` of the caller's agency, or 404."""
    tenant = caller.tenant
    return await assistant_named(caller.deps, tenant, await caller.agency(), assistant_id)


@get("/assistants/{assistant_id:str}/graph", summary="LangGraph: an assistant's graph")
async def assistant_graph(
    assistant_id: AssistantIdPath,
    caller: LgCaller,
    xray: Annotated[str | None, QueryParameter(name="xray", required=False)] = None,
) -> dict[str, list[dict[str, Any]]]:
    await _assistant(caller, assistant_id)
    return GRAPH


@get("/assistants/{assistant_id:str}/schemas", summary="LangGraph: an assistant's schemas")
async def assistant_schemas(assistant_id: AssistantIdPath, caller: LgCaller) -> dict[str, Any]:
    found = await _assistant(caller, assistant_id)
    return {
        "graph_id": found.graph_id,
        "input_schema": _INPUT,
        "output_schema": _STATE,
        "state_schema": _STATE,
        "config_schema": None,
        "context_schema": None,
    }


@get(
    [
        "/assistants/{assistant_id:str}/subgraphs",
        "/assistants/{assistant_id:str}/subgraphs/{namespace:str}",
    ],
    summary="LangGraph: an assistant's subgraphs (none: subagents run in threads of their own)",
)
async def assistant_subgraphs(
    assistant_id: AssistantIdPath,
    caller: LgCaller,
    recurse: Annotated[bool, QueryParameter(name="recurse", required=False)] = False,
) -> dict[str, Any]:
    await _assistant(caller, assistant_id)
    return {}


GRAPH_ROUTES = [assistant_graph, assistant_schemas, assistant_subgraphs]
