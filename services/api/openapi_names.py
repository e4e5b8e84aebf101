"""The names a blueprint may give, stated in the OpenAPI document of the running app.

A blueprint that comes in over HTTP (saved, a workflow's inline member, an inline subagent
of either) must name tags and hooks its agent system has (`services/agents/checks.py`):
another is refused with a 400. The document says so: the items of each such `tags` are
the system's tags and those of `hooks` its middleware ids, as an `enum` (an empty list
when the system has none). `config.hitl.tools` is not stated: its names depend on the
blueprint's tags and MCP servers, so no list of the document's would be exact; a name
there that is none of the blueprint's tools is taken, with a warning in the answer. A
`model` where it is checked (a saved blueprint, a workflow's member) is a bare name or
names a provider the process knows, as a `pattern`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from litestar.openapi.spec import Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType

from agency.contracts.events.blueprint import SubagentEntry
from agency.services.agents.system import AgentSystem
from agency.services.api.blueprint_body import HookId, SaveBlueprintBody, SubagentEntryBody
from agency.services.llm.port import NAME_PREFIXES
from agency.services.workflows.http.body import InlineMember, Member

# The request structs whose `tags` and `hooks` are a blueprint's.
BLUEPRINT_STRUCTS: tuple[type, ...] = (
    SaveBlueprintBody,
    SubagentEntryBody,
    InlineMember,
    Member,
    SubagentEntry,
)


def _hook_ids(names: Iterable[str]) -> list[str]:
    """The middleware names a body's `hooks` can hold (a `HookId`)."""
    valid: list[str] = []
    for name in sorted(names):
        try:
            msgspec.convert(name, HookId)
        except msgspec.ValidationError:
            continue
        valid.append(name)
    return valid


def _one_of(names: list[str], description: str) -> dict[str, Any]:
    """A list's keywords admitting only `names` (nothing when there are none)."""
    if not names:
        return {"max_items": 0, "description": description}
    return {
        "items": Schema(type=OpenAPIType.STRING, enum=list(names)),
        "description": description,
    }


def state_system_names(
    system: AgentSystem,
    components: Mapping[str, Schema | Reference],
    keys: Mapping[type, str],
) -> None:
    """Set the items of `tags` and `hooks` in the components of `BLUEPRINT_STRUCTS` (by
    component key in `keys`) to the system's tags and middleware ids."""
    tags = _one_of(
        sorted(system.tags),
        "Tags of the agent system (each selects its tools, middleware or MCP servers); "
        "another is refused (400).",
    )
    hooks = _one_of(
        _hook_ids(system.middleware_names),
        "Ids of the agent system's middleware, run besides those the tags select; another "
        "is refused (400).",
    )
    for cls in BLUEPRINT_STRUCTS:
        schema = components.get(keys.get(cls, ""))
        if not isinstance(schema, Schema):
            continue
        for field, keywords in (("tags", tags), ("hooks", hooks)):
            prop = (schema.properties or {}).get(field)
            if isinstance(prop, Schema) and prop.type == OpenAPIType.ARRAY:
                for keyword, value in keywords.items():
                    setattr(prop, keyword, value)


# The request structs whose `model` is checked where they come in (`model_check.py`).
MODEL_STRUCTS: tuple[type, ...] = (SaveBlueprintBody, Member)


def model_pattern(providers: Iterable[str]) -> str:
    """A `model` the API can take: a bare name (no `:`), `ft:…` (a bare fine-tuned name),
    or `<provider>:<name>` for a provider the process knows (`services/llm/port.py`,
    `split_model`); NUL nowhere."""
    known = "|".join(re.escape(p) for p in sorted(providers))
    prefixes = "|".join(re.escape(p) for p in sorted(NAME_PREFIXES))
    return rf"^(?:(?:{known}):[^\u0000]+|(?:{prefixes}):[^\u0000]*|[^:\u0000]*)$"


def state_model_names(
    providers: Iterable[str],
    components: Mapping[str, Schema | Reference],
    keys: Mapping[type, str],
) -> None:
    """Set the pattern of `model` in the components of `MODEL_STRUCTS` to the providers
    the process knows."""
    pattern = model_pattern(providers)
    for cls in MODEL_STRUCTS:
        schema = components.get(keys.get(cls, ""))
        prop = (schema.properties or {}).get("model") if isinstance(schema, Schema) else None
        if isinstance(prop, Schema):
            prop.pattern = pattern
            prop.description = (
                "A bare model name, or `<provider>:<name>` with a provider known here; its "
                "provider must also be configured (the operator's or the tenant's settings, "
                "docs/models.md), else refused (400). Empty: the system's default model."
            )
