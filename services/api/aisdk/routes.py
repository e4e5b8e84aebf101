"""The AI SDK's chat routes: `POST /aisdk/{agencyId}/{blueprint}/chat` (what `useChat`'s
`DefaultChatTransport` posts) and `GET …/chat/{chatId}/stream` (what it asks when it
resumes a stream).

A chat is a thread of the blueprint, its id the chat's (created on its first message). A
user message starts a run and the answer is that run's message as a UI message stream
(`chunks.py`), until the run ends or waits for an approval. Approval responses decide on
the calls the run awaits, and the answer is the run's message from there on. The resume
route answers 204 when the chat has no active run, else the active run's whole message
from its start, then live: read from the thread's log (`streaming.ThreadFeed`), so it
works from any API process. Another tenant's chat, like a missing one, is not found.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

import structlog
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.params import JSONBody, PathParameter
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.contracts.events import HitlResume, RunResumed
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.aisdk.body import (
    Ask,
    ChatBody,
    Decide,
    NotMapped,
    decision,
    request_of,
)
from agency.services.api.aisdk.chunks import DONE, MessageChunks, run_of, sse
from agency.services.api.auth import (
    Caller,
    Deps,
    path_id,
    require_agent_type,
    tenant_and_agency,
    thread_created,
)
from agency.services.api.deps import ApiDeps
from agency.services.api.idempotency import run_id_for
from agency.services.api.path_params import AgencyId
from agency.services.api.run_start import (
    attempt_on,
    refuse_if_limited,
    start_run,
)
from agency.services.api.runstatus import RunStatuses, Seen
from agency.services.api.sse import KEEPALIVE, sse_answer, stored_then_live
from agency.services.api.streaming import ThreadFeed, closing_event
from agency.services.api.thread_create import create_root_thread

log = structlog.get_logger(__name__)

PREFIX = "/aisdk"
HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}

Blueprint = Annotated[str, PathParameter(description="The blueprint the chat's thread runs.")]
ChatPathId = Annotated[
    str, PathParameter(name="chatId", description="The chat's id: its thread's.")
]


@post("/{agencyId:str}/{blueprint:str}/chat", status_code=200)
async def chat(
    agency_id: AgencyId,
    blueprint: Blueprint,
    data: JSONBody[ChatBody],
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Stream:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await require_agent_type(deps, tenant, agency_id, blueprint)
    try:
        asked = request_of(data)
    except NotMapped as e:
        raise ValidationException(str(e)) from e
    thread_id = path_id("chat id", data.id)
    state = await deps.threads.load(tenant, thread_id)
    if not state.exists and isinstance(asked, Ask):
        await create_root_thread(
            deps, tenant, agency_id, thread_id, blueprint, {"via": "aisdk"}, listed=False
        )
        state = await deps.threads.load(tenant, thread_id, from_leader=True)
    await _chat_of(deps, tenant, agency_id, blueprint, thread_id)
    closing = closing_event(request.app.state)
    if isinstance(asked, Decide):
        return await _decide(deps, tenant, agency_id, state, asked, closing)
    key = hashlib.sha256(asked.key.encode()).hexdigest()[:40]
    # A message refused for a limit is sent again as its key's next attempt (`run_start`).
    key = attempt_on(state, key)
    run_id = run_id_for(tenant, thread_id, key)
    if state.run(run_id) is not None:
        # The same message again (a client's retry): its run's message, as it went.
        return await _replay(deps, tenant, thread_id, run_id, closing)
    await deps.limiter.admit(deps.pool, tenant, thread_id)
    run = state.active_run
    # A new message on a chat waiting for an approval withdraws it (the run is canceled,
    # its calls answered "Not run"), as a person moving on would.
    waiting = run is not None and run.status == "paused" and bool(run.hitl_pending)
    feed = ThreadFeed(deps, tenant, thread_id, state.position.seq, closing, position=state.position)
    try:
        started = await start_run(
            deps, tenant, agency_id, thread_id, key, (asked.message,), {},
            "interrupt" if waiting else "reject", Seen(RunStatuses(), state.position), feed,
        )  # fmt: skip
    except BaseException:
        await feed.aclose()
        raise
    if started.status == "rejected":
        await feed.aclose()
        refuse_if_limited(started)
        raise ClientException(
            status_code=409,
            detail=f"chat {thread_id} has a run under way: resume its stream "
            f"(GET {PREFIX}/{agency_id}/{blueprint}/chat/{thread_id}/stream) or wait for its end",
        )
    return _stream(feed, MessageChunks(started.run_id), await feed.backfill(), resumes=())


@get("/{agencyId:str}/{blueprint:str}/chat/{chatId:str}/stream", status_code=200)
async def resume(
    agency_id: AgencyId,
    blueprint: Blueprint,
    chat_id: ChatPathId,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Response[Any] | Stream:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("chat id", chat_id)
    await _chat_of(deps, tenant, agency_id, blueprint, thread_id)
    state = await deps.threads.load(tenant, thread_id, from_leader=True)
    run = state.active_run
    if run is None:
        return Response(content=None, status_code=204)
    return await _replay(deps, tenant, thread_id, run.run_id, closing_event(request.app.state))


async def _chat_of(
    deps: ApiDeps, tenant: str, agency_id: str, blueprint: str, thread_id: str
) -> None:
    """404 unless the thread is this tenant's, in this agency, a chat of `blueprint`."""
    created = await thread_created(deps, tenant, agency_id, thread_id)
    if created.agent_type != blueprint:
        raise NotFoundException(f"chat {thread_id} is not a chat of blueprint {blueprint!r}")


