"""`AgentSystem`: the builder every service loads, so users extend without forking.

    system = (
        AgentSystem(default_model="openai:gpt-4.1-mini")
        .defaults()
        .add_tool(lookup_weather, ["weather"])
        .add_tool(run_snippet, ["code"], isolation=Isolation(memory_mib=512))
        .use(MyMiddleware(), ["audit"])
        .add_mcp_server(McpServer(name="github", url="https://…/mcp"), ["code"])
        .add_agent(BlueprintSpec(name="forecaster", prompt="...", tags=["default", "weather"]))
    )

Services load it from a module path, looked for in the current directory first
(`agency up --app pkg.module:system`), or from a file (`agency up --app path/to/app.py:system`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Self, TypeVar

from agency.contracts.events import BlueprintSpec, McpServer
from agency.services.agents.checks import BlueprintInvalid
from agency.services.agents.code import CodeAgent, SettingsError, validate_settings
from agency.services.agents.isolation import Isolation, class_reference, function_reference
from agency.services.agents.middleware import (
    RESERVED_STATE_KEYS,
    Middleware,
    RegistrableTool,
    has_state,
    state_key,
)
from agency.services.agents.tools import StateTool, SubagentTool, Tool
from agency.services.agents.tracebacks import describe, located, where

DEFAULT_MODEL = "openai:gpt-4.1-mini"
DEFAULT_APP = "agency.services.agents.default:system"


class SystemLoadError(Exception):
    """An app's agent system that cannot be loaded from the path given; says why."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"cannot load agent system {path!r}: {problem}")


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CodeAgentSpec:
    """A registered code agent: its class and its validated settings."""

    name: str
    cls: type[CodeAgent]
    settings: Any
    raw_settings: dict[str, Any]
    isolation: Isolation | None = None

    def settings_for(self, saved: BlueprintSpec | None) -> Any:
        """The settings of a run: the registered ones, overridden by `config.extra
        ["settings"]` of a blueprint of the agent's name saved in the agency. A
        `SettingsError` names the field that does not fit."""
        override = saved.config.extra.get("settings") if saved is not None else None
        if override is None:
            return self.settings
        if not isinstance(override, dict):
            raise SettingsError(self.name, None, "config.extra.settings must be an object")
        return validate_settings(self.name, self.cls, {**self.raw_settings, **override})


AnyTool = Tool | StateTool | SubagentTool


@dataclass(frozen=True, slots=True)
class _Tagged(Generic[T]):
    item: T
    tags: frozenset[str]


