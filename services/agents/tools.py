"""Tools: Python callables with a JSON-schema description, selected per blueprint by tags.

Two kinds:
- external tools (`@tool` on a typed function, or `define_tool` with a hand-written
  schema) run in the tools service, with a timeout and bounded
  retries; their side effects are theirs, their result is one `tool.output` or `tool.error`
  event per call id. One declared `local` (pure, fast, safe to run again) is run by the
  runtime itself instead, under a short timeout (`services/runtime/local_tools.py`).
- state tools belong to middleware (todos, files): pure functions of the thread's state run
  by the runtime itself, returning events (files written, todos written) with the result.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agency.contracts.events import AnyEvent, McpToolRef, RemoteAgent, ToolRequested
from agency.services.agents.isolation import Isolation

if TYPE_CHECKING:
    from agency.services.agents.view import ThreadView

JsonSchema = Mapping[str, Any]
EMPTY_PARAMETERS: JsonSchema = {"type": "object", "properties": {}}


def object_schema(required: Sequence[str] = (), /, **properties: Any) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, as the model is told: an object of
    `properties`, of which those `required` must be given."""
    return {"type": "object", "properties": properties, "required": list(required)}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool (OpenAI function-calling shape)."""

    name: str
    description: str = ""
    parameters: JsonSchema = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def as_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool's function is given besides its arguments: who calls it, in which
    thread and run, and which attempt of the call this is."""

    tenant_id: str
    agency_id: str
    thread_id: str
    run_id: str
    call_id: str
    attempt: int = 1
    # Where the tools service runs the call: the workflow the calling thread belongs to,
    # for the built-in workflow context tools. None anywhere else.
    workflow: WorkflowTools | None = None

    @classmethod
    def of_request(
        cls,
        tenant_id: str,
        agency_id: str | None,
        thread_id: str,
        request: ToolRequested,
        workflow: WorkflowTools | None = None,
    ) -> ToolContext:
        """The context of the call `request` asks for in that tenant's thread."""
        return cls(
            tenant_id=tenant_id,
            agency_id=agency_id or "",
            thread_id=thread_id,
            run_id=request.run_id,
            call_id=request.call.id,
            workflow=workflow,
        )


class WorkflowTools(Protocol):
    """What runs the workflow context tools (`channel_send`, `team_doc_read`, …) for the
    member a call comes from; the tools service gives it to those tools' calls."""

    async def run(self, tool: str, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Run the context tool named `tool`; its output, or `ToolFailed` saying why not."""
        ...


ToolResult = str | Mapping[str, Any] | list[Any] | None
ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult] | ToolResult]


class ToolFailed(Exception):
    """Raised by a tool to fail without retry; the message is what the model sees."""


class ToolRetryable(Exception):
    """Raised by a tool for a transient failure worth another attempt."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call: what it is told (`spec`) and the function that runs."""

    spec: ToolSpec
    fn: ToolFn
    timeout: float = 30.0
    max_attempts: int = 3
    # Set for a tool of an MCP server: what `tool.requested` names for the tools service.
    mcp: McpToolRef | None = None
    # Set for a remote A2A agent's tool: the agent `tool.requested` names for the tools service.
    remote_agent: RemoteAgent | None = None
    # Set by the operator (`AgentSystem.add_tool(..., isolation=...)`): the tools service runs
    # the tool in a sandboxed worker process (`services/tools/sandbox.py`).
    isolation: Isolation | None = None
    # Declared by the tool's author: pure, fast, in-process and safe to run again (nothing
    # outside the run changes). The runtime runs it where it decides the call, under a
    # short timeout, instead of sending it to the tools service.
    local: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = self.fn(args, ctx)
        if inspect.isawaitable(result):
            return await result
        return result


def define_tool(
    fn: ToolFn | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: JsonSchema | None = None,
    timeout: float = 30.0,
    max_attempts: int = 3,
    local: bool = False,
) -> Any:
    """Make a `Tool` of a function `(args, ctx) -> result`; usable bare or with arguments.

    The name defaults to the function's, the description to its docstring. `local=True`
    declares the function pure, fast and safe to run again: the runtime runs its calls
    itself (at most `services.runtime.local_tools.LOCAL_TOOL_TIMEOUT` seconds each) rather
    than through the tools service.
    """

    def wrap(f: ToolFn) -> Tool:
        spec = ToolSpec(
            name=name or f.__name__,
            description=description if description is not None else inspect.getdoc(f) or "",
            parameters=dict(parameters) if parameters is not None else dict(EMPTY_PARAMETERS),
        )
        return Tool(spec=spec, fn=f, timeout=timeout, max_attempts=max_attempts, local=local)

    return wrap(fn) if fn is not None else wrap


def result_text(result: ToolResult) -> str:
    """What the model sees of a tool's return value."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class StateToolOutcome:
    """What a state tool returns: the model's text, the events it adds, whether it failed."""

    output: str
    events: tuple[AnyEvent, ...] = ()
    error: bool = False


StateToolFn = Callable[[dict[str, Any], "ThreadView", str], StateToolOutcome]


@dataclass(frozen=True, slots=True)
class SpecTool:
    """A tool the runtime or a coordinator runs, named by its spec."""

    spec: ToolSpec

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class StateTool(SpecTool):
    """A tool over the thread's own state, run by the runtime: `fn(args, thread, run_id)`,
    `thread` the read-only `ThreadView`; it returns its output and the events it adds."""

    fn: StateToolFn


@dataclass(frozen=True, slots=True)
class SubagentTool(SpecTool):
    """A tool whose call spawns a child thread; the subagent coordinator runs it."""


@dataclass(frozen=True, slots=True)
class AgentTool(SpecTool):
    """Another blueprint exposed as a tool: a handoff to it on this thread (ai_human) or a
    dual-AI session of it in a child thread (dual_ai)."""

    target: str
    handoff: bool
    message_property: str = "message"
    attachments_property: str = "attachments"


SessionAction = Literal["stop", "fail", "status", "end_turn"]


@dataclass(frozen=True, slots=True)
class SessionTool(SpecTool):
    """A dual-AI lifecycle tool of the side holding the floor."""

    action: SessionAction
    message_property: str = "message"
    attachments_property: str | None = None
