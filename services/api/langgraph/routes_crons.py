"""LangGraph crons on the agency's schedules (`docs/workflows.md`).

A cron of an assistant is an agent schedule (`workflows.set_schedule`, target `agent`):
at each tick (in the cron's `timezone`, UTC unless said) the input's text is posted to the
assistant's thread in the agency's `@global` workflow, which runs it. The cron's
`thread_id` is that thread. With `on_run_completed` (`keep` or `delete`), the cron is
LangGraph's stateless one: each tick runs on a new thread of the assistant (metadata
`cron_id`), kept or deleted when its run ends (`ScheduleOptions.own_thread`); its
`thread_id` is then null. `enabled`, `end_time` and `metadata` are the schedule's
options, and so are `webhook` and `interrupt_before` / `interrupt_after`: each tick's run
is asked for with them, as a run of `runs.create` is. Updating sets the schedule again
(what the update leaves out stays); deleting removes it (`schedule.removed`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from litestar import delete, patch
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody, PathParameter

from agency.contracts.commands import RemoveSchedule, SetSchedule
from agency.contracts.events import RunOptions, ScheduleOptions
from agency.contracts.ids import new_id
from agency.domain.cron import next_tick, timezone_problem
from agency.domain.workflow_members import global_workflow_id
from agency.projections import workflow_queries as q
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.inputs import (
    breakpoints,
    invocation,
    refuse_options,
    unknown_nodes,
)
from agency.services.api.langgraph.scope import LgCaller, ThreadIdPath, load_thread
from agency.services.api.langgraph.webhook import webhook_of
from agency.services.api.langgraph.wire import Body, Out, Search
from agency.services.api.openapi import error_response
from agency.services.api.readback import send_and_read
from agency.services.api.schedule_door import checked_cron, room_for_schedule
from agency.services.workflows.http.ops import ensure_global_member, find_schedule, read_state

CronIdPath = Annotated[str, PathParameter(name="cron_id")]
CRON_PREFIX = "sch_"


class CronOptions(Body, frozen=True, kw_only=True):
    """What a cron's create and update both take (LangGraph's wire)."""

    input: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    webhook: str | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    end_time: str | None = None
    enabled: bool | None = None
    timezone: str | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None
    durability: str | None = None


class CronCreate(CronOptions, frozen=True, kw_only=True):
    assistant_id: str
    schedule: str
    checkpoint_during: bool | None = None
    multitask_strategy: str | None = None


class CronUpdate(CronOptions, frozen=True, kw_only=True):
    schedule: str | None = None


class CronSearch(Search, frozen=True, kw_only=True):
    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    sort_by: str | None = None


class Cron(Out, frozen=True, kw_only=True):
    cron_id: str
    assistant_id: str
    thread_id: str | None
    on_run_completed: str | None = None
    end_time: datetime | None = None
    schedule: str
    timezone: str | None = "UTC"
    created_at: datetime
    updated_at: datetime
    payload: dict[str, Any]
    user_id: str | None = None
    next_run_date: datetime | None
    metadata: dict[str, Any]
    enabled: bool


def _refuse_unmapped(data: CronCreate | CronUpdate) -> None:
    refuse_options(unknown_nodes(data), "schedules")


def _run(data: CronCreate | CronUpdate, now: RunOptions | None) -> RunOptions | None:
    """How each tick's run is asked for after `data`: its webhook and static breakpoints
    (as a run's, `inputs.breakpoints`); what `data` leaves out stays."""
    stopping = data.interrupt_before is not None or data.interrupt_after is not None
    if data.webhook is None and not stopping:
        return now
    base = now or RunOptions()
    stops = breakpoints(data) if stopping else base
    return RunOptions(
        webhook=base.webhook if data.webhook is None else webhook_of(data.webhook),
        pause_before_tools=stops.pause_before_tools,
        pause_before_model=stops.pause_before_model,
        pause_after_tools=stops.pause_after_tools,
    )


def _options(data: CronCreate | CronUpdate, now: ScheduleOptions) -> ScheduleOptions:
    """The schedule's options after `data`: what it names replaces what `now` holds."""
    timezone = now.timezone if data.timezone is None else data.timezone
    if problem := timezone_problem(timezone):
        raise ValidationException(problem)
    metadata = now.metadata
    if data.metadata is not None:
        if not all(isinstance(v, str) for v in data.metadata.values()):
            raise ValidationException("a cron's metadata values must be strings")
        metadata = {k[:200]: v for k, v in data.metadata.items()}
    end_time = now.end_time
    if data.end_time is not None:
        try:
            end_time = datetime.fromisoformat(data.end_time)
        except ValueError:
            raise ValidationException(
                f"end_time {data.end_time[:80]!r} is not an ISO 8601 date and time"
            ) from None
        if end_time.tzinfo is None:
            end_time = end_time.replace(tzinfo=UTC)
    enabled = now.enabled if data.enabled is None else data.enabled
    own_thread = now.own_thread if data.on_run_completed is None else data.on_run_completed
    return ScheduleOptions(
        timezone=timezone, end_time=end_time, enabled=enabled, metadata=metadata,
        run=_run(data, now.run), own_thread=own_thread,
    )  # fmt: skip


def _message(data: dict[str, Any] | None) -> str:
    """The text a tick posts: the input's messages, one paragraph each."""
    asked = invocation(data)
    if asked.files:
        raise ValidationException("a cron's input takes `messages` only: files do not map")
    text = "\n\n".join(m.content for m in asked.messages if m.content)
    if not text:
        raise ValidationException("a cron needs `input.messages` with text to send each tick")
    return text


def _cron(view: q.ScheduleView, threads: dict[str, str]) -> Cron:
    agent, options = view.agent or "", view.options
    upcoming = next_tick(view.cron, datetime.now(UTC), options.timezone)
    over = options.end_time is not None and upcoming > options.end_time
    return Cron(
        cron_id=view.id,
        assistant_id=agent,
        # A cron of threads of its own (stateless) has none; else the assistant's.
        thread_id=None if options.own_thread else threads.get(agent),
        on_run_completed=options.own_thread,
        schedule=view.cron,
        created_at=view.updated_at,
        updated_at=view.updated_at,
        payload={"input": {"messages": [{"role": "user", "content": view.message}]}},
        next_run_date=None if over or not options.enabled else upcoming,
        metadata={"name": view.name, **options.metadata},
        enabled=options.enabled,
        timezone=options.timezone,
        end_time=options.end_time,
    )


async def _crons(deps: ApiDeps, tenant: str, agency_id: str) -> list[Cron]:
    async with deps.pool.acquire() as conn:
        views = await q.schedules(conn, tenant, agency_id)
    members = (await read_state(deps, tenant, global_workflow_id(tenant, agency_id))).members
    threads = {m.agent_type: m.thread_id for m in members.values()}
    threads.update({name: m.thread_id for name, m in members.items()})
    return [_cron(v, threads) for v in views if v.target == "agent" and v.active]


async def _cron_named(deps: ApiDeps, tenant: str, agency_id: str, cron_id: str) -> Cron:
    for cron in await _crons(deps, tenant, agency_id):
        if cron.cron_id == cron_id:
            return cron
    raise NotFoundException(f"cron {cron_id[:80]!r} not found in agency {agency_id}")


async def _set(deps: ApiDeps, tenant: str, command: SetSchedule) -> None:
    await send_and_read(deps, tenant, "schedule", command.schedule_id, command)


@post_ok(
    "/runs/crons",
    summary="LangGraph: a cron of an assistant",
    responses={
        409: error_response(
            409, "The tenant has as many schedules as it may (`AGENCY_TENANT_MAX_SCHEDULES`)."
        )
    },
)
async def create_cron(data: JSONBody[CronCreate], caller: LgCaller, deps: Deps) -> Cron:
    tenant = caller.tenant
    _refuse_unmapped(data)
    cron, message = checked_cron(deps, data.schedule), _message(data.input)
    options = _options(data, ScheduleOptions())
    agency_id = await caller.agency()
    await room_for_schedule(deps, tenant)
    state = await ensure_global_member(deps, tenant, agency_id, data.assistant_id)
    schedule_id = CRON_PREFIX + new_id()
    await _set(
        deps,
        tenant,
        SetSchedule(
            agency_id=agency_id, schedule_id=schedule_id, name=f"cron {data.assistant_id}",
            cron=cron, target="agent", workflow_id=state.workflow_id, agent=data.assistant_id,
            message=message, options=options,
        ),
    )  # fmt: skip
    return await _cron_named(deps, tenant, agency_id, schedule_id)


@post_ok(
    "/threads/{thread_id:str}/runs/crons", summary="LangGraph: a cron of a thread (not mapped)"
)
async def create_thread_cron(
    thread_id: ThreadIdPath, data: JSONBody[CronCreate], principal: Caller, deps: Deps
) -> None:
    await load_thread(deps, tenant_of(principal), thread_id, deferred=True)  # 404 if not ours
    raise ValidationException(
        "a cron runs its assistant's thread in the agency's `@global` workflow, not a thread "
        "of your own: use `crons.create(assistant_id, …)`; the cron's `thread_id` names it"
    )


@patch("/runs/crons/{cron_id:str}", summary="LangGraph: update a cron")
async def update_cron(
    cron_id: CronIdPath, data: JSONBody[CronUpdate], caller: LgCaller, deps: Deps
) -> Cron:
    tenant = caller.tenant
    _refuse_unmapped(data)
    agency_id = await caller.agency()
    current = await _cron_named(deps, tenant, agency_id, cron_id)
    message = _message(data.input) if data.input is not None else None
    async with deps.pool.acquire() as conn:
        view = next(v for v in await q.schedules(conn, tenant, agency_id) if v.id == cron_id)
    options = _options(data, view.options)
    await _set(
        deps,
        tenant,
        SetSchedule(
            agency_id=agency_id, schedule_id=cron_id, name=view.name,
            cron=checked_cron(deps, data.schedule) if data.schedule else current.schedule,
            target="agent", workflow_id=view.workflow_id, agent=view.agent,
            message=view.message if message is None else message,
            options=options,
        ),
    )  # fmt: skip
    return await _cron_named(deps, tenant, agency_id, cron_id)


@delete("/runs/crons/{cron_id:str}", status_code=204, summary="LangGraph: delete a cron")
async def delete_cron(cron_id: CronIdPath, caller: LgCaller, deps: Deps) -> None:
    tenant = caller.tenant
    agency_id = await caller.agency()
    await _cron_named(deps, tenant, agency_id, cron_id)
    await find_schedule(deps, tenant, agency_id, cron_id)
    command = RemoveSchedule(agency_id=agency_id, schedule_id=cron_id)
    await send_and_read(deps, tenant, "schedule", cron_id, command)


def _found(crons: list[Cron], data: CronSearch | CronCount) -> list[Cron]:
    return [
        c
        for c in crons
        if (data.assistant_id is None or c.assistant_id == data.assistant_id)
        and (data.thread_id is None or c.thread_id == data.thread_id)
        and all(c.metadata.get(k) == v for k, v in (data.metadata or {}).items())
    ]


@post_ok("/runs/crons/search", summary="LangGraph: search crons")
async def search_crons(data: JSONBody[CronSearch], caller: LgCaller, deps: Deps) -> list[Cron]:
    tenant = caller.tenant
    data.checked()
    crons = await _crons(deps, tenant, await caller.agency())
    found = [c for c in _found(crons, data) if data.enabled in (None, c.enabled)]
    key = data.sort_by if data.sort_by in ("cron_id", "assistant_id", "thread_id") else "cron_id"
    found.sort(key=lambda c: str(getattr(c, key)), reverse=data.sort_order == "desc")
    return found[data.offset : data.offset + data.limit]


class CronCount(Body, frozen=True, kw_only=True):
    assistant_id: str | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None


@post_ok("/runs/crons/count", summary="LangGraph: count crons")
async def count_crons(data: JSONBody[CronCount], caller: LgCaller, deps: Deps) -> int:
    tenant = caller.tenant
    return len(_found(await _crons(deps, tenant, await caller.agency()), data))


CRON_ROUTES = [
    create_cron,
    create_thread_cron,
    update_cron,
    delete_cron,
    search_crons,
    count_crons,
]
