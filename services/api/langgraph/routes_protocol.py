"""LangGraph's thread protocol, which the SDKs' `threads.stream` speak: commands (`POST
/threads/{id}/commands`) and a filtered event stream (`POST /threads/{id}/stream/events`).

`run.start` starts a run as `runs.create` does (the thread created by it when it does not
exist yet, `multitask_strategy` default `enqueue`, as LangGraph's protocol has it); on a
thread awaiting approval its `input` resumes the interrupt, as LangGraph's does; from a
checkpoint (`config.configurable.checkpoint_id`, the SDK's `forkFrom`) it starts from that
checkpoint's state. `input.respond` answers the pending interrupt as `command: {resume:
{id: response}, update, goto}` does: an approve of the calls the run awaits. Both go
through `begin_run`. The event stream
folds the thread from its start (`protocol_events`) and sends the events of the channels
asked for after `since` (none: all of them), then follows the thread until the client
leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import structlog
from litestar import Response
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.infra.jetstream.errors import StoreError
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph import protocol_state as ps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.follow import folded
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.parts import frame
from agency.services.api.langgraph.protocol_events import CHANNELS, ProtocolEvents, channel_of
from agency.services.api.langgraph.scope import LgCaller, ThreadIdPath, load_thread
from agency.services.api.langgraph.start import awaits_approval, begin_run
from agency.services.api.langgraph.thread_stream import folded_stream
from agency.services.api.langgraph.wire import (
    Body,
    Command,
    Connection,
    MultitaskStrategy,
    RunCreate,
)
from agency.services.api.sse import KEEPALIVE
from agency.services.api.streaming import ThreadFeed

log = structlog.get_logger(__name__)

# What a run started here remembers for a client that joins it with `runs.join_stream`.
RUN_MODES = ["values", "updates", "messages-tuple"]


class ProtocolCommand(Body, frozen=True, kw_only=True):
    id: int
    method: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)


class EventStreamRequest(Body, frozen=True, kw_only=True):
    channels: list[str]
    namespaces: list[list[str]] | None = None
    depth: int | None = None
    since: int | None = None


def _success(command: ProtocolCommand, result: dict[str, Any]) -> dict[str, Any]:
    return {"type": "success", "id": command.id, "result": result}


def _strategy(params: dict[str, Any]) -> MultitaskStrategy:
    raw = params.get("multitask_strategy") or params.get("multitaskStrategy") or "enqueue"
    if raw not in ("enqueue", "reject", "interrupt", "rollback"):
        raise ValidationException(f"multitask_strategy {str(raw)[:40]!r} is not one of LangGraph's")
    return raw  # type: ignore[return-value]


def _run_create(params: dict[str, Any], **fields: Any) -> RunCreate:
    config = params.get("config")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if isinstance(configurable, dict) and configurable.get("checkpoint_id"):
        # From a checkpoint (`forkFrom`): the run starts from its state, as `runs.create`'s.
        fields = {**fields, "checkpoint_id": str(configurable["checkpoint_id"])}
    try:
        return msgspec.convert(
            {
                "config": config if isinstance(config, dict) else None,
                "metadata": params.get("metadata"),
                "multitask_strategy": _strategy(params),
                "stream_mode": RUN_MODES,
                **fields,
            },
            RunCreate,
        )
    except msgspec.ValidationError as e:
        raise ValidationException(f"run.start: {e}") from e


async def _run_start(call: ps.ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        raise ValidationException("run.start needs an assistant_id")
    try:
        view = await load_thread(call.deps, call.tenant, call.thread_id, deferred=True)
    except NotFoundException:
        view = None
    if view is not None and view.created is not None and awaits_approval(view):
        # LangGraph's protocol: input on an interrupted thread resumes the interrupt.
        resume = Command(resume=params.get("input"))
        data = _run_create(params, assistant_id=assistant_id, command=resume)
    else:
        data = _run_create(
            params, assistant_id=assistant_id, input=params.get("input"), if_not_exists="create"
        )
    begun = await begin_run(call.deps, call.tenant, call.thread_id, data, call.request)
    return {"run_id": begun.ref.id}


def _responses(params: dict[str, Any]) -> dict[str, Any]:
    """`input.respond`'s answers by interrupt id: one (`interrupt_id`, `response`) or a
    batch (`responses`)."""
    entries = params.get("responses")
    if entries is None:
        entries = [params]
    if not isinstance(entries, list) or not entries:
        raise ValidationException("input.respond needs an interrupt_id and a response")
    answers: dict[str, Any] = {}
    for entry in entries:
        interrupt_id = entry.get("interrupt_id") if isinstance(entry, dict) else None
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise ValidationException("input.respond needs an interrupt_id for each response")
        if entry.get("namespace") not in (None, []):
            raise NotFoundException(
                f"no interrupt {interrupt_id[:80]!r} in namespace {entry['namespace']!r}: "
                "Agency's interrupts are in the root namespace"
            )
        answers[interrupt_id] = entry.get("response")
    return answers


async def _input_respond(call: ps.ThreadCall, params: dict[str, Any]) -> dict[str, Any]:
    answers = _responses(params)
    view = await load_thread(call.deps, call.tenant, call.thread_id)
    run = view.state.active_run
    pending = view.interrupt_ids.get(run.run_id, run.run_id) if run is not None else None
    unknown = [i for i in answers if i != pending or not awaits_approval(view)]
    if unknown:
        raise NotFoundException(
            f"interrupt {unknown[0][:80]!r} is not pending in thread {view.thread_id}"
        )
    resume = Command(resume=answers, update=params.get("update"), goto=params.get("goto"))
    data = _run_create({}, assistant_id=view.state.agent_type, command=resume)
    await begin_run(call.deps, call.tenant, call.thread_id, data, call.request)
    return {}


# The commands by method, each answering its `result`.
COMMANDS: dict[str, Callable[[ps.ThreadCall, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "run.start": _run_start,
    "input.respond": _input_respond,
    "input.inject": ps.input_inject,
    "state.get": ps.state_get,
    "state.listCheckpoints": ps.list_checkpoints,
    "state.fork": ps.state_fork,
    "agent.getTree": ps.agent_tree,
    "subscription.reconnect": ps.subscription_reconnect,
}


@post_ok(
    "/threads/{thread_id:str}/commands",
    summary="LangGraph protocol: a command on a thread (runs, input, state, agent tree)",
)
async def thread_command(
    thread_id: ThreadIdPath, data: JSONBody[ProtocolCommand], caller: LgCaller
) -> Response[dict[str, Any]]:
    tenant = caller.tenant
    return Response(await run_command(caller.deps, tenant, thread_id, data, caller.request))


async def run_command(
    deps: ApiDeps, tenant: str, thread_id: str, data: ProtocolCommand, request: Connection
) -> dict[str, Any]:
    """A command's success answer (over HTTP or the WebSocket); a 4xx when it fails."""
    command = COMMANDS.get(data.method)
    if command is None:
        raise ValidationException(
            f"protocol command {data.method[:60]!r} does not map; Agency serves "
            + ", ".join(COMMANDS)
        )
    call = ps.ThreadCall(deps=deps, tenant=tenant, thread_id=thread_id, request=request)
    return _success(data, await command(call, data.params))