class AgentSystem:
    """The builder of an app's agents: its tools, middleware, MCP servers, blueprints and
    code agents, each selected by tags. Every service loads the same one."""

    def __init__(self, default_model: str = DEFAULT_MODEL) -> None:
        self.default_model = default_model
        self._tools: list[_Tagged[Tool]] = []
        self._middleware: list[_Tagged[Middleware]] = []
        self._blueprints: dict[str, BlueprintSpec] = {}
        self._mcp_servers: list[_Tagged[McpServer]] = []
        self._code_agents: dict[str, CodeAgentSpec] = {}

    def defaults(self) -> Self:
        """planning, filesystem and subagents under `default`; hitl under `hitl`; the
        workflow context tools under `workflow`."""
        from agency.services.agents.builtin import default_middleware

        for middleware, tags in default_middleware():
            self.use(middleware, tags)
        return self

    def add_tool(
        self, tool: Tool, tags: Iterable[str] = (), *, isolation: Isolation | None = None
    ) -> Self:
        """Give blueprints with one of `tags` the tool; with `isolation` the tools service runs
        it in a sandbox (`services/agents/isolation.py`, `docs/operations.md`).

        Raises `NotIsolatable` when an isolated tool's function cannot be imported by name,
        and `ValueError` for a tool declared local and isolated: a sandbox is for code that
        is not trusted to run in the runtime.
        """
        if isolation is not None:
            if tool.local:
                raise ValueError(
                    f"tool {tool.name!r} is declared local, which runs it in the runtime; "
                    "an isolated tool runs in a sandbox of the tools service: choose one"
                )
            function_reference(tool.name, tool.fn)
            tool = replace(tool, isolation=isolation)
        self._tools.append(_Tagged(tool, frozenset(tags)))
        return self

    def add_mcp_server(self, server: McpServer, tags: Iterable[str] = ()) -> Self:
        """Give blueprints with one of `tags` the tools of an MCP server (`docs/mcp.md`)."""
        self._mcp_servers.append(_Tagged(server, frozenset(tags)))
        return self

    def use(self, middleware: Middleware, tags: Iterable[str] = ()) -> Self:
        if has_state(middleware) and state_key(middleware.name) in RESERVED_STATE_KEYS:
            raise ValueError(
                f"middleware {middleware.name!r} has a state part, but /state has a key "
                f"{state_key(middleware.name)!r} of its own: rename the middleware"
            )
        self._middleware.append(_Tagged(middleware, frozenset(tags) | set(middleware.tags)))
        return self

    def add_agent(self, blueprint: BlueprintSpec) -> Self:
        self._blueprints[blueprint.name] = blueprint
        return self

    def code_agent(
        self,
        name: str,
        cls: type[CodeAgent],
        settings: dict[str, Any] | None = None,
        *,
        isolation: Isolation | None = None,
    ) -> Self:
        """Register an agent type whose logic is `cls.on_message` (`services/agents/code.py`).
        Its settings are validated against `cls.Settings` now (`SettingsError` naming the
        field); an agency may override them per invoke with a saved blueprint of this name
        whose `config.extra` holds `settings`.

        With `isolation` its handler runs in a sandboxed worker process
        (`services/runtime/code_isolated.py`); `NotIsolatable` when the class cannot be
        imported there by its module and qualified name."""
        if not (isinstance(cls, type) and issubclass(cls, CodeAgent)):
            raise TypeError(f"code agent {name!r}: {cls!r} is not a CodeAgent subclass")
        if isolation is not None:
            class_reference(name, cls)
        raw = dict(settings or {})
        spec = CodeAgentSpec(name, cls, validate_settings(name, cls, raw), raw, isolation)
        self._code_agents[name] = spec
        self._blueprints[name] = BlueprintSpec(
            name=name, description=cls.description, model=cls.model, tags=cls.tags
        )
        return self

    def check(self) -> Self:
        """Raise `BlueprintInvalid` for a blueprint of the system (or a subagent blueprint
        it defines inline) naming a tag, a hook or a `hitl.tools` tool the system does not
        have (`services/agents/checks.py`); services check when they load the system."""
        from agency.services.agents.checks import BlueprintInvalid, problems_with_inline

        for blueprint in self._blueprints.values():
            problems = problems_with_inline(self, blueprint)
            if problems:
                raise BlueprintInvalid(blueprint.name, problems)
        return self

    def code_agent_for(self, agent_type: str) -> CodeAgentSpec | None:
        return self._code_agents.get(agent_type)

    @property
    def blueprints(self) -> dict[str, BlueprintSpec]:
        return dict(self._blueprints)

    def middleware_for(self, blueprint: BlueprintSpec) -> list[Middleware]:
        """The middleware its tags select, those its `hooks` name and those its config asks
        for (`Middleware.wanted_by`: `hitl.tools` selects the hitl middleware), in the order
        they were added. A hook id naming no middleware of this system is ignored here (a
        stored blueprint still runs); `blueprint_problems` refuses it on save."""
        tags, hooks = set(blueprint.tags), set(blueprint.hooks)
        return [
            m.item
            for m in self._middleware
            if m.tags & tags or m.item.name in hooks or m.item.wanted_by(blueprint.config)
        ]

    @property
    def tags(self) -> frozenset[str]:
        """Every tag that selects something: a tool, a middleware, an MCP server."""
        found: set[str] = set()
        for group in (self._tools, self._middleware, self._mcp_servers):
            for tagged in group:
                found |= tagged.tags
        return frozenset(found)

    @property
    def middleware_names(self) -> frozenset[str]:
        return frozenset(m.item.name for m in self._middleware)

    def tools_for(self, blueprint: BlueprintSpec) -> dict[str, AnyTool]:
        """Tools whose tags meet the blueprint's, plus those its middleware brings."""
        tags = set(blueprint.tags)
        chosen: dict[str, AnyTool] = {t.item.name: t.item for t in self._tools if t.tags & tags}
        for middleware in self.middleware_for(blueprint):
            brought: tuple[AnyTool, ...] = (
                *middleware.tools(),
                *middleware.state_tools(),
                *middleware.subagent_tools(),
            )
            for tool in brought:
                chosen[tool.name] = tool
        return chosen

    def registrable_for(self, blueprint: BlueprintSpec) -> dict[str, tuple[str, RegistrableTool]]:
        """The tools the blueprint's middleware may register at run time: name → (the
        middleware's name, the tool)."""
        return {
            tool.name: (middleware.name, tool)
            for middleware in self.middleware_for(blueprint)
            for tool in middleware.registrable_tools()
        }

    def mcp_servers_for(self, blueprint: BlueprintSpec) -> list[McpServer]:
        """The system's MCP servers whose tags meet the blueprint's, then the blueprint's own
        (`config.mcp_servers`); a blueprint's server replaces a system one of its name."""
        tags = set(blueprint.tags)
        chosen = {s.item.name: s.item for s in self._mcp_servers if s.tags & tags}
        chosen.update((s.name, s) for s in blueprint.config.mcp_servers)
        return list(chosen.values())

    def external_tool(self, name: str) -> Tool | None:
        """Any external tool by name, for the tools service (the runtime checks selection)."""
        for tagged in self._tools:
            if tagged.item.name == name:
                return tagged.item
        for tagged_mw in self._middleware:
            for tool in tagged_mw.item.tools():
                if tool.name == name:
                    return tool
            for registrable in tagged_mw.item.registrable_tools():
                if registrable.name == name and isinstance(registrable, Tool):
                    return registrable
        return None

    def model_for(self, blueprint: BlueprintSpec) -> str:
        return blueprint.model or self.default_model


