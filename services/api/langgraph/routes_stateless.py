"""Stateless runs (`thread_id=None` in the SDK): LangGraph runs them on a temporary thread;
Agency creates a thread of the assistant in the agency (`scope.agency_for`) and runs there.
The thread stays, unless `on_completion="delete"` asks for its deletion when the run ends
(`services/threads/run_end.py`); `Content-Location` names it and the run."""

from __future__ import annotations

from typing import Any

from litestar import Response
from litestar.exceptions import ValidationException
from litestar.params import JSONBody
from litestar.response import Stream

from agency.services.api.admission_door import admission_opt
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.inputs import invocation, refuse_unmapped
from agency.services.api.langgraph.parts import stream_modes
from agency.services.api.langgraph.routes_runs import (
    run_and_stream,
    run_and_wait,
    run_in_background,
)
from agency.services.api.langgraph.scope import (
    AgencyCaller,
    LgCaller,
    assistant_named,
    new_thread,
)
from agency.services.api.langgraph.webhook import webhook_of
from agency.services.api.langgraph.wire import Run, RunCreate


async def _thread_for(caller: AgencyCaller, data: RunCreate) -> str:
    """A new thread of the run's assistant in the caller's agency, once the request is
    known to be one we run."""
    deps, tenant = caller.deps, caller.tenant
    refuse_unmapped(data)
    webhook_of(data.webhook)
    if data.command is not None:
        raise ValidationException("a stateless run has no interrupt to resume: name the thread")
    invocation(data.input)
    stream_modes(data.stream_mode)
    agency_id = await caller.agency()
    assistant = await assistant_named(deps, tenant, agency_id, data.assistant_id)
    view = await new_thread(deps, tenant, agency_id, assistant.assistant_id, {})
    return view.thread_id


@post_ok("/runs", summary="LangGraph: start a run on a new thread")
async def create_stateless(data: JSONBody[RunCreate], caller: LgCaller) -> Response[Run]:
    return await run_in_background(caller, await _thread_for(caller, data), data)


@post_ok(
    "/runs/wait",
    summary="LangGraph: run on a new thread; its final state",
    opt=admission_opt(),
)
async def wait_stateless(data: JSONBody[RunCreate], caller: LgCaller) -> Response[dict[str, Any]]:
    return await run_and_wait(caller, await _thread_for(caller, data), data)


@post_ok(
    "/runs/stream",
    summary="LangGraph: run on a new thread, streamed (SSE)",
    media_type="text/event-stream",
)
async def stream_stateless(data: JSONBody[RunCreate], caller: LgCaller) -> Stream:
    return await run_and_stream(caller, await _thread_for(caller, data), data)


STATELESS_ROUTES = [create_stateless, wait_stateless, stream_stateless]
