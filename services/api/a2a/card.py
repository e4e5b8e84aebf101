"""Agent cards: one per blueprint of an agency, and the tenant's catalogue of them.

A blueprint's card says what the blueprint is (its title, description, tags), what it can
do (a skill for the blueprint, one for each of its tools), where to reach it (JSON-RPC and
HTTP+JSON, both at `/a2a/{agencyId}/{blueprint}`) and how to authenticate: the tenant's
API key as a bearer token. Cards are read with the key too: an agency is a tenant's own.
"""

from __future__ import annotations

from agency.contracts.events.blueprint import BlueprintSpec
from agency.contracts.version import package_version
from agency.projections import agency_queries
from agency.services.a2a.wire import (
    PROTOCOL_VERSION,
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HttpAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from agency.services.api.deps import ApiDeps

PREFIX = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"
SCHEME = "bearer"
INPUT_MODES = ["text/plain", "application/json"]
OUTPUT_MODES = ["text/plain"]
_SECURITY = {
    SCHEME: SecurityScheme(
        http_auth_security_scheme=HttpAuthSecurityScheme(
            scheme="Bearer",
            description="The tenant's Agency API key: `Authorization: Bearer <api key>`.",
        )
    )
}
_REQUIREMENTS = [SecurityRequirement(schemes={SCHEME: StringList()})]


def agent_url(base_url: str, agency_id: str, blueprint: str) -> str:
    return f"{base_url.rstrip('/')}{PREFIX}/{agency_id}/{blueprint}"


async def blueprint_spec(deps: ApiDeps, tenant: str, agency_id: str, name: str) -> BlueprintSpec:
    """The blueprint as the agency has it (its own, else the static one); the caller checked
    that there is one."""
    async with deps.pool.acquire() as conn:
        stored = await agency_queries.get_blueprint(conn, tenant, agency_id, name)
    return stored.spec if stored is not None else deps.system.blueprints[name]


def _tool_skills(deps: ApiDeps, spec: BlueprintSpec) -> list[AgentSkill]:
    skills: list[AgentSkill] = []
    for name, tool in sorted(deps.system.tools_for(spec).items()):
        described = getattr(getattr(tool, "spec", None), "description", "") or ""
        skills.append(
            AgentSkill(
                id=f"tool:{name}",
                name=name,
                description=described or f"The tool {name}.",
                tags=["tool"],
            )
        )
    return skills


def blueprint_card(deps: ApiDeps, spec: BlueprintSpec, url: str) -> AgentCard:
    title = spec.title or spec.name
    description = spec.description or f"The Agency agent {spec.name}."
    skill = AgentSkill(
        id=spec.name,
        name=title,
        description=description,
        tags=list(spec.tags) or [spec.name],
        input_modes=INPUT_MODES,
        output_modes=OUTPUT_MODES,
    )
    return AgentCard(
        name=title,
        description=description,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
            AgentInterface(
                url=url, protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION
            ),
        ],
        provider=AgentProvider(organization="Agency", url=url.split(PREFIX, 1)[0]),
        version=spec.version or package_version(),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes=_SECURITY,
        security_requirements=_REQUIREMENTS,
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=[skill, *_tool_skills(deps, spec)],
    )


async def tenant_card(deps: ApiDeps, tenant: str, base_url: str) -> AgentCard:
    """The tenant's catalogue: a skill per blueprint of each of its agencies, naming the
    blueprint's own card; reached through `/a2a` with the interface's `tenant` set to
    `{agencyId}/{blueprint}` (the HTTP+JSON binding puts it in the path, JSON-RPC in the
    params)."""
    base = base_url.rstrip("/")
    async with deps.pool.acquire() as conn:
        agencies = await agency_queries.list_agencies(conn, tenant)
        stored = {a.id: await agency_queries.list_blueprints(conn, tenant, a.id) for a in agencies}
    skills: list[AgentSkill] = []
    for agency in agencies:
        for view in agency_queries.merge_blueprints(deps.system.blueprints, stored[agency.id]):
            url = agent_url(base, agency.id, view.name)
            skills.append(
                AgentSkill(
                    id=f"{agency.id}/{view.name}",
                    name=f"{view.title or view.name} ({agency.name})",
                    description=f"{view.description or view.name}. Card: {url}{CARD_PATH}",
                    tags=[agency.name, view.name, *view.tags],
                )
            )
    root = f"{base}{PREFIX}"
    return AgentCard(
        name="Agency",
        description="The tenant's agents: one per blueprint of each agency. Each skill's id "
        "is the `tenant` to name it by on these interfaces, and its description gives its "
        "own card.",
        supported_interfaces=[
            AgentInterface(url=root, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
            AgentInterface(
                url=root, protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION
            ),
        ],
        provider=AgentProvider(organization="Agency", url=base),
        version=package_version(),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes=_SECURITY,
        security_requirements=_REQUIREMENTS,
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=skills,
    )
