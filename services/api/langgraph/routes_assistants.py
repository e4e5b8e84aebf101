"""Assistants of the LangGraph Agent Server API that change or describe blueprints.

An assistant is a blueprint of the agency, by name; its `version` is the blueprint's saved
revision. Creating, updating and `set_latest` save a blueprint (`registry.save_blueprint`,
a `blueprint.saved` on the agency's log); deleting deletes the agency's own
(`registry.delete_blueprint`), with `delete_threads` after erasing the threads running as it
(`threads.delete`, docs/data.md). Versions are the blueprint's `blueprint.saved` events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import delete, patch
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.params import JSONBody, QueryParameter

from agency.contracts.commands import DeleteBlueprint, SaveBlueprint
from agency.contracts.events import BlueprintDeleted, BlueprintSaved, BlueprintSpec
from agency.contracts.ids import is_valid_token, new_id
from agency.services.api.auth import Deps, agency_events, agent_types
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.routes_thread_admin import erase_ours
from agency.services.api.langgraph.scope import (
    AssistantIdPath,
    LgCaller,
    assistant_named,
    assistants,
    client_fields,
)
from agency.services.api.langgraph.wire import Assistant, Body, Page
from agency.services.api.readback import refuse_prompt, send_and_read
from agency.services.api.routes_erasure import requester


class AssistantUpdate(Body, frozen=True, kw_only=True):
    graph_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None


class AssistantCreate(AssistantUpdate, frozen=True, kw_only=True):
    """An update's fields, and the new assistant's id and what to do if it exists."""

    assistant_id: str | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None


class AssistantCount(Body, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None


class VersionsBody(Page, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None


class SetLatest(Body, frozen=True, kw_only=True):
    version: int


# Where an assistant's `config` and `context` are kept in its blueprint's metadata.
LANGGRAPH_KEY = "langgraph"


def _with_client_fields(
    spec: BlueprintSpec, data: AssistantUpdate, *, merge: bool
) -> dict[str, Any]:
    """The blueprint's metadata after `data`: its `metadata` merged into the blueprint's
    (an update, as LangGraph merges) or in its place (a new assistant), and its `config`
    and `context`, when given, in place of the kept ones under `langgraph`."""
    given = dict(data.metadata or {})
    if LANGGRAPH_KEY in given:
        raise ValidationException(f"assistant metadata key {LANGGRAPH_KEY!r} is reserved")
    kept = spec.metadata if merge else {}
    metadata: dict[str, Any] = {**kept, **given}
    section = dict(spec.metadata.get(LANGGRAPH_KEY) or {}) if merge else {}
    for name, value in (("config", data.config), ("context", data.context)):
        if value is not None:
            section[name] = value
    if section:
        metadata[LANGGRAPH_KEY] = section
    else:
        metadata.pop(LANGGRAPH_KEY, None)
    return metadata


def _blueprint_name(value: str, field: str) -> str:
    if not is_valid_token(value):
        raise ValidationException(
            f"{field} {value[:80]!r} must be a blueprint name: 1 to 64 letters, digits, `-` or `_`"
        )
    return value


async def _blueprints(
    deps: ApiDeps, tenant: str, agency_id: str
) -> tuple[dict[str, BlueprintSpec], list[Any]]:
    events = await agency_events(deps, tenant, agency_id)
    return agent_types(deps, events), events


async def _save(deps: ApiDeps, tenant: str, agency_id: str, spec: BlueprintSpec) -> Assistant:
    refuse_prompt(deps, spec)
    command = SaveBlueprint(agency_id=agency_id, blueprint=spec)
    await send_and_read(deps, tenant, "agency", agency_id, command, from_end=True)
    return await assistant_named(deps, tenant, agency_id, spec.name)


@post_ok("/assistants", summary="LangGraph: create an assistant (save a blueprint)")
async def create_assistant(
    data: JSONBody[AssistantCreate], caller: LgCaller, deps: Deps
) -> Assistant:
    """A new blueprint of the agency, a copy of the blueprint `graph_id` named
    `assistant_id` (else `name`, when it is a blueprint name; else `<graph_id>-<id>`);
    `name` is its title and `description` its description."""
    tenant = caller.tenant
    if not data.graph_id:
        raise ValidationException("graph_id is required: the blueprint the assistant copies")
    agency_id = await caller.agency()
    known, _ = await _blueprints(deps, tenant, agency_id)
    base = known.get(data.graph_id)
    if base is None:
        raise NotFoundException(
            f"graph {data.graph_id[:80]!r} not found in agency {agency_id}: graphs are the "
            "agency's blueprints, by name"
        )
    if data.assistant_id:
        name = _blueprint_name(data.assistant_id, "assistant_id")
    elif data.name and is_valid_token(data.name):
        name = data.name
    else:
        name = f"{data.graph_id[:37]}-{new_id().lower()}"
    if name in known:
        if data.if_exists == "do_nothing":
            return await assistant_named(deps, tenant, agency_id, name)
        raise ClientException(status_code=409, detail=f"assistant {name!r} already exists")
    spec = msgspec.structs.replace(
        base,
        name=name,
        title=data.name or base.title,
        description=base.description if data.description is None else data.description,
        metadata=_with_client_fields(base, data, merge=False),
    )
    return await _save(deps, tenant, agency_id, spec)


@patch("/assistants/{assistant_id:str}", summary="LangGraph: update an assistant")
async def update_assistant(
    assistant_id: AssistantIdPath, data: JSONBody[AssistantUpdate], caller: LgCaller, deps: Deps
) -> Assistant:
    """Save a new revision of the blueprint: its title (`name`) and `description`, or a
    copy of the blueprint `graph_id` under this name."""
    tenant = caller.tenant
    agency_id = await caller.agency()
    known, _ = await _blueprints(deps, tenant, agency_id)
    current = known.get(assistant_id)
    if current is None:
        await assistant_named(deps, tenant, agency_id, assistant_id)  # 404 naming it
        raise AssertionError
    if data.graph_id and data.graph_id != assistant_id:
        base = known.get(data.graph_id)
        if base is None:
            raise NotFoundException(f"graph {data.graph_id[:80]!r} not found in agency {agency_id}")
        current = msgspec.structs.replace(base, name=assistant_id)
    spec = msgspec.structs.replace(
        current,
        title=current.title if data.name is None else data.name,
        description=current.description if data.description is None else data.description,
        metadata=_with_client_fields(current, data, merge=True),
    )
    return await _save(deps, tenant, agency_id, spec)


@delete("/assistants/{assistant_id:str}", status_code=204, summary="LangGraph: delete an assistant")
async def delete_assistant(
    assistant_id: AssistantIdPath,
    caller: LgCaller,
    deps: Deps,
    delete_threads: Annotated[bool, QueryParameter(name="delete_threads", required=False)] = False,
) -> None:
    """Delete the agency's own blueprint (a static one of that name comes back); with
    `delete_threads`, its threads are erased first, as `threads.delete` erases them."""
    tenant = caller.tenant
    agency_id = await caller.agency()
    events = await agency_events(deps, tenant, agency_id)
    if _saved_now(events, assistant_id) is None:
        if assistant_id in deps.system.blueprints:
            raise ClientException(
                status_code=409,
                detail=f"assistant {assistant_id!r} is a static blueprint of the system's "
                "configuration; only an agency's own blueprints can be deleted",
            )
        await assistant_named(deps, tenant, agency_id, assistant_id)  # 404 naming it
        raise AssertionError
    if delete_threads:
        threads = await _threads_of(deps, tenant, agency_id, assistant_id)
        await erase_ours(deps, tenant, threads, requester(caller.principal))
    command = DeleteBlueprint(agency_id=agency_id, name=assistant_id)
    await send_and_read(deps, tenant, "agency", agency_id, command)


async def _threads_of(deps: ApiDeps, tenant: str, agency_id: str, name: str) -> list[str]:
    """The agency's root threads running as blueprint `name`, as `threads.search` lists them."""
    await deps.listings.listed(tenant, deps.settings.read_lag_timeout)
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT thread_id FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
            "AND parent_thread_id IS NULL AND agent_type = $3 ORDER BY thread_id",
            tenant,
            agency_id,
            name,
        )
    return [row["thread_id"] for row in rows]


