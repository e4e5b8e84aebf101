"""A code agent's settings: `GET` / `PUT /agency/{agencyId}/blueprints/{name}/settings`.

`GET` answers the declared schema (JSON Schema of the agent class's `Settings`), each field
with its type, default and effective value, the registered settings, the agency's
overrides and the settings the next run gets. `PUT {"settings": {…}}` replaces the agency's
overrides: they are validated against the schema (400 naming the field) and saved as
`config.extra.settings` of the agency's blueprint of that name (the static one is copied
into an agency blueprint when there is none yet), which the runtime reads for the next run.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Response, get, put
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from agency.contracts.events import BlueprintSpec
from agency.contracts.http import Out
from agency.services.agents.code import SettingsError
from agency.services.agents.code_settings import SettingsView, describe, with_overrides
from agency.services.agents.system import CodeAgentSpec
from agency.services.api.auth import Caller, Deps, agency_events, agent_types, path_id, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.path_params import AgencyId, BlueprintName
from agency.services.api.readback import send_blueprint
from agency.services.api.routes_commands import Body


class SettingsFieldOut(Out, frozen=True, kw_only=True):
    """One field of the schema: `type` shortly (`string`, `integer | null`), `default`
    (null when `required`), `value` the next run's, `overridden` whether the agency set it."""

    name: str
    type: str
    required: bool
    default: Any
    value: Any
    overridden: bool


class AgentSettingsOut(Out, frozen=True, kw_only=True):
    """`settingsSchema` is null for an agent declaring no `Settings` (it takes any object);
    `settings` is null, and `problem` says why, when the saved overrides do not fit. A
    prompt blueprint (`kind` `prompt`) has no settings: no schema, no fields, `settings`
    null."""

    agent_type: str
    kind: Literal["code", "prompt"] = "code"
    settings_schema: dict[str, Any] | None
    fields: list[SettingsFieldOut]
    registered: dict[str, Any]
    overrides: dict[str, Any]
    settings: dict[str, Any] | None
    problem: str | None = None
    revision: int | None = None


class SettingsBody(Body, frozen=True, kw_only=True):
    """The agency's overrides, replacing the previous ones (`{}` clears them)."""

    settings: dict[str, Any]


def settings_out(name: str, view: SettingsView, revision: int | None = None) -> AgentSettingsOut:
    return AgentSettingsOut(
        agent_type=name,
        settings_schema=view.schema,
        fields=msgspec.convert(view.fields, list[SettingsFieldOut], from_attributes=True),
        registered=view.registered,
        overrides=view.overrides,
        settings=view.settings,
        problem=view.problem,
        revision=revision,
    )


async def _blueprint(
    deps: ApiDeps, tenant: str, agency_id: str, name: str
) -> tuple[CodeAgentSpec | None, BlueprintSpec]:
    """The agency's blueprint `name` and its code agent (None for a prompt blueprint), or
    404."""
    agency_id = path_id("agency id", agency_id)
    name = path_id("blueprint name", name)
    blueprint = agent_types(deps, await agency_events(deps, tenant, agency_id)).get(name)
    if blueprint is None:
        raise NotFoundException(f"no blueprint {name!r} in agency {agency_id!r}")
    return deps.system.code_agent_for(name), blueprint


@get(
    "/agency/{agencyId:str}/blueprints/{name:str}/settings",
    summary="A code agent's settings: schema, defaults and the values of the next run",
    description="A prompt blueprint answers `kind` `prompt` and no settings; 404 when the "
    "agency has no blueprint of that name.",
)
async def get_settings(
    agency_id: AgencyId, name: BlueprintName, principal: Caller, deps: Deps
) -> AgentSettingsOut:
    code, blueprint = await _blueprint(deps, tenant_of(principal), agency_id, name)
    if code is None:
        return AgentSettingsOut(
            agent_type=blueprint.name,
            kind="prompt",
            settings_schema=None,
            fields=[],
            registered={},
            overrides={},
            settings=None,
        )
    return settings_out(code.name, describe(code, blueprint))


@put(
    "/agency/{agencyId:str}/blueprints/{name:str}/settings",
    summary="Replace the agency's overrides of a code agent's settings",
    description="The overrides are validated against the agent's `Settings` schema (400 "
    "naming the field) and used from the next run on. 202 when the saved blueprint is not "
    "readable yet; 409 for a prompt blueprint, which has no settings.",
    responses={
        409: error_response(409, "The blueprint is a prompt blueprint: it has no settings."),
        202: ResponseSpec(
            data_container=AgentSettingsOut,
            description="Saved, but not yet readable within the wait; the body is the same.",
            generate_examples=False,
        ),
    },
)
async def put_settings(
    agency_id: AgencyId,
    name: BlueprintName,
    data: JSONBody[SettingsBody],
    principal: Caller,
    deps: Deps,
) -> Response[AgentSettingsOut]:
    tenant = tenant_of(principal)
    code, blueprint = await _blueprint(deps, tenant, agency_id, name)
    if code is None:
        raise ClientException(
            f"blueprint {name!r} is not a code agent: it has no settings", status_code=409
        )
    spec = with_overrides(blueprint, data.settings)
    try:
        code.settings_for(spec)
    except SettingsError as e:
        raise ValidationException(str(e)) from e
    readable, revision = await send_blueprint(deps, tenant, agency_id, spec)
    body = settings_out(code.name, describe(code, spec), revision)
    return Response(body, status_code=200 if readable else 202)


SETTINGS_ROUTES = [get_settings, put_settings]
