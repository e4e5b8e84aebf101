"""A code agent's settings as a UI or an API shows them: the declared schema (JSON Schema of
`cls.Settings`), each field with its type and default, and the values a run gets.

The values of a run are the registered ones (`AgentSystem.code_agent(..., settings=…)`)
overridden by `config.extra["settings"]` of a blueprint of the agent's name saved in the
agency (`CodeAgentSpec.settings_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from agency.contracts.events import BlueprintSpec
from agency.services.agents.code import SettingsError
from agency.services.agents.system import CodeAgentSpec


@dataclass(frozen=True, slots=True)
class SettingsField:
    name: str
    type: str
    required: bool
    default: Any
    value: Any
    overridden: bool


@dataclass(frozen=True, slots=True)
class SettingsView:
    """`settings` is None (and `problem` says why) when the saved overrides do not fit."""

    schema: dict[str, Any] | None
    fields: list[SettingsField]
    registered: dict[str, Any]
    overrides: dict[str, Any]
    settings: dict[str, Any] | None
    problem: str | None


def json_schema(spec: CodeAgentSpec) -> dict[str, Any] | None:
    schema = spec.cls.Settings
    return msgspec.json.schema(schema) if schema is not None else None


def overrides_of(saved: BlueprintSpec | None) -> Any:
    return saved.config.extra.get("settings") if saved is not None else None


def with_overrides(saved: BlueprintSpec, overrides: dict[str, Any]) -> BlueprintSpec:
    """`saved` whose `config.extra["settings"]` is `overrides` (none when empty)."""
    extra = {k: v for k, v in saved.config.extra.items() if k != "settings"}
    if overrides:
        extra["settings"] = overrides
    config = msgspec.structs.replace(saved.config, extra=extra)
    return msgspec.structs.replace(saved, config=config)


def _properties(schema: dict[str, Any] | None) -> dict[str, Any]:
    if not schema:
        return {}
    body = schema
    ref = schema.get("$ref", "")
    if ref.startswith("#/$defs/"):
        body = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {})
    properties = body.get("properties", {})
    return properties if isinstance(properties, dict) else {}


def type_label(prop: Any) -> str:
    """A JSON Schema property's type, shortly: `string`, `integer | null`, `array of string`."""
    if not isinstance(prop, dict):
        return "any"
    if "enum" in prop:
        return "one of " + ", ".join(map(str, prop["enum"]))
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " | ".join(type_label(p) for p in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return "array of " + type_label(prop.get("items", {}))
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    return str(kind) if kind else "any"


def _builtins(value: Any) -> dict[str, Any]:
    out = msgspec.to_builtins(value)
    return out if isinstance(out, dict) else {}


def describe(spec: CodeAgentSpec, saved: BlueprintSpec | None) -> SettingsView:
    """The agent's settings in the agency whose blueprint of the agent's name is `saved`."""
    raw_overrides = overrides_of(saved)
    overrides = raw_overrides if isinstance(raw_overrides, dict) else {}
    try:
        effective: dict[str, Any] | None = _builtins(spec.settings_for(saved))
        problem = None
    except SettingsError as e:
        effective, problem = None, str(e)
    schema = json_schema(spec)
    properties = _properties(schema)
    fields: list[SettingsField] = []
    if spec.cls.Settings is not None:
        for info in msgspec.structs.fields(spec.cls.Settings):
            required = info.required
            default = None
            if info.default is not msgspec.NODEFAULT:
                default = msgspec.to_builtins(info.default)
            elif info.default_factory is not msgspec.NODEFAULT:
                default = msgspec.to_builtins(info.default_factory())
            name = info.encode_name
            fields.append(
                SettingsField(
                    name=name,
                    type=type_label(properties.get(name)),
                    required=required,
                    default=default,
                    value=effective.get(name) if effective is not None else None,
                    overridden=name in overrides,
                )
            )
    return SettingsView(
        schema=schema,
        fields=fields,
        registered=dict(spec.raw_settings),
        overrides=dict(overrides),
        settings=effective,
        problem=problem,
    )
