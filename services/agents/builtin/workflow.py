"""The workflow context tools: what a member of a workflow can do with the shared context.

`channel_send`, `channel_read`, `my_inbox`, `team_doc_read|write|list`,
`resource_put|get`, `proposal_open|vote|status`. Blueprints of workflow members carry the
tag `workflow`, which selects this middleware. The tools run in the tools service, which
gives each call the workflow the calling thread belongs to as `ctx.workflow`
(`services/workflows/context_tools.py` does what each tool does); anywhere else a call is a
tool error saying so.
"""

from __future__ import annotations

from typing import Any

from agency.services.agents.middleware import Middleware
from agency.services.agents.tools import (
    Tool,
    ToolContext,
    ToolFailed,
    ToolFn,
    define_tool,
    object_schema,
)

_STRING = {"type": "string"}
_NAMES = {"type": "array", "items": {"type": "string"}}


# name → (description, parameters), as the model is told.
SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "channel_send": (
        "Post a message to the workflow's channel; `to` (or @name in the text) asks members\n"
        "to act.",
        object_schema(("message",), message=_STRING, to=_NAMES),
    ),
    "channel_read": (
        "Read the latest messages of the channel (`limit`, default 20).",
        object_schema(limit={"type": "integer"}),
    ),
    "my_inbox": (
        "Messages that mention you (`limit`, default 20).",
        object_schema(limit={"type": "integer"}),
    ),
    "team_doc_read": ("Read a team document by path.", object_schema(("path",), path=_STRING)),
    "team_doc_write": (
        "Write (create or replace) a team document.",
        object_schema(("path", "content"), path=_STRING, content=_STRING),
    ),
    "team_doc_list": ("List the team documents with their last authors.", object_schema()),
    "resource_put": (
        "Store large content; returns its content address (sha256:…) to share instead.",
        object_schema(("content",), content=_STRING),
    ),
    "resource_get": (
        "Fetch stored content by its id (sha256:…).",
        object_schema(("id",), id=_STRING),
    ),
    "proposal_open": (
        "Put a decision to a vote among members (all by default); it closes when everyone\n"
        "has voted.",
        object_schema(
            ("title", "options"),
            title=_STRING,
            options=_NAMES,
            description=_STRING,
            voters=_NAMES,
        ),
    ),
    "proposal_vote": (
        "Vote on an open proposal with one of its options (`proposalId` defaults to the\n"
        "latest open proposal you have not voted on).",
        object_schema(("choice",), proposalId=_STRING, choice=_STRING, reason=_STRING),
    ),
    "proposal_status": (
        "The votes and outcome of a proposal (or of all when no id is given).",
        object_schema(proposalId=_STRING),
    ),
}


def _delegate(name: str) -> ToolFn:
    async def run(args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.workflow is None:
            raise ToolFailed(f"{name} acts on a workflow, and none is given where it runs")
        return await ctx.workflow.run(name, args, ctx)

    return run


def build_tools() -> tuple[Tool, ...]:
    """The context tools, each run by `ctx.workflow`."""
    return tuple(
        define_tool(
            _delegate(name), name=name, description=description, parameters=schema, timeout=15.0
        )
        for name, (description, schema) in SPECS.items()
    )


class WorkflowMiddleware(Middleware):
    """Gives workflow members (tag `workflow`) the workflow context tools."""

    name = "workflow"
    tags = ("workflow",)

    def __init__(self) -> None:
        self._tools = build_tools()

    def tools(self) -> tuple[Tool, ...]:
        return self._tools
