"""Upcasters: functions turning a stored payload of one schema version into the next.

Each takes the payload's fields as plain JSON values and returns them at the next version;
`contracts.codec` chains them on read. An upcaster never fails on content it does not
understand: what it cannot place is kept, so an old event always reads.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agency.contracts.events.blueprint import (
    INLINE_BLUEPRINT_FIELDS,
    BlueprintConfig,
    BlueprintSpec,
    SubagentEntry,
)

_spec_decoder = msgspec.json.Decoder(BlueprintSpec)

# Version 1 blueprint config keys (camelCase, the seed's) and their typed names.
_V1_CONFIG_KEYS = {
    "maxSteps": "max_steps",
    "tokenBudget": "token_budget",
    "hitl": "hitl",
    "subagents": "subagents",
    "callableAgents": "callable_agents",
}


def blueprint_saved_v1(fields: dict[str, Any]) -> dict[str, Any]:
    """`blueprint.saved` 1 → 2: the free `config` dict becomes a typed `BlueprintConfig`.

    Known keys are renamed to snake_case (also `maxInstances` inside subagent entries); a
    known key whose value does not fit its type, and every other key, goes to `extra`
    under its original name, so nothing stored is lost and nothing ill-typed is believed.
    """
    blueprint = fields.get("blueprint")
    if not isinstance(blueprint, dict):
        return fields
    config = blueprint.get("config")
    blueprint = {**blueprint, "config": _config_v1(config if isinstance(config, dict) else {})}
    return {**fields, "blueprint": blueprint}


def _config_v1(config: dict[str, Any]) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in config.items():
        name = _V1_CONFIG_KEYS.get(key)
        if name is None:
            extra[key] = value
            continue
        candidate = _subagents_v1(value) if name == "subagents" else value
        try:
            msgspec.convert({name: candidate}, BlueprintConfig)
        except msgspec.ValidationError:
            extra[key] = value
            continue
        typed[name] = candidate
    if extra:
        typed["extra"] = extra
    return typed


def _subagents_v1(section: Any) -> Any:
    """Entries renamed; an entry with an ill-typed option keeps its name only (version 1
    readers ignored such options), one without a name is left out (they skipped it)."""
    if not isinstance(section, dict) or not isinstance(section.get("subagents"), list):
        return section
    entries: list[Any] = []
    for entry in section["subagents"]:
        if not isinstance(entry, dict):
            entries.append(entry)
            continue
        renamed = {("max_instances" if k == "maxInstances" else k): v for k, v in entry.items()}
        try:
            if INLINE_BLUEPRINT_FIELDS & renamed.keys():
                # Version 1 had no inline blueprints: such fields were unknown options.
                raise msgspec.ValidationError("inline blueprint fields in a version 1 entry")
            msgspec.convert(renamed, SubagentEntry)
        except msgspec.ValidationError:
            if isinstance(entry.get("name"), str) and entry["name"]:
                entries.append({"name": entry["name"]})
            continue
        entries.append(renamed)
    return {**section, "subagents": entries}


def stored_blueprint_spec(data: bytes | str) -> BlueprintSpec:
    """A `BlueprintSpec` kept outside the log (a read model row), in either config shape."""
    try:
        return _spec_decoder.decode(data)
    except msgspec.ValidationError:
        fields = blueprint_saved_v1({"blueprint": msgspec.json.decode(data)})
        return msgspec.convert(fields["blueprint"], BlueprintSpec)
