"""`POST /agency/{agencyId}/agent/{threadId}/fork`: a new thread from a thread's history.

The API writes nothing itself: it checks the request against the log (planning the fork
without writing it, so a fork that cannot be made is a 400), sends `registry.fork_thread`
with the new thread's id, and waits (bounded) until the registry has written the fork: 201,
and the new thread can be invoked at once. Past the bound, 202 with the same body; the
registry finishes the fork (a redelivered command completes the same fork).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Response, post
from litestar.exceptions import NotFoundException
from litestar.params import JSONBody

from agency.contracts.commands import ForkThread
from agency.contracts.http import ForkOut
from agency.contracts.ids import new_id
from agency.services.api.auth import (
    Caller,
    Deps,
    agency_events,
    agent_types,
    path_id,
    tenant_and_agency,
    thread_created,
)
from agency.services.api.deps import ApiDeps
from agency.services.api.logwait import watch_log
from agency.services.api.path_params import AgencyId, ThreadId
from agency.services.threads.fork import ForkError, ForkPlan, plan_fork

Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class ForkBody(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    at_seq: Annotated[int, msgspec.Meta(ge=1)]
    agent_type: Token | None = None


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
) -> Response[ForkOut]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("thread id", thread_id)
    await thread_created(deps, tenant, agency_id, thread_id)
    known = None
    if data.agent_type is not None:
        known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    fork_id = new_id()
    try:
        plan = await plan_fork(
            deps.bus, tenant, thread_id, data.at_seq,
            agent_type=data.agent_type, known_agent_types=known, fork_id=fork_id,
        )  # fmt: skip
    except ForkError as e:
        # A well-formed request naming what the thread or the agency does not have (an
        # event `atSeq`, a blueprint `agentType`): not found, as for a thread's creation.
        raise NotFoundException(str(e)) from e
    command = ForkThread(
        agency_id=agency_id, thread_id=thread_id, at_seq=data.at_seq,
        fork_thread_id=fork_id, agent_type=data.agent_type,
    )  # fmt: skip
    done = await send_fork(deps, tenant, command, plan)
    return Response(plan.result.answer(), status_code=201 if done else 202)


async def send_fork(deps: ApiDeps, tenant: str, command: ForkThread, plan: ForkPlan) -> bool:
    """Sends `command` once the copy's log is watched (see `watch_log`); whether the copy
    was all written within the read-your-writes wait."""
    fork_id = command.fork_thread_id
    expected = plan.events_of(fork_id)
    async with watch_log(deps.bus.nc, deps.bus.store, tenant, "thread", fork_id) as log:
        await deps.bus.commands.send(tenant, command, idempotency_key=f"fork:{fork_id}")

        def written(_: object) -> bool | None:
            return True if log.position is not None and log.position.seq >= expected else None

        return await log.until(written, deps.settings.read_your_writes_timeout) is not None


FORK_ROUTES = [fork]
