"""The LangGraph side of `just bench agent`: the same two-step tool-calling agent, built the
way a LangGraph user builds it.

A `StateGraph` over `MessagesState`: a model node (`ChatOpenAI` with the tool bound, streamed
like ours), the prebuilt `ToolNode`, and `tools_condition` between them, so a run is
model → tools → model → end. State is checkpointed after every step by `AsyncPostgresSaver`
over a psycopg connection pool (the set-up LangGraph's documentation gives for production:
autocommit, no prepared statements, dict rows); `setup()` creates its tables once.
A run is `graph.ainvoke` on a thread id of its own.

Imported only after `bench.agent` made sure the packages of
`bench/requirements-langgraph.txt` are installed: none of this is a project dependency.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from typing import Any, Self

from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

POOL_TIMEOUT = 10.0


@tool
async def lookup(word: str) -> str:
    """Look a word up."""
    return f"definition of {word}"


@dataclass(frozen=True, slots=True)
class PeerOutcome:
    """What a run produced, for checking: the tool's output and the final answer."""

    tool_outputs: tuple[str, ...]
    answer: str
    messages: int


class PostgresPeer(abc.ABC):
    """An async context manager: the connection pool, the checkpointer and the graph that
    `_build` makes over them (the benchmarks' LangGraph sides share all but the graph)."""

    def __init__(
        self, database_url: str, model_base_url: str, *, model: str, pool_size: int = 20
    ) -> None:
        self._pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            database_url,
            min_size=pool_size,
            max_size=pool_size,
            open=False,
            timeout=POOL_TIMEOUT,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        self._llm = ChatOpenAI(
            model=model,
            base_url=model_base_url,
            api_key="fake",  # type: ignore[arg-type]
            max_retries=0,
            streaming=True,
            stream_usage=True,
        )
        self._graph: CompiledStateGraph[Any, Any, Any, Any] | None = None

    async def __aenter__(self) -> Self:
        await self._pool.open(wait=True, timeout=POOL_TIMEOUT)
        try:
            saver = AsyncPostgresSaver(self._pool)
            await asyncio.wait_for(saver.setup(), POOL_TIMEOUT)
            self._graph = self._build(saver)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.shield(self._pool.close(timeout=POOL_TIMEOUT))
        client = self._llm.root_async_client
        if client is not None:
            await asyncio.wait_for(asyncio.shield(client.close()), POOL_TIMEOUT)

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        assert self._graph is not None, f"{type(self).__name__} is not open"
        return self._graph

    @abc.abstractmethod
    def _build(self, saver: AsyncPostgresSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled graph, checkpointed by `saver`."""


class LangGraphPeer(PostgresPeer):
    """The two-step tool-calling agent behind a system prompt."""

    def __init__(
        self,
        database_url: str,
        model_base_url: str,
        *,
        model: str,
        prompt: str,
        pool_size: int = 20,
    ) -> None:
        super().__init__(database_url, model_base_url, model=model, pool_size=pool_size)
        self._prompt = SystemMessage(prompt)

    def _build(self, saver: AsyncPostgresSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
        model = self._llm.bind_tools([lookup])
        prompt = self._prompt

        async def call_model(state: MessagesState) -> dict[str, Any]:
            response = await model.ainvoke([prompt, *state["messages"]])
            return {"messages": [response]}

        builder = StateGraph(MessagesState)
        builder.add_node("model", call_model)
        builder.add_node("tools", ToolNode([lookup]))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
        return builder.compile(checkpointer=saver)

    async def run(self, thread_id: str, text: str) -> PeerOutcome:
        """One run on a thread of its own, from the user's message to the final answer."""
        state = await self.graph.ainvoke(
            {"messages": [("user", text)]},
            {"configurable": {"thread_id": thread_id}},
        )
        messages = state["messages"]
        outputs = tuple(str(m.content) for m in messages if isinstance(m, ToolMessage))
        last = messages[-1]
        answer = str(last.content) if isinstance(last, AIMessage) and not last.tool_calls else ""
        return PeerOutcome(tool_outputs=outputs, answer=answer, messages=len(messages))

    async def checkpoints(self) -> int:
        """Rows in the checkpoint table: how many checkpoints the runs so far wrote."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute("SELECT count(*) AS n FROM checkpoints")
            row = await cursor.fetchone()
        return int(row["n"]) if row else 0