def wanted_channels(request: EventStreamRequest) -> tuple[set[str], bool]:
    """The channels asked for, and whether the namespaces asked for hold the root's."""
    if not request.channels:
        raise ValidationException("channels names at least one channel")
    unknown = [c for c in request.channels if c not in CHANNELS and not c.startswith("custom:")]
    if unknown:
        raise ValidationException(
            f"channel {unknown[0][:40]!r} does not map; channels: " + ", ".join(sorted(CHANNELS))
        )
    root = request.namespaces is None or [] in request.namespaces
    return set(request.channels), root


async def protocol_sse(
    feed: ThreadFeed, view: GraphView, channels: set[str], since: int
) -> AsyncIterator[bytes]:
    """The thread's protocol events of `channels` after `since`, folded from its start."""
    events = ProtocolEvents(view)

    def framed(batch: list[dict[str, Any]]) -> bytes:
        return b"".join(
            frame(e["method"], e, e["seq"])
            for e in batch
            if e["seq"] > since and channel_of(e["method"]) in channels
        )

    try:
        async for event in folded(feed, view):
            yield KEEPALIVE if event is None else framed(events.after(event))
    except (NatsError, StoreError, TimeoutError) as e:
        log.warning("langgraph protocol stream ended by a NATS error", error=str(e))
    finally:
        await feed.aclose()


@post_ok(
    "/threads/{thread_id:str}/stream/events",
    summary="LangGraph protocol: a thread's events of the channels asked for (SSE)",
    media_type="text/event-stream",
)
async def thread_events(
    thread_id: ThreadIdPath, data: JSONBody[EventStreamRequest], caller: LgCaller
) -> Stream:
    tenant = caller.tenant
    channels, root = wanted_channels(data)
    view = await load_thread(caller.deps, tenant, thread_id)
    if not root:  # Agency's events are all in the root namespace
        channels = set()
    since = data.since if data.since is not None and data.since >= 0 else -1
    return folded_stream(
        caller, view, lambda feed, folding: protocol_sse(feed, folding, channels, since)
    )


PROTOCOL_ROUTES = [thread_command, thread_events]
