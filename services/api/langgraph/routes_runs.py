"""Runs of the LangGraph Agent Server API, on our invoke, approve and cancel.

A run with `input` is an invoke of the thread (`multitask_strategy` → our strategy); a run
with `command: {resume}` approves or rejects the calls the thread's paused run awaits and
names the stretch of that run that follows (`<run id>~<seq>`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Response, get, post
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.params import HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream

from agency.services.api.admission_door import admission_opt
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.follow import sse, wait_for_end
from agency.services.api.langgraph.graphstate import GraphView, RunRef
from agency.services.api.langgraph.inputs import (
    MULTITASK_OF,
    refuse_thread_deletion,
)
from agency.services.api.langgraph.parts import stream_modes
from agency.services.api.langgraph.routes_cancel_many import send_cancel
from agency.services.api.langgraph.scope import (
    AgencyCaller,
    LgCaller,
    RunIdPath,
    ThreadIdPath,
    load_thread,
)
from agency.services.api.langgraph.start import begin_run
from agency.services.api.langgraph.wire import Run, RunCreate
from agency.services.api.routes_queries import MAX_SEQ, int_param
from agency.services.api.sse import sse_answer
from agency.services.api.streaming import ThreadFeed, closing_event

PREFIX = "/langgraph"
CancelAction = Literal["interrupt", "rollback"]
# How long `wait`, `join` and `cancel?wait=1` hold the request (the SDK reads for 300 s).
WAIT_SECONDS = 270.0


def _ref(lg_run_id: str) -> RunRef:
    ref = RunRef.parse(lg_run_id)
    if ref is None:
        raise ValidationException(f"run id {lg_run_id[:80]!r} is not one of ours")
    return ref


def run_out(view: GraphView, ref: RunRef) -> Run:
    times = view.run_times.get(ref.run_id)
    if times is None or ref.run_id in view.rejected:
        raise NotFoundException(f"run {ref.id} not found in thread {view.thread_id}")
    strategy = view.strategies.get(ref.run_id, "queue")
    return Run(
        run_id=ref.id,
        thread_id=view.thread_id,
        assistant_id=getattr(view.state.run(ref.run_id), "agent_type", "") or view.state.agent_type,
        created_at=times[0],
        updated_at=times[1],
        status=view.run_status(ref),
        metadata={},
        multitask_strategy=MULTITASK_OF.get(strategy, "enqueue"),
    )


def locations(thread_id: str, ref: RunRef) -> dict[str, str]:
    """`Content-Location` names the run (the SDK's `on_run_created`); `Location` is where a
    cut stream resumes (the SDK reconnects there with `Last-Event-ID`). Both are paths
    under `/langgraph`, as LangGraph's own server answers them: the SDKs join them onto
    their base URL, so they hold behind any proxy, prefix or `Host` rewrite."""
    base = f"/threads/{thread_id}/runs/{ref.id}"
    return {"Content-Location": base, "Location": f"{base}/stream"}


@post_ok("/threads/{thread_id:str}/runs", summary="LangGraph: start a run")
async def create_run(
    thread_id: ThreadIdPath, data: JSONBody[RunCreate], caller: LgCaller
) -> Response[Run]:
    refuse_thread_deletion(data)
    return await run_in_background(caller, thread_id, data)


async def run_in_background(caller: AgencyCaller, thread_id: str, data: RunCreate) -> Response[Run]:
    deps, tenant = caller.deps, caller.tenant
    ref = (await begin_run(deps, tenant, thread_id, data, caller.request)).ref
    view = await load_thread(deps, tenant, thread_id)
    headers = locations(view.thread_id, ref)
    headers.pop("Location")
    if view.run_times.get(ref.run_id) is None:  # the invoke answered `pending`: not stored yet
        view.run_times[ref.run_id] = (view.updated_at, view.updated_at)  # type: ignore[assignment]
    return Response(run_out(view, ref), headers=headers)


async def _final(
    caller: AgencyCaller,
    thread_id: str,
    ref: RunRef,
    folded: GraphView | None = None,
    feed: ThreadFeed | None = None,
) -> dict[str, Any]:
    """The run's final state; `folded`: the thread folded before the run's stretch began,
    `feed`: its events from there on."""
    closing = closing_event(caller.request.app.state)
    view = await wait_for_end(
        caller.deps, caller.tenant, thread_id, ref, closing, WAIT_SECONDS, folded, feed
    )
    if view is None:
        raise ClientException(
            status_code=408,
            detail=f"run {ref.id} has not ended after {WAIT_SECONDS:.0f} s; join it again",
        )
    error = view.run_error(ref)
    if error is not None:
        return {"__error__": {"error": "RunError", "message": error}}
    return view.values_with_interrupts()


@post_ok(
    "/threads/{thread_id:str}/runs/wait",
    summary="LangGraph: start a run and answer its final state",
    opt=admission_opt(),
)
async def wait_run(
    thread_id: ThreadIdPath, data: JSONBody[RunCreate], caller: LgCaller
) -> Response[dict[str, Any]]:
    refuse_thread_deletion(data)
    return await run_and_wait(caller, thread_id, data)


async def run_and_wait(
    caller: AgencyCaller, thread_id: str, data: RunCreate
) -> Response[dict[str, Any]]:
    begun = await begin_run(
        caller.deps, caller.tenant, thread_id, data, caller.request, follow=True
    )
    view, ref = begun.view, begun.ref
    headers = locations(view.thread_id, ref)
    headers.pop("Location")
    body = await _final(caller, view.thread_id, ref, view, begun.feed)
    return Response(body, headers=headers)


@get(
    "/threads/{thread_id:str}/runs/{run_id:str}/join",
    summary="LangGraph: wait for a run to end; its final state",
)
async def join_run(thread_id: ThreadIdPath, run_id: RunIdPath, caller: LgCaller) -> dict[str, Any]:
    ref = _ref(run_id)
    view = await load_thread(caller.deps, caller.tenant, thread_id)
    run_out(view, ref)  # 404 for an unknown run
    # A stretch still going is followed on from the thread as read; one that ended is
    # folded from the log's start up to its end (the thread may have moved on since).
    return await _final(caller, thread_id, ref, None if view.stretch_ended(ref) else view)


def _stream(
    caller: AgencyCaller,
    view: GraphView,
    ref: RunRef,
    modes: tuple[str, ...],
    after_seq: int,
    *,
    before_stretch: ThreadFeed | None = None,
) -> Stream:
    """The stretch's SSE response. `before_stretch`: `view` was folded before the stretch
    began, and is folded on from where it stands with these events; otherwise the thread
    is read again."""
    closing = closing_event(caller.request.app.state)
    if before_stretch is not None:
        feed, folding = before_stretch, view
    else:
        feed = ThreadFeed(caller.deps, caller.tenant, view.thread_id, 0, closing)
        folding = GraphView(tenant_id=caller.tenant, thread_id=view.thread_id)
    return sse_answer(
        sse(feed, folding, ref, modes, after_seq, caller.deps.graph_views),
        feed.aclose,
        locations(view.thread_id, ref),
    )


@post_ok(
    "/threads/{thread_id:str}/runs/stream",
    summary="LangGraph: start a run and stream it (SSE)",
    media_type="text/event-stream",
)
async def stream_run(
    thread_id: ThreadIdPath, data: JSONBody[RunCreate], caller: LgCaller
) -> Stream:
    refuse_thread_deletion(data)
    return await run_and_stream(caller, thread_id, data)


async def run_and_stream(caller: AgencyCaller, thread_id: str, data: RunCreate) -> Stream:
    modes = stream_modes(data.stream_mode)
    begun = await begin_run(
        caller.deps, caller.tenant, thread_id, data, caller.request, follow=True
    )
    assert begun.feed is not None
    return _stream(caller, begun.view, begun.ref, modes, 0, before_stretch=begun.feed)


LastEventId = Annotated[
    str | None,
    HeaderParameter(
        name="Last-Event-ID",
        required=False,
        description=(
            "The last event seq received: the stream resumes after it; -1 (as `useStream` "
            "rejoins after a reload) replays it from its start."
        ),
    ),
]


def after_last_event(last_event_id: str | None, default: int) -> int:
    """The seq a stream resumes after: `default` without a `Last-Event-ID`; -1, as
    LangGraph's clients send to replay a stream whole, is from the start."""
    if not last_event_id:
        return default
    if last_event_id.strip() == "-1":
        return 0
    return int_param("Last-Event-ID", last_event_id, 0, 0, MAX_SEQ)


@get(
    "/threads/{thread_id:str}/runs/{run_id:str}/stream",
    summary="LangGraph: join a run's stream (SSE; Last-Event-ID resumes)",
    media_type="text/event-stream",
)
async def join_stream(
    thread_id: ThreadIdPath,
    run_id: RunIdPath,
    caller: LgCaller,
    stream_mode: Annotated[list[str] | None, QueryParameter(name="stream_mode")] = None,
    last_event_id: LastEventId = None,
    cancel_on_disconnect: Annotated[str | None, QueryParameter(name="cancel_on_disconnect")] = None,
) -> Stream:
    ref = _ref(run_id)
    view = await load_thread(caller.deps, caller.tenant, thread_id)
    run_out(view, ref)
    if cancel_on_disconnect in ("true", "1"):
        raise ValidationException("cancel_on_disconnect does not map: a run outlives its streams")
    after = after_last_event(last_event_id, 0)
    # No modes named (the SDK's reconnect, `useStream`'s rejoin): the run's own.
    named = [m for m in stream_mode or [] if m]  # the SDK sends `stream_mode=` for none
    modes = (
        stream_modes(named)
        if named
        else view.stream_modes.get(ref.id) or view.stream_modes.get(ref.run_id)
    )
    return _stream(caller, view, ref, modes or ("values",), after)


@get("/threads/{thread_id:str}/runs/{run_id:str}", summary="LangGraph: a run")
async def get_run(thread_id: ThreadIdPath, run_id: RunIdPath, principal: Caller, deps: Deps) -> Run:
    return run_out(await load_thread(deps, tenant_of(principal), thread_id), _ref(run_id))


@get("/threads/{thread_id:str}/runs", summary="LangGraph: a thread's runs, newest first")
async def list_runs(
    thread_id: ThreadIdPath,
    principal: Caller,
    deps: Deps,
    limit: Annotated[int, QueryParameter(name="limit", ge=1, le=1000)] = 10,
    offset: Annotated[int, QueryParameter(name="offset", ge=0)] = 0,
    status: Annotated[str | None, QueryParameter(name="status")] = None,
) -> list[Run]:
    view = await load_thread(deps, tenant_of(principal), thread_id)
    runs = [run_out(view, ref) for ref in reversed(view.stretches())]
    runs = [r for r in runs if status is None or r.status == status]
    return runs[offset : offset + limit]


@post(
    "/threads/{thread_id:str}/runs/{run_id:str}/cancel",
    status_code=202,
    summary="LangGraph: cancel a run (the thread's active run, or a queued one)",
)
async def cancel_run(
    thread_id: ThreadIdPath,
    run_id: RunIdPath,
    caller: LgCaller,
    wait: Annotated[str | None, QueryParameter(name="wait")] = None,
    action: Annotated[CancelAction, QueryParameter(name="action")] = "interrupt",
) -> Response[None]:
    deps, tenant = caller.deps, caller.tenant
    if action == "rollback":
        raise ValidationException("cancel action 'rollback' does not map: the log is append-only")
    ref = _ref(run_id)
    view = await load_thread(deps, tenant, thread_id)
    run_out(view, ref)
    active = view.state.active_run
    waiting = {r.run_id for r in view.state.delayed()}
    queued = view.state.queued(ref.run_id) is not None or ref.run_id in waiting
    if not queued and (active is None or active.run_id != ref.run_id):
        status = view.run_status(ref)
        raise ClientException(
            status_code=409,
            detail=f"run {ref.id} is {status}: only an active or a queued run can be canceled",
        )
    await send_cancel(deps, tenant, view, ref.run_id)
    if wait in ("1", "true"):
        await wait_for_end(
            deps,
            tenant,
            view.thread_id,
            RunRef(ref.run_id, view.last_seq),
            closing_event(caller.request.app.state),
            WAIT_SECONDS,
            view,
        )
        return Response(None, status_code=204)
    return Response(None, status_code=202)


RUN_ROUTES = [
    create_run,
    wait_run,
    join_run,
    stream_run,
    join_stream,
    get_run,
    list_runs,
    cancel_run,
]