def _saved_now(events: list[Any], name: str) -> BlueprintSaved | None:
    """The agency's own blueprint `name` as last saved, None if none or deleted since."""
    saved: BlueprintSaved | None = None
    for e in events:
        match e.payload:
            case BlueprintSaved(blueprint=spec) as found if spec.name == name:
                saved = found
            case BlueprintDeleted(name=deleted) if deleted == name:
                saved = None
    return saved


@post_ok("/assistants/count", summary="LangGraph: count assistants")
async def count_assistants(data: JSONBody[AssistantCount], caller: LgCaller, deps: Deps) -> int:
    tenant = caller.tenant
    wanted = data.metadata or {}
    needle = (data.name or "").lower()
    return sum(
        1
        for a in await assistants(deps, tenant, await caller.agency())
        if (data.graph_id is None or a.graph_id == data.graph_id)
        and needle in a.name.lower()
        and all(a.metadata.get(k) == v for k, v in wanted.items())
    )


def _version(latest: Assistant, revision: int, saved: datetime, spec: BlueprintSpec) -> Assistant:
    """The assistant as the blueprint's revision `revision` was saved."""
    own, config, context = client_fields(spec.metadata)
    derived = {k: latest.metadata[k] for k in ("agency_id", "source", "type")}
    return msgspec.structs.replace(
        latest,
        version=revision,
        updated_at=saved,
        name=spec.title or spec.name,
        description=spec.description or None,
        metadata={**own, **derived, "model": spec.model, "tags": list(spec.tags)},
        config=config,
        context=context,
    )