async def _decide(
    deps: ApiDeps,
    tenant: str,
    agency_id: str,
    state: ThreadState,
    asked: Decide,
    closing: asyncio.Event,
) -> Stream:
    run = state.active_run
    if run is None or run.status != "paused" or not run.hitl_pending:
        raise ClientException(
            status_code=409, detail=f"chat {state.thread_id} awaits no tool approval"
        )
    try:
        decided = decision(asked, run.run_id, run.hitl_pending)
    except NotMapped as e:
        raise ValidationException(str(e)) from e
    command = decided.command(agency_id, state.thread_id, run.run_id)
    feed = ThreadFeed(
        deps, tenant, state.thread_id, state.position.seq, closing, position=state.position
    )
    try:
        await feed.catch_up()
        # One decision per pause: a retried post is the same command.
        key = f"{state.thread_id}:aisdk-approve:{run.run_id}:{state.position.seq}"
        await deps.bus.commands.send(tenant, command, idempotency_key=key)
    except BaseException:
        await feed.aclose()
        raise
    return _stream(
        feed, MessageChunks(run.run_id, run.hitl_pending), await feed.backfill(), resumes=()
    )


async def _replay(
    deps: ApiDeps, tenant: str, thread_id: str, run_id: str, closing: asyncio.Event
) -> Stream:
    """The run's whole message from its start (the thread's log from its start), then live.
    A pause the log shows resumed does not end it."""
    feed = ThreadFeed(deps, tenant, thread_id, 0, closing)
    try:
        backlog = await feed.backfill()
    except BaseException:
        await feed.aclose()
        raise
    resumes = tuple(
        i
        for i, e in enumerate(backlog)
        if isinstance(e.payload, HitlResume | RunResumed) and run_of(e) == run_id
    )
    return _stream(feed, MessageChunks(run_id), backlog, resumes)


def _stream(
    feed: ThreadFeed, chunks: MessageChunks, backlog: list[RecordedEvent], resumes: Sequence[int]
) -> Stream:
    # The response does not close its iterator when the client goes away; this does.
    return sse_answer(_frames(feed, chunks, backlog, resumes), feed.aclose, HEADERS)


async def _frames(
    feed: ThreadFeed, chunks: MessageChunks, backlog: list[RecordedEvent], resumes: Sequence[int]
) -> AsyncIterator[bytes]:
    last_resume = max(resumes, default=-1)
    try:
        yield b"".join(sse(c) for c in chunks.start())
        i = -1  # the event's place: a pause ends the message unless a later one resumes it
        async for event in stored_then_live(backlog, feed.live()):
            if event is None:
                yield KEEPALIVE
                continue
            i += 1
            out = chunks.after(event, pause_ends=i > last_resume)
            if out:
                yield b"".join(sse(c) for c in out)
            if chunks.ended:
                yield DONE
                return
    except (NatsError, StoreError, TimeoutError) as e:
        # The response has started: end it; the client resumes with the resume route.
        log.warning("chat stream ended by a NATS error", error=str(e))
    finally:
        await feed.aclose()


AISDK_ROUTES = [chat, resume]
