"""The tools service: runs the tool calls the runtime requests, one result per call id.

Requests are `tool.requested` events on thread aggregates, consumed by one durable pull
consumer that any number of tools-service processes share. A request whose call already
has a result in its thread is acknowledged without running anything: that, not the broker's
duplicate window, is what keeps one result per call id however often a request arrives.
Results are appended at the thread's current position with the idempotency key
`tool-result:<call id>`, after checking the thread once more, so two deliveries racing each
other still store one result.

A call whose run has ended (canceled, or ended any other way) is not run: the runtime
answered it when the run ended (if it did not, the service answers it with an error). A
call running when its run is canceled is stopped (`services/tools/cancels.py`) and its
result is never appended after the cancel.

A request naming an MCP tool (`tool.requested.mcp`) is run through the process's MCP
sessions (`services/mcpclient/`), under the same timeout, retries and one result per call.
A request naming a remote A2A agent (`tool.requested.remote_agent`) sends its message
(`services/a2aclient/`) in the remote conversation of the thread's latest answer from that
agent, and its `tool.output` names the conversation the agent answered in
(`remote_context_id`), which the thread's next call to the agent continues.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Unpack

import msgspec
import structlog
from nats.aio.msg import Msg
from opentelemetry import trace

from agency.contracts.events import (
    McpToolRef,
    RemoteAgent,
    ToolError,
    ToolOutput,
    ToolRequested,
)
from agency.contracts.partitions import aggregate_of
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import TOOL_REQUESTS
from agency.infra.jetstream.eventworker import EventConsumer
from agency.infra.jetstream.outcomes import Ack, Outcome, Reject
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.jetstream.tracing import context_from
from agency.infra.jetstream.worker_tuning import WorkerTuning
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import Tool, ToolContext
from agency.services.tool_execution.executor import (
    DEFAULT_BACKOFF,
    execute,
)
from agency.services.tools.call_log import AlreadyAnswered, CallLog, RunEnded
from agency.services.tools.cancels import RunCanceledWhileRunning, RunCancels
from agency.services.workflows.context_tools import WorkflowContextTools

if TYPE_CHECKING:
    from agency.services.a2aclient import Conversation, RemoteCards
    from agency.services.mcpclient import McpSessions

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

DURABLE = TOOL_REQUESTS.name


class ToolsService(EventConsumer):
    """Consumes `tool.requested` events; several instances may share the durable consumer.

    The loop (free-slot fetches, heartbeats, retries, graceful shutdown) is the one every
    consumer shares (`infra/jetstream/worker.py`). A request that fails for good is
    answered with a `tool.error` before it is dead-lettered, so its run does not wait on it.
    """

    def __init__(
        self,
        bus: Bus,
        system: AgentSystem,
        *,
        concurrency: int = 8,
        ack_wait: float = 30.0,
        max_deliver: int = 5,
        redelivery_backoff: tuple[float, ...] = (0.5, 2.0, 5.0, 10.0),
        tool_backoff: tuple[float, ...] = DEFAULT_BACKOFF,
        **tuning: Unpack[WorkerTuning],
    ) -> None:
        super().__init__(
            dead_letters=bus.dead_letters,
            source_stream=bus.layout.stream(0),
            durable=DURABLE,
            concurrency=concurrency,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            backoff=redelivery_backoff,
            on_dead_letter=self._answer_for_good,
            **tuning,
        )
        self._bus = bus
        self._spec = TOOL_REQUESTS
        self._system = system
        self._workflow_tools = WorkflowContextTools(bus.store)
        self._tool_backoff = tool_backoff
        # Copies of one request delivered together run one at a time in this process, so the
        # later ones find the first one's result instead of running the tool again.
        self._calls: dict[tuple[str, str, str], _CallSlot] = {}
        self._cancels = RunCancels(bus)
        # MCP sessions of this process, made by the first MCP call (`_mcp_tool`).
        self._mcp: McpSessions | None = None
        # Remote agents' cards, kept for this process's calls (`_remote_agent_tool`).
        self._cards: RemoteCards | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """The shared consumer loop, with the `run.canceled` listener alongside."""
        await self._cancels.start()
        try:
            await super().run(stop)
        finally:
            await self._cancels.stop()
            if self._mcp is not None:
                await self._mcp.aclose()  # stops stdio servers' processes too

    def _max_ack_pending(self) -> int:
        return 1024  # the durable's own default

    # --- one message ------------------------------------------------------------------

    async def _handle(self, item: RecordedEvent, msg: Msg) -> Outcome[RecordedEvent]:
        problem = _misfit(item)
        if problem is not None:
            # No hook: a request that is not one has no run to answer.
            return Reject("unexpected", problem)
        env = item.envelope
        request = item.payload
        assert isinstance(request, ToolRequested)  # checked by _misfit
        with (
            structlog.contextvars.bound_contextvars(
                tenant_id=env.tenant_id,
                thread_id=env.aggregate_id,
                run_id=request.run_id,
                call_id=request.call.id,
                tool=request.call.name,
            ),
            tracer.start_as_current_span(
                "handle tool.requested",
                context=context_from(env.trace),
                kind=trace.SpanKind.CONSUMER,
                attributes={
                    "agency.tenant_id": env.tenant_id,
                    "agency.thread_id": env.aggregate_id,
                    "agency.tool.name": request.call.name,
                    "agency.tool.call_id": request.call.id,
                },
            ),
        ):
            async with self._exclusive((env.tenant_id, env.aggregate_id, request.call.id)):
                await self._run_call(item, request)
        return Ack()

    async def _run_call(self, recorded: RecordedEvent, request: ToolRequested) -> None:
        env = recorded.envelope
        call_log = CallLog(self._bus.store, recorded, request)
        try:
            prior_attempts = await call_log.load()
            conversation = None
            tool: Tool | None
            if request.remote_agent is not None:
                tool, conversation = self._remote_agent_tool(
                    request.remote_agent,
                    call_log.remote_conversation(request.call.name, request.remote_agent.url),
                )
            elif request.mcp is not None:
                tool = self._mcp_tool(request.mcp)
            else:
                tool = self._system.external_tool(request.call.name)
            context = ToolContext.of_request(
                env.tenant_id, env.agency_id, env.aggregate_id, request, self._workflow_tools
            )
            result = await self._cancels.run(
                (env.tenant_id, env.aggregate_id, request.run_id),
                execute(
                    request,
                    tool,
                    context,
                    on_attempt=call_log.started,
                    prior_attempts=prior_attempts,
                    backoff=self._tool_backoff,
                ),
            )
            if conversation is not None and isinstance(result, ToolOutput):
                result = msgspec.structs.replace(
                    result,
                    remote_context_id=conversation.context_id,
                    remote_task_id=conversation.task_id,
                )
            await call_log.answer(result)
        except RunCanceledWhileRunning:
            log.info("tool call stopped: its run was canceled")
            return
        except RunEnded as e:
            if not e.answered:
                await call_log.answer_unrun(f"Not run: run {e.run_id} ended ({e.how}) first.")
            log.info("tool call not run: its run has ended", run_end=e.how)
            return
        except AlreadyAnswered:
            log.info("tool call already answered, not run again")
            return
        finally:
            await call_log.close()
        outcome = result.__struct_config__.tag
        trace.get_current_span().set_attribute("agency.tool.outcome", str(outcome))
        log.info("tool call answered", outcome=outcome, attempts=call_log.attempts)

    def _mcp_tool(self, ref: McpToolRef) -> Tool:
        # Imported on first use: the MCP SDK takes a second to import, which the CLI and a
        # system without MCP servers never need.
        from agency.services.mcpclient import McpSessions, mcp_tool

        if self._mcp is None:
            self._mcp = McpSessions()
        return mcp_tool(self._mcp, ref)

    def _remote_agent_tool(
        self, agent: RemoteAgent, where: tuple[str, str]
    ) -> tuple[Tool, Conversation]:
        # Imported on first use, as the MCP SDK: a system without remote agents never pays
        # for the A2A SDK's import.
        from agency.services.a2aclient import Conversation, RemoteCards, remote_agent_tool

        if self._cards is None:
            self._cards = RemoteCards()
        conversation = Conversation(*where)
        return remote_agent_tool(self._cards, agent, conversation), conversation

    @contextlib.asynccontextmanager
    async def _exclusive(self, key: tuple[str, str, str]) -> AsyncIterator[None]:
        slot = self._calls.setdefault(key, _CallSlot())
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._calls[key]

    # --- failures ---------------------------------------------------------------------

    async def _answer_for_good(self, recorded: RecordedEvent, reason: str, detail: str) -> None:
        """A run waiting on this call gets an answer rather than waiting forever."""
        if _misfit(recorded) is not None:
            return
        request = recorded.payload
        assert isinstance(request, ToolRequested)  # checked by _misfit
        error = ToolError(
            run_id=request.run_id,
            tool_call_id=request.call.id,
            tool_name=request.call.name,
            error=f"the tools service could not run this call ({detail})",
            attempts=0,
        )
        call_log = CallLog(self._bus.store, recorded, request)
        try:
            await call_log.load()
            await call_log.answer(error)
        except AlreadyAnswered:
            return


@dataclass(slots=True)
class _CallSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def _misfit(recorded: RecordedEvent) -> str | None:
    """Why a decoded message cannot be a request to act on, or None."""
    env = recorded.envelope
    if not isinstance(recorded.payload, ToolRequested):
        return f"expected a tool.requested event, got {env.type!r}"
    # The subject is what the broker authorises per tenant; an envelope naming another
    # tenant or thread than its subject must not make us write into that one.
    found = aggregate_of(recorded.subject)
    if found is None or (found[0], found[2]) != (env.tenant_id, env.aggregate_id):
        return (
            f"envelope of tenant {env.tenant_id!r}, thread {env.aggregate_id!r} "
            f"does not match its subject {recorded.subject!r}"
        )
    if env.aggregate != "thread":
        return f"tool requests belong to threads, not to a {env.aggregate!r} aggregate"
    return None


async def run_tools_service(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    system: AgentSystem,
    *,
    ack_wait: float = 30.0,
) -> None:
    """Run the tools service on a connection of its own until `stop` is set."""
    # The tools service keeps no read model; the URL is taken so every service starts alike.
    del database_url
    async with Bus(nats_url, name="agency-tools") as bus:
        await ToolsService(bus, system, ack_wait=ack_wait).run(stop)
