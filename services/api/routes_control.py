"""Routes that steer a thread's run: approve and cancel, each bound to one run; and
terminate, which shuts the thread itself down.

The run is the one named by `runId` or, without it, the run active when the request
arrives; it is checked against the log up front, and one that is not active (or, for
approve, not awaiting approval) is a 409 saying so. The command carries the run id, so
however late or often it is delivered it acts on that run only, never on the next one.
The idempotency key (`idempotencyKey` in the body or the `Idempotency-Key` header) makes a
retried request one decision, even after the broker's duplicate window.

Terminate needs no active run: whatever the thread is doing ends (`run.canceled`, reason
`terminated`, for the active run and every queued request) and it refuses later invokes
(409 here; `request.rejected` over NATS). Terminating a terminated thread changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import msgspec
from litestar import post
from litestar.exceptions import HTTPException
from litestar.params import JSONBody

from agency.contracts.commands import ApproveToolCalls, CancelRun, TerminateThread
from agency.contracts.events import ToolCall
from agency.contracts.http import CancelAccepted, RunCommandAccepted, TerminateAccepted
from agency.contracts.ids import new_id
from agency.domain import tree_bounds
from agency.domain.thread_state import RunView, ThreadState
from agency.services.api.approval import Approval
from agency.services.api.auth import (
    Caller,
    Deps,
    path_id,
    tenant_of,
    thread_created,
    thread_terminated,
)
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.idempotency import IdempotencyKey, KeyHeader, header_key
from agency.services.api.openapi import error_response
from agency.services.api.path_params import AgencyId, ThreadId
from agency.services.api.routes_commands import Body, NonEmpty


class ToolCallIn(Body, frozen=True, kw_only=True):
    id: NonEmpty
    name: NonEmpty
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class ApproveBody(Body, frozen=True, kw_only=True):
    approved: bool
    modified_tool_calls: list[ToolCallIn] | None = None
    reason: str = ""
    run_id: NonEmpty | None = None
    idempotency_key: IdempotencyKey | None = None


class CancelBody(Body, frozen=True, kw_only=True):
    reason: str = ""
    run_id: NonEmpty | None = None
    idempotency_key: IdempotencyKey | None = None


class TerminateBody(Body, frozen=True, kw_only=True):
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    idempotency_key: IdempotencyKey | None = None


class RunNotActive(HTTPException):
    status_code = 409


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/approve",
    status_code=202,
    summary="Approve or reject the tool calls a paused run proposed",
    description="Bound to `runId` (default: the run awaiting approval now); 409 when that "
    "run does not await approval.",
    responses={409: error_response(409, "The run is not active or awaits no approval.")},
)
async def approve(
    agency_id: AgencyId,
    thread_id: ThreadId,
    data: JSONBody[ApproveBody],
    principal: Caller,
    deps: Deps,
    idempotency_header: KeyHeader = None,
) -> RunCommandAccepted:
    tenant, run = await _thread_and_run(principal, deps, agency_id, thread_id, data.run_id)
    if run.at_breakpoint and (not data.approved or data.modified_tool_calls):
        raise RunNotActive(
            detail=f"run {run.run_id} paused at a breakpoint before its model call, with no "
            "tool calls to reject or edit: approve it to go on, or cancel it"
        )
    if not run.at_breakpoint and (run.status != "paused" or not run.hitl_pending):
        raise RunNotActive(detail=f"run {run.run_id} is {run.status} and awaits no approval")
    calls = data.modified_tool_calls
    modified = (
        None
        if calls is None
        else tuple(ToolCall(id=c.id, name=c.name, arguments=json.dumps(c.args)) for c in calls)
    )
    command = Approval(data.approved, modified, data.reason).command(
        agency_id, thread_id, run.run_id
    )
    await _send(deps, tenant, "approve", command, data.idempotency_key, idempotency_header)
    return RunCommandAccepted(run_id=run.run_id)


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/cancel",
    status_code=202,
    summary="Cancel the thread's active run (and its subagents), or a queued one",
    description="Bound to `runId` (default: the run active now); 409 when that run is "
    "neither active nor queued. A queued run named by `runId` is withdrawn (`run.canceled`): "
    "it never starts nor joins the active run, which goes on. A retried cancel never "
    "cancels a later run. Without `runId`, a thread with no "
    "active run but subagents below it answers 202 (`runId` null): their runs are canceled, "
    "and the runs under way in its tree start no more subagents.",
    responses={
        409: error_response(
            409, "The thread has no active run nor subagents, or that run is not active nor queued."
        )
    },
)
async def cancel(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[CancelBody | None] = None,
    idempotency_header: KeyHeader = None,
) -> CancelAccepted:
    data = data or CancelBody()
    try:
        tenant, run = await _thread_and_run(
            principal, deps, agency_id, thread_id, data.run_id, queued=True
        )
    except RunNotActive:
        # No run here, but its subagents may run: the cancel reaches them (`tree_stops`).
        if data.run_id is not None or not await _has_subagents(principal, deps, thread_id):
            raise
        tenant, run = tenant_of(principal), None
    run_id = run.run_id if run is not None else None
    command = CancelRun(agency_id=agency_id, thread_id=thread_id, reason=data.reason, run_id=run_id)
    await _send(deps, tenant, "cancel", command, data.idempotency_key, idempotency_header)
    return CancelAccepted(run_id=run_id)


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/terminate",
    status_code=202,
    summary="Shut the thread down for good",
    description="A soft shutdown: the active run ends (`run.canceled`, reason `terminated`, "
    "its open tool calls answered) with its subagents, queued requests are canceled, and "
    "every later invoke is refused (409). A child's parent shows it `terminated` in its "
    "registry. Terminating a terminated thread answers `terminated` and sends nothing.",
)
async def terminate(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[TerminateBody | None] = None,
    idempotency_header: KeyHeader = None,
) -> TerminateAccepted:
    tenant, agency_id, thread_id = await _thread(principal, deps, agency_id, thread_id)
    if await thread_terminated(deps, tenant, thread_id) is not None:
        return TerminateAccepted(thread_id=thread_id, status="terminated")
    data = data or TerminateBody()
    command = TerminateThread(agency_id=agency_id, thread_id=thread_id, reason=data.reason)
    await _send(deps, tenant, "terminate", command, data.idempotency_key, idempotency_header)
    return TerminateAccepted(thread_id=thread_id, status="terminating")


CONTROL_ROUTES = [approve, cancel, terminate]


async def _thread(
    principal: Principal, deps: ApiDeps, agency_id: str, thread_id: str
) -> tuple[str, str, str]:
    """(tenant, agency id, thread id) of a thread the caller owns; 400 / 403 / 404 otherwise."""
    tenant = tenant_of(principal)
    await thread_created(deps, tenant, agency_id, thread_id)
    return tenant, agency_id, thread_id


async def _thread_and_run(
    principal: Principal,
    deps: ApiDeps,
    agency_id: str,
    thread_id: str,
    run_id: str | None,
    *,
    queued: bool = False,
) -> tuple[str, RunView]:
    """The caller's tenant and the run a command will be bound to (`_bound_run`), the
    thread checked to be the caller's (404 first) while it is read, not before."""
    tenant = tenant_of(principal)
    path_id("agency id", agency_id)
    path_id("thread id", thread_id)  # valid before any read names it
    owned, state = await asyncio.gather(
        _thread(principal, deps, agency_id, thread_id),
        deps.threads.load(tenant, thread_id),
        return_exceptions=True,
    )
    if isinstance(owned, BaseException):
        raise owned
    if isinstance(state, BaseException):
        raise state
    return tenant, _bound_run(state, thread_id, run_id, queued=queued)


