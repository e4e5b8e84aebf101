"""Deleting a thread: `DELETE /threads/{threadId}` (docs/data.md).

The whole subagent tree of the thread goes (its threads share one data key): tombstones
appended, the key destroyed, and the answer given once the read models have dropped the
tree's rows (within `read_lag_timeout`; `readModelsCaughtUp` says whether they had). A
repeat answers the first deletion. Reads of a deleted thread answer 410 with it.
"""

from __future__ import annotations

import re
from typing import Annotated

from litestar import Response, delete, post
from litestar.exceptions import NotFoundException, ValidationException
from litestar.handlers import HTTPRouteHandler
from litestar.params import PathParameter

from agency.contracts.events import (
    AgencyDeleted,
    AgencyDeletionRequested,
    EndUserForgetRequested,
    TenantDeletionRequested,
)
from agency.contracts.events.thread import END_USER_ID_PATTERN
from agency.contracts.http import AgencyDeletion, EndUserForgetting, TenantDeletion, ThreadDeletion
from agency.projections import agency_queries, catalog, queries
from agency.services.api.auth import ADMIN_OPT, Caller, Deps, path_id
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.path_params import TenantId
from agency.services.api.routes_queries import AgencyId, ThreadId, path_token
from agency.services.threads.erasure import Deletion, delete_tree, deletion_of
from agency.services.threads.scope_erasure import carry_out, request_erasure
from agency.services.threads.tenant_erasure import TenantErased, carry_out_tenant


def requester(principal: Principal) -> str:
    """Who asked, as the tombstone records it: the API key, the admin, or the tenant's
    shared secret."""
    if principal.admin:
        return "admin"
    if principal.key_id is not None:
        return f"api-key:{principal.key_id}"
    return f"tenant:{principal.tenant_id}"


async def erase_thread(
    deps: ApiDeps, tenant: str, thread_id: str, requested_by: str, *, may_be_empty: bool = False
) -> Deletion:
    """Delete the thread's tree (404 unless the tenant has the thread, or `may_be_empty`:
    one the caller knows is the tenant's though nothing is written of it yet); the deletion
    as recorded, the first one when it was deleted already."""
    earlier = await deletion_of(deps.bus, tenant, thread_id)
    if earlier is not None:
        # Finish what a stopped deletion may have left: the key, the other tombstones.
        await delete_tree(deps.bus, tenant, earlier.root_thread_id, earlier.tree, requested_by)
        return earlier
    async with deps.pool.acquire() as conn:
        tree = await queries.tree_threads(conn, tenant, thread_id)
    if tree is None:
        first = await deps.bus.store.first(tenant, "thread", thread_id)
        if first is None and not may_be_empty:
            raise NotFoundException(detail=f"no agent thread {thread_id!r}")
        root = (first.envelope.correlation_id if first else None) or thread_id
        tree = (root, [root, thread_id])
    root, threads = tree
    await delete_tree(deps.bus, tenant, root, threads, requested_by)
    deletion = await deletion_of(deps.bus, tenant, thread_id)
    assert deletion is not None
    return deletion


@delete("/threads/{threadId:str}", status_code=200, summary="Delete a thread and its tree")
async def delete_thread(
    thread_id: ThreadId, principal: Caller, deps: Deps
) -> Response[ThreadDeletion]:
    """Erase the thread's content and its subagent tree's: their data key is destroyed, so
    the log keeps only what stays in clear (docs/data.md); reads answer 410 from now on."""
    thread_id = path_token("thread id", thread_id)
    deletion = await erase_thread(deps, principal.tenant_id, thread_id, requester(principal))
    caught_up = await deps.progress.wait_passed(
        catalog.NAMES,
        deletion.stream_seq,
        deps.settings.read_lag_timeout,
        partition=deps.bus.layout.partition(thread_id),
    )
    return Response(
        ThreadDeletion(
            thread_id=thread_id,
            root_thread_id=deletion.root_thread_id,
            deleted_at=deletion.deleted_at,
            requested_by=deletion.requested_by,
            threads=list(deletion.tree),
            read_models_caught_up=caught_up,
        )
    )


@post("/users/{endUserId:str}/forget", status_code=200, summary="Delete an end user's threads")
async def forget_end_user(
    end_user_id: Annotated[str, PathParameter(name="endUserId")],
    principal: Caller,
    deps: Deps,
) -> Response[EndUserForgetting]:
    """Delete every thread created for the end user (`endUserId` at creation, LangGraph's
    `metadata.user_id`) across the tenant's agencies, each with its subagent tree. The
    request is recorded first (who asked, when); a repeat deletes what is left."""
    if not re.fullmatch(END_USER_ID_PATTERN, end_user_id):
        raise ValidationException(
            detail=f"end user id {end_user_id[:80]!r} must be 1 to 128 letters, digits or ._@+:-"
        )
    tenant = principal.tenant_id
    asked = EndUserForgetRequested(end_user_id=end_user_id, requested_by=requester(principal))
    request = await request_erasure(deps.bus, tenant, asked)
    done = await carry_out(deps.bus, request)
    # The record is on the tenant's aggregate: its partition's read models are waited on.
    caught_up = await deps.progress.wait_passed(
        catalog.NAMES, done.stream_seq, deps.settings.read_lag_timeout,
        partition=deps.bus.layout.partition(tenant),
    )  # fmt: skip
    return Response(
        EndUserForgetting(
            end_user_id=end_user_id,
            request_id=request.envelope.event_id,
            requested_at=request.envelope.ts,
            requested_by=requester(principal),
            threads=list(done.threads),
            read_models_caught_up=caught_up,
        )
    )


