"""`POST /agui/{agencyId}/{blueprint}`: one AG-UI run of a thread, answered as SSE.

The input is checked before anything is answered (a malformed body, an unknown agency or
blueprint, another agency's thread: 4xx with `{error, status}`); then the thread is followed
from where its log stands, the run is started (or its interrupts answered), and the run's
events are sent as AG-UI events: `RUN_STARTED` first, one `RUN_FINISHED` or `RUN_ERROR`
last. An input the interrupt rules refuse is answered `RUN_STARTED`, `RUN_ERROR`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from litestar import Router, post
from litestar.datastructures import State
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.params import JSONBody, PathParameter
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.contracts.events.thread import end_user_problem
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.agui.inputs import NewInput, Refusal, Resume, check, plan
from agency.services.api.agui.translate import RunTranslator
from agency.services.api.agui.wire import PROTOCOL_VERSION, Event, RunAgentInput, RunStarted, sse
from agency.services.api.auth import Caller, Deps, path_id, require_agent_type, tenant_and_agency
from agency.services.api.deps import ApiDeps
from agency.services.api.idempotency import run_id_for
from agency.services.api.path_params import AgencyId
from agency.services.api.run_start import start_run
from agency.services.api.runstatus import RunStatuses, Seen
from agency.services.api.sse import KEEPALIVE, sse_answer, stored_then_live
from agency.services.api.streaming import ThreadFeed, closing_event
from agency.services.api.thread_create import END_USER_FIELD, create_root_thread

log = structlog.get_logger(__name__)

PREFIX = "/agui"

Blueprint = Annotated[
    str, PathParameter(name="blueprint", description="The blueprint (agent type) that runs.")
]


@post(
    "/{agencyId:str}/{blueprint:str}",
    status_code=200,
    media_type="text/event-stream",
    summary="Run a thread with AG-UI's RunAgentInput; its events as AG-UI SSE",
)
async def run_agent(
    agency_id: AgencyId,
    blueprint: Blueprint,
    data: JSONBody[RunAgentInput],
    principal: Caller,
    deps: Deps,
    state: State,
) -> Stream:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("threadId", data.thread_id)
    if not data.run_id.strip() or len(data.run_id) > 200:
        raise ClientException(status_code=400, detail="runId must be 1 to 200 characters")
    check(data)
    await require_agent_type(deps, tenant, agency_id, blueprint)
    history = await _thread(deps, tenant, agency_id, blueprint, data)
    translator = RunTranslator(tenant, thread_id, history, data.run_id, data.messages)
    _runnable(translator.state, blueprint)
    last = history[-1]
    feed = ThreadFeed(
        deps, tenant, thread_id, last.seq, closing_event(state), position=last.position
    )
    started = RunStarted(
        thread_id=data.thread_id, run_id=data.run_id, protocol_version=PROTOCOL_VERSION
    )
    head: list[Event] = [started]
    try:
        key = f"agui-{data.run_id}"
        decided = plan(translator.state, data)
        if translator.state.run(run_id_for(tenant, thread_id, key)) is not None:
            decided = Refusal(
                f"run {data.run_id[:200]!r} of thread {thread_id} ran already: send a new runId",
                "run_exists",
            )
        if isinstance(decided, Refusal):
            head.extend(translator.error(decided.message, decided.code))
        elif isinstance(decided, NewInput):
            await deps.limiter.admit(deps.pool, tenant, thread_id)
            runs = RunStatuses()
            runs.fold(history)
            accepted = await start_run(
                deps, tenant, agency_id, thread_id, key, decided.messages, {}, "reject",
                Seen(runs, last.position), feed, client_tools=decided.tools,
            )  # fmt: skip
            translator.run_id = accepted.run_id
        else:
            translator.run_id = decided.run_id
            if not await _resume(deps, tenant, agency_id, thread_id, decided, key, feed):
                head.extend(translator.error("the runtime did not take the resume up", "timeout"))
    except BaseException:
        await feed.aclose()
        raise
    return sse_answer(_frames(feed, translator, head), feed.aclose)


async def _thread(
    deps: ApiDeps, tenant: str, agency_id: str, blueprint: str, data: RunAgentInput
) -> list[RecordedEvent]:
    """The thread's events; a thread absent from the tenant is created (unless the input
    answers interrupts: there is nothing to resume). 404 if it is another agency's."""
    history = await deps.bus.store.read(tenant, "thread", data.thread_id)
    if not history:
        if data.resume:
            raise NotFoundException(f"thread {data.thread_id} not found")
        context = {"protocol": "ag-ui"}
        created = await create_root_thread(
            deps, tenant, agency_id, data.thread_id, blueprint, context, listed=False,
            end_user_id=_end_user(data),
        )  # fmt: skip
        return [created.event]
    first = history[0].payload
    if getattr(first, "agency_id", None) != agency_id:
        raise NotFoundException(f"thread {data.thread_id} not found in agency {agency_id}")
    return history


def _end_user(data: RunAgentInput) -> str | None:
    """The end user a new thread is created for (docs/data.md, "End users"):
    `forwardedProps.endUserId`; 400 if malformed."""
    props = data.forwarded_props
    given = props.get(END_USER_FIELD) if isinstance(props, dict) else None
    if given is None:
        return None
    if not isinstance(given, str) or (problem := end_user_problem(given)) is not None:
        raise ValidationException(
            f"forwardedProps.{END_USER_FIELD} {problem or 'must be a string'}"
        )
    return given


def _runnable(state: ThreadState, blueprint: str) -> None:
    """409 unless the thread runs `blueprint` and takes runs."""
    if state.terminated:
        raise ClientException(
            status_code=409, detail=f"thread {state.thread_id} is terminated: it takes no new runs"
        )
    if state.agent_type != blueprint:
        raise ClientException(
            status_code=409,
            detail=f"thread {state.thread_id} runs blueprint {state.agent_type!r}, not "
            f"{blueprint[:80]!r}: post to /agui/{state.agency_id}/{state.agent_type}",
        )


async def _resume(
    deps: ApiDeps,
    tenant: str,
    agency_id: str,
    thread_id: str,
    decided: Resume,
    key: str,
    feed: ThreadFeed,
) -> bool:
    """Send the decision; whether the runtime recorded it in time (bounded)."""
    command = decided.command(agency_id, thread_id, decided.run_id)
    await feed.catch_up()
    key = f"{thread_id}:{key}"
    await deps.bus.commands.send(tenant, command, idempotency_key=key)
    found = await feed.until(
        lambda events: next((e for e in events if e.envelope.idempotency_key == key), None),
        deps.settings.read_your_writes_timeout,
    )
    return found is not None


async def _frames(
    feed: ThreadFeed, translator: RunTranslator, head: list[Event]
) -> AsyncIterator[bytes]:
    try:
        for event in head:
            yield sse(event)
        if translator.done:
            return
        async for recorded in stored_then_live(await feed.backfill(), feed.live()):
            if recorded is None:
                yield KEEPALIVE
                continue
            for event in translator.apply(recorded):
                yield sse(event)
            if translator.done:
                return
        for event in translator.error("the server is shutting down; the run goes on", "closing"):
            yield sse(event)
    except (NatsError, StoreError, TimeoutError) as e:
        log.warning("AG-UI stream ended by a NATS error", error=str(e))
        for event in translator.error("the event store stopped answering", "unavailable"):
            yield sse(event)
    finally:
        await feed.aclose()


def agui_router() -> Router:
    """The AG-UI routes, mounted at `/agui`; AG-UI's wire, not the API's OpenAPI document."""
    return Router(PREFIX, route_handlers=[run_agent], include_in_schema=False)