async def _has_subagents(principal: Principal, deps: ApiDeps, thread_id: str) -> bool:
    """Whether a thread below `thread_id` in its subagent tree has a run active or queued."""
    tenant = tenant_of(principal)
    state = await deps.threads.load(tenant, thread_id)
    root = state.correlation_id or thread_id
    history = await deps.bus.store.read(tenant, "tree", root)
    for child in tree_bounds.fold(root, [e.payload for e in history]).below(thread_id):
        below = await deps.threads.load(tenant, child)
        if below.active_run is not None or below.queue:
            return True
    return False


def _bound_run(
    state: ThreadState, thread_id: str, run_id: str | None, *, queued: bool = False
) -> RunView:
    """The run a command will be bound to: `run_id`, or the active one; 409 if not active
    (nor, with `queued`, a request queued behind it)."""
    active = state.active_run
    if run_id is None:
        if active is None:
            raise RunNotActive(detail=f"thread {thread_id} has no active run")
        return active
    named = state.run(run_id)
    if named is None:
        raise RunNotActive(detail=f"thread {thread_id} has no run {run_id}")
    if queued and state.queued(run_id) is not None:
        return named
    if active is None or active.run_id != run_id:
        raise RunNotActive(detail=f"run {run_id} is not active (it is {named.status})")
    return named


async def _send(
    deps: ApiDeps,
    tenant: str,
    verb: str,
    command: ApproveToolCalls | CancelRun | TerminateThread,
    body_key: str | None,
    header: str | None,
) -> None:
    """Sends `command` keyed on the bus by its thread, `verb` and the request's idempotency
    key (the body's, else the header's; the broker dedupes per tenant, so the thread is in
    it); no key, a fresh one."""
    key = body_key or header_key(header)
    bus_key = f"{command.thread_id}:{verb}:{key}" if key else new_id()
    await deps.bus.commands.send(tenant, command, idempotency_key=bus_key)