@post_ok(
    "/assistants/{assistant_id:str}/versions",
    summary="LangGraph: an assistant's versions (the blueprint's saved revisions)",
)
async def assistant_versions(
    assistant_id: AssistantIdPath, data: JSONBody[VersionsBody], caller: LgCaller, deps: Deps
) -> list[Assistant]:
    """Newest first; a static blueprint never saved by the agency has one, version 1."""
    tenant = caller.tenant
    data.checked()
    agency_id = await caller.agency()
    latest = await assistant_named(deps, tenant, agency_id, assistant_id)
    events = await agency_events(deps, tenant, agency_id)
    versions = [
        _version(latest, e.payload.revision, e.envelope.ts, e.payload.blueprint)
        for e in events
        if isinstance(e.payload, BlueprintSaved) and e.payload.blueprint.name == assistant_id
    ]
    if not versions:
        versions = [latest]
    wanted = data.metadata or {}
    found = [
        v for v in reversed(versions) if all(v.metadata.get(k) == x for k, x in wanted.items())
    ]
    return found[data.offset : data.offset + data.limit]


@post_ok(
    "/assistants/{assistant_id:str}/latest",
    summary="LangGraph: make a version the latest (save that revision again)",
)
async def set_latest(
    assistant_id: AssistantIdPath, data: JSONBody[SetLatest], caller: LgCaller, deps: Deps
) -> Assistant:
    """The log is append-only: the blueprint as saved at revision `version` is saved again,
    as its newest revision."""
    tenant = caller.tenant
    agency_id = await caller.agency()
    latest = await assistant_named(deps, tenant, agency_id, assistant_id)
    events = await agency_events(deps, tenant, agency_id)
    if latest.version == data.version:
        return latest  # the latest already
    chosen = next(
        (
            e.payload.blueprint
            for e in events
            if isinstance(e.payload, BlueprintSaved)
            and e.payload.blueprint.name == assistant_id
            and e.payload.revision == data.version
        ),
        None,
    )
    if chosen is None:
        raise NotFoundException(f"assistant {assistant_id!r} has no version {data.version}")
    return await _save(deps, tenant, agency_id, chosen)


ASSISTANT_ROUTES = [
    create_assistant,
    update_assistant,
    delete_assistant,
    count_assistants,
    assistant_versions,
    set_latest,
]
