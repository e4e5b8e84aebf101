"""Workflow definitions: YAML files in the seed's shape, with `${{ }}` interpolation.

    name: review                 # optional: the file's name
    agents:
      writer: drafter            # a blueprint of the agency (saved or static), by name
      reviewer:
        blueprint: critic        # the same, spelled out
      approver:                  # an inline blueprint
        model: openai:gpt-4.1-mini
        system_prompt: You approve or reject.   # or system_prompt_file: prompts/approver.md
        tags: [default]          # tools and middleware, as for any blueprint
        max_steps: 8            # or config: {max_steps: 8, token_budget: …}
    kickoff: |
      @writer Write about ${{ inputs.topic }} for ${{ env.TEAM }}.
    triggers:
      - cron: "0 9 * * 1-5"      # UTC; the message defaults to the kickoff
        message: "@writer the daily note"
    limits: {max_hops: 10, max_messages: 50, max_attempts: 3}

Interpolation runs on parsed string values (never on the YAML text, so a value cannot
change the document's structure): `${{ env.X }}` from the variables the client sends (the
CLI sends those the file names), `${{ inputs.X }}` from the run's inputs,
`${{ workflow.name }}` and `${{ workflow.tag }}`. An unknown variable is an error.

`system_prompt_file` names a file holding the prompt instead. The server never reads files:
the client sends the content of each file the definition names (`files`, path as written →
text; `agency workflow run` reads them relative to the definition), and the content is
interpolated like any other value. The path is taken as written (no `${{ }}` in it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import yaml

from agency.contracts.events import BlueprintSpec, WorkflowLimits
from agency.contracts.events.blueprint import BlueprintConfig
from agency.contracts.ids import is_valid_token
from agency.domain.cron import cron_problem
from agency.services.egress import server_refusals

_VARIABLE = re.compile(r"\$\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z0-9_-]+)\s*\}\}")
_INLINE_FIELDS = frozenset(
    {
        "model",
        "system_prompt",
        "system_prompt_file",
        "description",
        "tags",
        "config",
        "max_steps",
        "blueprint",
    }
)
_TOP_FIELDS = frozenset({"name", "agents", "kickoff", "triggers", "limits", "description"})
MAX_MEMBERS = 32


# Bounds on what a definition's YAML may make: nesting (its parser recurses per level) and
# values once aliases are expanded (`*a` repeated is exponential in the text's size).
MAX_DEPTH = 64
MAX_VALUES = 100_000


class DefinitionError(ValueError):
    """A definition that cannot be run, with what is wrong and where."""


class UnreachableServer(DefinitionError):
    """A member's MCP server at an address no connection for a tenant may reach: the
    definition is well formed, the egress rule (`services/egress.py`) forbids it."""


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.safe_load`, refusing a document nested deeper than `MAX_DEPTH`."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise DefinitionError(
                    f"the definition is YAML nested deeper than {MAX_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _load(text: str) -> Any:
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """A member: a blueprint by name, or an inline one."""

    name: str
    blueprint_name: str | None = None
    inline: BlueprintSpec | None = None


@dataclass(frozen=True, slots=True)
class Trigger:
    cron: str
    message: str


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    tag: str
    agents: tuple[AgentEntry, ...]
    kickoff: str = ""
    triggers: tuple[Trigger, ...] = ()
    limits: WorkflowLimits = field(default_factory=WorkflowLimits)


def variables_in(text: str) -> set[tuple[str, str]]:
    """(scope, name) of every `${{ scope.name }}` in the text."""
    return {(m.group(1), m.group(2)) for m in _VARIABLE.finditer(text)}


def prompt_files(text: str) -> list[str]:
    """The `system_prompt_file` paths a definition names, as written, in order; [] when the
    text is not a definition (the server reports what is wrong with it)."""
    try:
        document = _load(text)
    except (yaml.YAMLError, DefinitionError):
        return []
    agents = document.get("agents") if isinstance(document, dict) else None
    if not isinstance(agents, dict):
        return []
    paths = [spec.get("system_prompt_file") for spec in agents.values() if isinstance(spec, dict)]
    return list(dict.fromkeys(p for p in paths if isinstance(p, str)))


def interpolate(value: str, scopes: Mapping[str, Mapping[str, str]], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        scope, name = match.group(1), match.group(2)
        if scope not in scopes:
            raise DefinitionError(
                f"{where}: unknown variable scope {scope!r} in {match.group(0)!r} "
                f"(use {', '.join(sorted(scopes))})"
            )
        if name not in scopes[scope]:
            raise DefinitionError(f"{where}: {match.group(0)} is not set")
        return scopes[scope][name]

    return _VARIABLE.sub(replace, value)


def _walk(
    value: Any, scopes: Mapping[str, Mapping[str, str]], where: str, budget: list[int]
) -> Any:
    """The value interpolated, as a tree (aliases copied), at most `MAX_VALUES` values."""
    budget[0] -= 1
    if budget[0] < 0:
        raise DefinitionError(
            f"the definition holds more than {MAX_VALUES} values once its aliases are expanded"
        )
    if isinstance(value, str):
        return interpolate(value, scopes, where)
    if isinstance(value, list):
        return [_walk(v, scopes, f"{where}[{i}]", budget) for i, v in enumerate(value)]
    if isinstance(value, dict):
        _string_keys(value, where)
        return {k: _walk(v, scopes, f"{where}.{k}", budget) for k, v in value.items()}
    return value


def _string_keys(mapping: dict[Any, Any], where: str) -> None:
    """Every key of a YAML mapping is text: `1:`, `true:` or `~:` make a number, a boolean
    or null, which no field of a definition is."""
    for key in mapping:
        if not isinstance(key, str):
            raise DefinitionError(
                f"{where}: key {key!r} is a {type(key).__name__}, not text: quote it in the YAML"
            )


def load(text: str) -> dict[str, Any]:
    """The YAML text as its mapping."""
    try:
        document = _load(text)
    except yaml.YAMLError as e:
        raise DefinitionError(f"the definition is not valid YAML: {e}") from e
    if not isinstance(document, dict):
        raise DefinitionError("the definition must be a YAML mapping with an `agents` key")
    return document


def build(
    document: dict[str, Any],
    *,
    default_name: str = "",
    tag: str = "",
    inputs: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
) -> Definition:
    """A definition from its mapping (the YAML's, or the API's typed object)."""
    _string_keys(document, "definition")
    unknown = sorted(set(document) - _TOP_FIELDS)
    if unknown:
        raise DefinitionError(
            f"unknown keys {', '.join(unknown)}; a definition has {', '.join(sorted(_TOP_FIELDS))}"
        )
    name = document.get("name") or default_name
    if not isinstance(name, str) or not is_valid_token(name):
        raise DefinitionError(
            f"workflow name {name!r} must be 1-64 letters, digits, '-' or '_' "
            "(set `name:` or name the file so)"
        )
    if tag and not is_valid_token(tag):
        raise DefinitionError(f"tag {tag!r} must be 1-64 letters, digits, '-' or '_'")
    scopes = {
        "env": dict(env or {}),
        "inputs": dict(inputs or {}),
        "workflow": {"name": name, "tag": tag},
    }
    agents_raw = document.get("agents")
    document = _walk(document, scopes, "definition", [MAX_VALUES])
    agents = _agents(document.get("agents"), _PromptFiles(agents_raw, dict(files or {}), scopes))
    kickoff = document.get("kickoff") or ""
    if not isinstance(kickoff, str):
        raise DefinitionError("kickoff must be a string")
    return Definition(
        name=name,
        tag=tag,
        agents=agents,
        kickoff=kickoff.strip(),
        triggers=_triggers(document.get("triggers"), kickoff.strip()),
        limits=_limits(document.get("limits")),
    )


@dataclass(frozen=True, slots=True)
class _PromptFiles:
    """The prompt files sent with a definition, looked up by the path as written."""

    raw_agents: Any
    files: dict[str, str]
    scopes: Mapping[str, Mapping[str, str]]

    def prompt(self, name: str, where: str) -> str:
        spec = self.raw_agents.get(name) if isinstance(self.raw_agents, dict) else None
        path = spec.get("system_prompt_file") if isinstance(spec, dict) else None
        if not isinstance(path, str) or not path.strip():
            raise DefinitionError(f"{where}.system_prompt_file must be a file's path")
        if _VARIABLE.search(path):
            raise DefinitionError(
                f"{where}.system_prompt_file: the path is taken as written; "
                f"no ${{{{ }}}} in {path!r}"
            )
        if path not in self.files:
            raise DefinitionError(
                f"{where}.system_prompt_file: {path!r} was not sent with the definition "
                "(`files`: path as written -> content; `agency workflow run` sends the files "
                "a definition names)"
            )
        return interpolate(self.files[path], self.scopes, f"{where}.system_prompt_file {path}")


def _agents(value: Any, prompt_files: _PromptFiles) -> tuple[AgentEntry, ...]:
    if not isinstance(value, dict) or not value:
        raise DefinitionError("agents must be a mapping of member names to blueprints")
    if len(value) > MAX_MEMBERS:
        raise DefinitionError(f"at most {MAX_MEMBERS} agents per workflow, not {len(value)}")
    entries: list[AgentEntry] = []
    for name, spec in value.items():
        where = f"agents.{name}"
        if not isinstance(name, str) or not is_valid_token(name) or name in ("user", "system"):
            raise DefinitionError(
                f"{where}: a member name must be 1-64 letters, digits, '-' or '_', "
                "and not 'user' or 'system'"
            )
        if isinstance(spec, str):
            entries.append(AgentEntry(name, blueprint_name=spec))
            continue
        if not isinstance(spec, dict):
            raise DefinitionError(f"{where}: a blueprint name or a mapping of its fields")
        unknown = sorted(set(spec) - _INLINE_FIELDS)
        if unknown:
            raise DefinitionError(
                f"{where}: unknown keys {', '.join(unknown)}; "
                f"use {', '.join(sorted(_INLINE_FIELDS))}"
            )
        if "blueprint" in spec:
            if set(spec) != {"blueprint"} or not isinstance(spec["blueprint"], str):
                raise DefinitionError(f"{where}: `blueprint` names a blueprint and stands alone")
            entries.append(AgentEntry(name, blueprint_name=spec["blueprint"]))
            continue
        if "system_prompt_file" in spec:
            if "system_prompt" in spec:
                raise DefinitionError(
                    f"{where}: system_prompt and system_prompt_file are exclusive; keep one"
                )
            spec = {**spec, "system_prompt": prompt_files.prompt(name, where)}
            del spec["system_prompt_file"]
        entries.append(AgentEntry(name, inline=_inline(name, spec, where)))
    return tuple(entries)


def _inline(name: str, spec: dict[str, Any], where: str) -> BlueprintSpec:
    tags = spec.get("tags", [])
    config = spec.get("config", {})
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DefinitionError(f"{where}.tags must be a list of strings")
    if not isinstance(config, dict):
        raise DefinitionError(f"{where}.config must be a mapping")
    max_steps = spec.get("max_steps")
    if max_steps is not None:
        config = {**config, "max_steps": max_steps}
    try:
        typed = msgspec.convert(config, BlueprintConfig)
    except msgspec.ValidationError as e:
        raise DefinitionError(f"{where}.config: {e}") from e
    for blueprint in BlueprintSpec(name=name, config=typed).with_inline():
        # An address no connection for a tenant may reach (`services/egress.py`),
        # in the member's config or a subagent blueprint it defines inline.
        inner = where if blueprint.name == name else f"{where} (subagent {blueprint.name})"
        for i, _, problem in server_refusals(blueprint.config.mcp_servers):
            raise UnreachableServer(f"{inner}.config.mcp_servers[{i}].url: {problem}")
        for i, _, problem in server_refusals(blueprint.config.remote_agents):
            raise UnreachableServer(f"{inner}.config.remote_agents[{i}].url: {problem}")
    for key in ("model", "system_prompt", "description"):
        if not isinstance(spec.get(key, ""), str):
            raise DefinitionError(f"{where}.{key} must be a string")
    return BlueprintSpec(
        name=name,
        description=spec.get("description", ""),
        prompt=spec.get("system_prompt", ""),
        model=spec.get("model", ""),
        tags=tuple(tags),
        config=typed,
    )


def _triggers(value: Any, kickoff: str) -> tuple[Trigger, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise DefinitionError("triggers must be a list of {cron, message}")
    triggers: list[Trigger] = []
    for i, item in enumerate(value):
        where = f"triggers[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("cron"), str):
            raise DefinitionError(f"{where}: needs a `cron` string")
        unknown = sorted(set(item) - {"cron", "message"})
        if unknown:
            raise DefinitionError(f"{where}: unknown keys {', '.join(unknown)}")
        problem = cron_problem(item["cron"])
        if problem:
            raise DefinitionError(f"{where}: {problem}")
        message = item.get("message", kickoff)
        if not isinstance(message, str) or not message.strip():
            raise DefinitionError(f"{where}: needs a `message` (or a kickoff to default to)")
        triggers.append(Trigger(item["cron"], message.strip()))
    return tuple(triggers)


def _limits(value: Any) -> WorkflowLimits:
    if value is None:
        return WorkflowLimits()
    if not isinstance(value, dict):
        raise DefinitionError("limits must be a mapping")
    defaults = WorkflowLimits()
    known = {"max_hops", "max_messages", "max_attempts"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise DefinitionError(f"limits: unknown keys {', '.join(unknown)}")
    numbers: dict[str, int] = {}
    for key in known:
        number = value.get(key, getattr(defaults, key))
        if not isinstance(number, int) or number < 1 or number > 10_000:
            raise DefinitionError(f"limits.{key} must be an integer from 1 to 10000")
        numbers[key] = number
    return WorkflowLimits(**numbers)
