"""`POST /agency/{agencyId}/agent/{threadId}/fork`: a new thread from a thread's history.

The fork is appended to the log before the answer (201), so the new thread can be invoked
at once (the invoke route checks threads against the log); the read models show it as soon
as the projector has applied it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import post
from litestar.exceptions import ValidationException
from litestar.params import JSONBody

from services.api.auth import (
    AgencyId,
    Caller,
    Deps,
    ThreadId,
    agency_events,
    agent_types,
    path_id,
    tenant_of,
    thread_created,
)
from services.replay.fork import ForkError, fork_thread

Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class ForkBody(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    at_seq: Annotated[int, msgspec.Meta(ge=1)]
    agent_type: Token | None = None


class ForkOut(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    thread_id: str
    forked_from: str
    at_seq: int
    # Original child thread id → its fork, for children forked along with the thread.
    children: dict[str, str]
    canceled_runs: list[str]


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/fork",
    status_code=201,
    summary="Fork a thread (and its running subagents) at one of its events",
    description=(
        "Copies the thread's history up to `atSeq` into a new thread (ending any run in "
        "progress there with `run.canceled`, reason 'forked mid-run'); children created "
        "before that event are forked at the same moment. `agentType` switches the new "
        "thread's blueprint. Invoke the new thread as usual."
    ),
)
async def fork(
    agency_id: AgencyId,
    thread_id: ThreadId,
    data: JSONBody[ForkBody],
    principal: Caller,
    deps: Deps,
) -> ForkOut:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    thread_id = path_id("thread id", thread_id)
    await thread_created(deps, tenant, agency_id, thread_id)
    known = None
    if data.agent_type is not None:
        known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    try:
        result = await fork_thread(
            deps.bus,
            tenant,
            thread_id,
            data.at_seq,
            agent_type=data.agent_type,
            known_agent_types=known,
        )
    except ForkError as e:
        raise ValidationException(str(e)) from e
    return ForkOut(
        thread_id=result.thread_id,
        forked_from=thread_id,
        at_seq=result.at_seq,
        children=result.children,
        canceled_runs=[run for runs in result.canceled_runs.values() for run in runs],
    )


FORK_ROUTES = [fork]