def load_system(path: str | None = None) -> AgentSystem:
    """Load `module:attribute` or `path/to/file.py:attribute`; the attribute is an
    AgentSystem or a factory of one.

    A module is looked for in the current directory first, then in the installed
    packages, as `python -m` does; a file's own directory is put on the import path, so it
    may import its neighbours. Any failure is a `SystemLoadError` saying what and why; an
    exception in the app's own code also says where: the innermost line of the app's files
    it passed through (`tracebacks.py`).
    """
    path = path or DEFAULT_APP
    target, sep, attribute = path.rpartition(":")
    if not sep or not target or not attribute:
        raise SystemLoadError(
            path, "expected 'package.module:attribute' or 'path/to/file.py:attribute'"
        )
    module = _import_file(path, Path(target)) if _is_file(target) else _import_module(path, target)
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise SystemLoadError(path, f"{target} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, AgentSystem):
        try:
            value = value()
        except Exception as e:
            raise SystemLoadError(path, f"{attribute}() failed: {located(e)}") from e
    if not isinstance(value, AgentSystem):
        raise SystemLoadError(path, f"{attribute} is a {type(value).__name__}, not an AgentSystem")
    try:
        return value.check()
    except BlueprintInvalid as e:
        raise SystemLoadError(path, str(e)) from e


def _is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _on_import_path(directory: Path) -> None:
    entry = str(directory)
    if entry not in sys.path:
        sys.path.insert(0, entry)


def _import_module(path: str, name: str) -> ModuleType:
    if path != DEFAULT_APP:  # the built-in system needs no folder of the user's
        _on_import_path(Path.cwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            where = f"the current directory ({Path.cwd()}) or the installed packages"
            raise SystemLoadError(path, f"{e} in {where}") from e
        # The module is there; something it imports is not.
        raise SystemLoadError(path, f"import failed: {located(e)}") from e
    except Exception as e:  # the module's own code failed: say where and how
        raise SystemLoadError(path, f"import failed: {located(e)}") from e


def _import_file(path: str, file: Path) -> ModuleType:
    file = file.resolve()
    if not file.is_file():
        raise SystemLoadError(path, f"no file {file}")
    name = file.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == file:
            return loaded
        raise SystemLoadError(
            path, f"a module named {name!r} is already imported from elsewhere: rename {file.name}"
        )
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise SystemLoadError(path, f"{file} is not a Python module")
    _on_import_path(file.parent)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the file's own code failed: say where and how
        del sys.modules[name]
        if where(e):
            raise SystemLoadError(path, f"import failed: {located(e)}") from e
        raise SystemLoadError(path, f"import of {file} failed: {describe(e)}") from e
    return module