@delete("/agencies/{agencyId:str}", status_code=200, summary="Delete an agency and its threads")
async def delete_agency(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> Response[AgencyDeletion]:
    """Delete every thread of the agency, each with its subagent tree, then the agency
    (`agency.deleted`, its last event): it is no longer listed, and its routes answer 404.
    The request is recorded first (who asked, when); a repeat answers the first deletion."""
    agency_id = path_token("agency id", agency_id)
    return Response(await erase_agency(deps, principal.tenant_id, agency_id, requester(principal)))


async def erase_agency(
    deps: ApiDeps, tenant: str, agency_id: str, requested_by: str
) -> AgencyDeletion:
    """Delete the agency's threads, then the agency (404 unless the tenant has it); the
    deletion as recorded, the first one when it was deleted already."""
    events = await deps.bus.store.read(tenant, "agency", agency_id)
    if not events or events[0].type != "agency.created":
        raise NotFoundException(detail=f"no agency {agency_id!r}")
    earlier = events[-1].payload
    if isinstance(earlier, AgencyDeleted):
        return AgencyDeletion(
            agency_id=agency_id,
            request_id=earlier.request_id,
            requested_at=events[-1].envelope.ts,
            requested_by=earlier.requested_by,
            threads=list(earlier.threads),
        )
    asked = AgencyDeletionRequested(agency_id=agency_id, requested_by=requested_by)
    request = await request_erasure(deps.bus, tenant, asked)
    done = await carry_out(deps.bus, request)
    deps.known.agency_deleted(tenant, agency_id)
    caught_up = await deps.progress.wait_passed(
        catalog.NAMES, done.stream_seq, deps.settings.read_lag_timeout,
        partition=deps.bus.layout.partition(agency_id),
    )  # fmt: skip
    return AgencyDeletion(
        agency_id=agency_id,
        request_id=request.envelope.event_id,
        requested_at=request.envelope.ts,
        requested_by=requested_by,
        threads=list(done.threads),
        read_models_caught_up=caught_up,
    )


@delete(
    "/tenants/{tenantId:str}/agencies",
    status_code=200,
    opt={ADMIN_OPT: True},
    summary="Delete every agency of a tenant, with their threads (admin)",
)
async def delete_tenant_agencies(tenant_id: TenantId, deps: Deps) -> Response[list[AgencyDeletion]]:
    """Each agency of the tenant deleted as `DELETE /agencies/{agencyId}` deletes it, at
    the request of `admin`; a repeat deletes what is left."""
    tenant = path_id("tenant id", tenant_id)
    async with deps.pool.acquire() as conn:
        agencies = await agency_queries.list_agencies(conn, tenant)
    return Response([await erase_agency(deps, tenant, a.id, "admin") for a in agencies])


@delete(
    "/tenants/{tenantId:str}",
    status_code=200,
    opt={ADMIN_OPT: True},
    summary="Delete a tenant: its agencies and threads, its API keys and its key (admin)",
)
async def delete_tenant(tenant_id: TenantId, deps: Deps) -> Response[TenantDeletion]:
    """Each agency of the tenant deleted as `DELETE /agencies/{agencyId}` deletes it, then
    every API key revoked, `tenant.deleted` recorded as its last event and its key
    destroyed, at the request of `admin` (docs/data.md). A repeat answers the first
    deletion; 404 for a tenant that never existed."""
    tenant = path_id("tenant id", tenant_id)
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    if not any(e.type == "tenant.created" for e in history):
        raise NotFoundException(detail=f"tenant {tenant} not found")
    request = next((e for e in history if isinstance(e.payload, TenantDeletionRequested)), None)
    if request is None:
        asked = TenantDeletionRequested(requested_by="admin")
        request = await request_erasure(deps.bus, tenant, asked)
    # Its NATS user goes too, on a server Agency manages.
    done = await carry_out_tenant(deps.bus, request, deps.nats_credentials)
    for agency_id in done.payload.agencies:
        deps.known.agency_deleted(tenant, agency_id)
    for key_id in done.payload.api_keys:
        deps.keys.revoke(tenant, key_id)
    # The record is on the tenant's aggregate: its partition's read models are waited on.
    caught_up = await deps.progress.wait_passed(
        catalog.NAMES, done.deleted.stream_seq, deps.settings.read_lag_timeout,
        partition=deps.bus.layout.partition(tenant),
    )  # fmt: skip
    return Response(_tenant_deletion(done, caught_up))


def _tenant_deletion(done: TenantErased, caught_up: bool) -> TenantDeletion:
    deleted = done.payload
    return TenantDeletion(
        tenant_id=done.request.envelope.tenant_id,
        request_id=deleted.request_id,
        requested_at=done.request.envelope.ts,
        requested_by=deleted.requested_by,
        deleted_at=done.deleted.envelope.ts,
        agencies=list(deleted.agencies),
        api_keys_revoked=list(deleted.api_keys),
        read_models_caught_up=caught_up,
    )


ERASURE_ROUTES: list[HTTPRouteHandler] = [
    delete_thread,
    forget_end_user,
    delete_agency,
    delete_tenant_agencies,
    delete_tenant,
]
