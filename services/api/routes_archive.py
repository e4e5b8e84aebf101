"""Archives over HTTP: export a thread, an agency or a tenant as a tar.gz; import one.

A tenant's key exports and imports its own data (a thread or an agency archive goes into
the caller's tenant); the admin exports any tenant and imports a tenant's archive, which
creates the tenant (`services/archive/`, `docs/operations.md`, "Archives").
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.params import QueryParameter

from agency.contracts.events.thread import END_USER_ID_PATTERN, end_user_problem
from agency.contracts.http import ArchiveImported
from agency.services.api.auth import (
    ADMIN_OPT,
    Caller,
    Deps,
    agency_owned,
    path_id,
    tenant_and_agency,
    tenant_of,
    thread_created,
)
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.path_params import AgencyId, TenantId, ThreadId
from agency.services.archive.errors import ArchiveError
from agency.services.archive.export import (
    Exported,
    export_agency,
    export_end_user,
    export_tenant,
    export_thread,
)
from agency.services.archive.load import import_archive
from agency.services.threads.reads import ThreadNotFound
from agency.services.threads.tenant_erasure import deleted_tenant

ARCHIVE_TYPE = "application/gzip"
_BUSY = {409: error_response(409, "A thread to export has a run in progress or waiting.")}
_REFUSED = {
    400: error_response(400, "The body is no archive, a malformed one, or one of another version."),
    409: error_response(409, "The tenant already holds what the archive creates."),
    413: error_response(413),
}
# An upload of more is refused with 413; `agency import` reads any size from a file.
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


def _refusal(e: ArchiveError | ThreadNotFound) -> HTTPException:
    status = e.status if isinstance(e, ArchiveError) else 404
    return HTTPException(status_code=status, detail=str(e))


def _download(exported: Exported) -> Response[bytes]:
    manifest = exported.manifest
    name = f"agency-{manifest.kind}-{manifest.root}.tar.gz"
    return Response(
        exported.data,
        media_type=ARCHIVE_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}/export",
    summary="Export a thread, its subagents and its agency's blueprints as an archive",
    media_type=ARCHIVE_TYPE,
    responses=_BUSY,
)
async def export_thread_route(
    agency_id: AgencyId, thread_id: ThreadId, principal: Caller, deps: Deps
) -> Response[bytes]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("thread id", thread_id)
    await thread_created(deps, tenant, agency_id, thread_id)
    try:
        return _download(await export_thread(deps.bus, tenant, thread_id))
    except (ArchiveError, ThreadNotFound) as e:
        raise _refusal(e) from e


@get(
    "/agency/{agencyId:str}/export",
    summary="Export an agency and every thread in it as an archive",
    media_type=ARCHIVE_TYPE,
    responses=_BUSY,
)
async def export_agency_route(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> Response[bytes]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_owned(deps, tenant, agency_id)
    try:
        return _download(await export_agency(deps.bus, tenant, agency_id))
    except ArchiveError as e:
        raise _refusal(e) from e


@get(
    "/export",
    summary="Export the caller's whole tenant, or one end user's threads, as an archive",
    description=(
        "With `endUserId`, the root threads created for that end user (with their "
        "subagents) and their agencies' events; 404 when the tenant has none."
    ),
    media_type=ARCHIVE_TYPE,
    responses={**_BUSY, 404: error_response(404, "The tenant has no threads of that end user.")},
)
async def export_own_tenant(
    principal: Caller,
    deps: Deps,
    end_user_id: Annotated[
        str | None,
        QueryParameter(
            name="endUserId",
            required=False,
            pattern=END_USER_ID_PATTERN,
            description="An end user's id, as given at the creation of their threads.",
        ),
    ] = None,
) -> Response[bytes]:
    tenant = tenant_of(principal)
    if end_user_id is not None and (problem := end_user_problem(end_user_id)) is not None:
        raise ValidationException(f"endUserId {problem}")
    try:
        if end_user_id is not None:
            return _download(await export_end_user(deps.bus, tenant, end_user_id))
        return _download(await export_tenant(deps.bus, tenant))
    except ArchiveError as e:
        raise _refusal(e) from e


@get(
    "/tenants/{tenantId:str}/export",
    opt={ADMIN_OPT: True},
    summary="Export a whole tenant as an archive (admin)",
    media_type=ARCHIVE_TYPE,
    responses=_BUSY,
)
async def export_tenant_route(tenant_id: TenantId, deps: Deps) -> Response[bytes]:
    tenant = path_id("tenant id", tenant_id)
    if await deleted_tenant(deps.bus, tenant) is not None:
        raise NotFoundException(f"tenant {tenant} was deleted")
    try:
        return _download(await export_tenant(deps.bus, tenant))
    except ArchiveError as e:
        raise _refusal(e) from e


# The imports are outside the OpenAPI document: their body is an archive, which no schema
# can tell from any other bytes (docs/api.md, "Archives").
@post(
    "/import",
    status_code=201,
    include_in_schema=False,
    request_max_body_size=MAX_UPLOAD_BYTES,
    responses=_REFUSED,
    summary="Import a thread's or an agency's archive into the caller's tenant",
    description=(
        "The body is the archive (`Content-Type: application/gzip`). Ids are kept, but for "
        "those derived from the tenant (`remapped`). 409 when the tenant already holds what "
        "the archive creates; 400 for an archive that is malformed or of another version."
    ),
)
async def import_into_tenant(
    request: Request[Any, Any, Any], principal: Caller, deps: Deps
) -> ArchiveImported:
    tenant = tenant_of(principal)
    return await _import(deps, await request.body(), tenant=tenant, operator=False)


@post(
    "/tenants/import",
    status_code=201,
    include_in_schema=False,
    opt={ADMIN_OPT: True},
    request_max_body_size=MAX_UPLOAD_BYTES,
    responses=_REFUSED,
    summary="Import a tenant's archive, creating the tenant with its id (admin)",
)
async def import_tenant_route(request: Request[Any, Any, Any], deps: Deps) -> ArchiveImported:
    return await _import(deps, await request.body(), tenant=None, operator=True)


async def _import(
    deps: ApiDeps, body: bytes, *, tenant: str | None, operator: bool
) -> ArchiveImported:
    try:
        done = await import_archive(
            deps.bus, body, tenant_id=tenant, operator=operator, door=deps.door
        )
    except ArchiveError as e:
        raise _refusal(e) from e
    return done.answer()


ARCHIVE_ROUTES = [
    export_thread_route,
    export_agency_route,
    export_own_tenant,
    export_tenant_route,
    import_into_tenant,
    import_tenant_route,
]
