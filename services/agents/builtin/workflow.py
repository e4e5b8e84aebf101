"""The workflow context tools: what a member of a workflow can do with the shared context.

`channel_send`, `channel_read`, `my_inbox`, `team_doc_read|write|list`,
`resource_put|get`, `proposal_open|vote|status`. Blueprints of workflow members carry the
tag `workflow`, which selects this middleware. The tools run in the tools service and act
on the workflow aggregate the calling thread belongs to (named in its `thread.created`);
each append carries the key `tool:<call id>`, so a call run again after a crash writes
nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from contracts.events import DocumentWritten, ThreadCreated
from contracts.ids import derived_id
from infra.jetstream.ports import AggregateStore
from services.agents.middleware import Middleware
from services.agents.tools import Tool, ToolContext, ToolFailed, define_tool
from services.common.decide import applied, decide_and_append
from services.workflows import decisions
from services.workflows.state import WorkflowState, fold

_STRING = {"type": "string"}
_NAMES = {"type": "array", "items": {"type": "string"}}


def _schema(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


class WorkflowContext:
    """Finds the calling member's workflow and reads or changes it."""

    def __init__(self) -> None:
        self._links: dict[tuple[str, str], tuple[str, str]] = {}

    async def link(self, ctx: ToolContext) -> tuple[AggregateStore, str, str]:
        """(store, workflow id, member name) of the calling thread."""
        if ctx.store is None:
            raise ToolFailed("workflow tools need the event store; none was given")
        key = (ctx.tenant_id, ctx.thread_id)
        if key not in self._links:
            history = await ctx.store.read(ctx.tenant_id, "thread", ctx.thread_id)
            created = next(
                (e.payload for e in history if isinstance(e.payload, ThreadCreated)), None
            )
            request = created.request if created else {}
            if "workflow_id" not in request or "member" not in request:
                raise ToolFailed("this thread is not a member of a workflow")
            self._links[key] = (request["workflow_id"], request["member"])
        workflow_id, member = self._links[key]
        return ctx.store, workflow_id, member

    async def state(self, ctx: ToolContext) -> tuple[WorkflowState, str]:
        store, workflow_id, member = await self.link(ctx)
        return fold(await store.read(ctx.tenant_id, "workflow", workflow_id), workflow_id), member

    async def act(
        self, ctx: ToolContext, decide: Callable[[WorkflowState, str], Sequence[Any]]
    ) -> WorkflowState:
        """Decide and append as the calling member, once per tool call; the state after."""
        store, workflow_id, member = await self.link(ctx)
        key = f"tool:{ctx.call_id}"
        try:
            await decide_and_append(
                store, ctx.tenant_id, "workflow", workflow_id,
                lambda h: [] if applied(h, key) else list(decide(fold(h, workflow_id), member)),
                idempotency_key=key,
            )  # fmt: skip
        except decisions.WorkflowRejected as e:
            raise ToolFailed(str(e)) from e
        state, _ = await self.state(ctx)
        return state


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip().lstrip("@") for v in value.split(",") if v.strip()]
    if isinstance(value, list):
        return [str(v).strip().lstrip("@") for v in value if str(v).strip()]
    return []


def _limit(args: dict[str, Any], default: int = 20) -> int:
    value = args.get("limit", default)
    return max(1, min(int(value), 200)) if isinstance(value, int | float) else default


def build_tools(context: WorkflowContext) -> tuple[Tool, ...]:
    async def channel_send(args: dict[str, Any], ctx: ToolContext) -> str:
        """Post a message to the workflow's channel; `to` (or @name in the text) asks members
        to act."""
        text = str(args.get("message", "")).strip()
        if not text:
            raise ToolFailed("message must not be empty")
        message_id = derived_id("msg_", "tool", ctx.call_id)

        def decide(state: WorkflowState, member: str) -> list[Any]:
            current = state.active.get(member)
            hop = current.hop + 1 if current else 0
            return decisions.post(
                state, message_id=message_id, sender=member, content=text,
                to=_names(args.get("to")), hop=hop,
            )  # fmt: skip

        await context.act(ctx, decide)
        return f"posted message {message_id}"

    async def channel_read(args: dict[str, Any], ctx: ToolContext) -> str:
        """Read the latest messages of the channel (`limit`, default 20)."""
        state, _ = await context.state(ctx)
        lines = [f"[{m.seq}] @{m.sender}: {m.content}" for m in state.messages[-_limit(args) :]]
        return "\n".join(lines) or "(the channel is empty)"

    async def my_inbox(args: dict[str, Any], ctx: ToolContext) -> str:
        """Messages that mention you (`limit`, default 20)."""
        state, member = await context.state(ctx)
        inbox = state.inbox(member)[-_limit(args) :]
        return "\n".join(f"[{m.seq}] @{m.sender}: {m.content}" for m in inbox) or "(no messages)"

    async def team_doc_read(args: dict[str, Any], ctx: ToolContext) -> str:
        """Read a team document by path."""
        state, _ = await context.state(ctx)
        path = str(args.get("path", ""))
        if path not in state.documents:
            listed = ", ".join(sorted(state.documents)) or "none"
            raise ToolFailed(f"no document {path!r}; documents: {listed}")
        return state.documents[path][0]

    async def team_doc_write(args: dict[str, Any], ctx: ToolContext) -> str:
        """Write (create or replace) a team document."""
        path, content = str(args.get("path", "")).strip(), str(args.get("content", ""))
        if not path:
            raise ToolFailed("path must not be empty")

        def decide(state: WorkflowState, member: str) -> list[Any]:
            return [DocumentWritten(path=path, content=content, author=member)]

        await context.act(ctx, decide)
        return f"wrote {path} ({len(content)} characters)"

    async def team_doc_list(args: dict[str, Any], ctx: ToolContext) -> str:
        """List the team documents with their last authors."""
        state, _ = await context.state(ctx)
        docs = sorted(state.documents.items())
        return "\n".join(f"{p} (by @{a}, {len(c)} chars)" for p, (c, a) in docs) or "(none)"

    async def resource_put(args: dict[str, Any], ctx: ToolContext) -> str:
        """Store large content; returns its content address (sha256:…) to share instead."""
        content = str(args.get("content", ""))
        await context.act(
            ctx, lambda s, member: decisions.store_resource(s, content=content, author=member)
        )
        return decisions.resource_id(content)

    async def resource_get(args: dict[str, Any], ctx: ToolContext) -> str:
        """Fetch stored content by its id (sha256:…)."""
        state, _ = await context.state(ctx)
        rid = str(args.get("id", ""))
        if rid not in state.resources:
            raise ToolFailed(f"no resource {rid!r}")
        return state.resources[rid]

    async def proposal_open(args: dict[str, Any], ctx: ToolContext) -> str:
        """Put a decision to a vote among members (all by default); it closes when everyone
        has voted."""
        proposal_id = "p-" + derived_id("", "proposal", ctx.call_id)[:10]
        options = args.get("options")
        state = await context.act(
            ctx,
            lambda s, member: decisions.open_proposal(
                s, proposal_id=proposal_id, author=member, title=str(args.get("title", "")),
                options=[str(o) for o in options] if isinstance(options, list) else [],
                description=str(args.get("description", "")), voters=_names(args.get("voters")),
            ),
        )  # fmt: skip
        voters = ", ".join(f"@{v}" for v in state.proposals[proposal_id].voters)
        return f"opened proposal {proposal_id}; voters: {voters}"

    async def proposal_vote(args: dict[str, Any], ctx: ToolContext) -> str:
        """Vote on an open proposal with one of its options (`proposalId` defaults to the
        latest open proposal you have not voted on)."""
        state, member = await context.state(ctx)
        pid = str(args.get("proposalId") or _awaiting(state, member))
        state = await context.act(
            ctx,
            lambda s, voter: decisions.vote(
                s, proposal_id=pid, voter=voter, choice=str(args.get("choice", "")),
                reason=str(args.get("reason", "")),
            ),
        )  # fmt: skip
        return _status(state, pid)

    async def proposal_status(args: dict[str, Any], ctx: ToolContext) -> str:
        """The votes and outcome of a proposal (or of all when no id is given)."""
        state, _ = await context.state(ctx)
        pid = args.get("proposalId")
        if pid:
            if pid not in state.proposals:
                raise ToolFailed(f"no proposal {pid!r}")
            return _status(state, str(pid))
        return "\n".join(_status(state, p) for p in state.proposals) or "(no proposals)"

    specs: list[tuple[Callable[..., Any], dict[str, Any]]] = [
        (channel_send, _schema(("message",), message=_STRING, to=_NAMES)),
        (channel_read, _schema(limit={"type": "integer"})),
        (my_inbox, _schema(limit={"type": "integer"})),
        (team_doc_read, _schema(("path",), path=_STRING)),
        (team_doc_write, _schema(("path", "content"), path=_STRING, content=_STRING)),
        (team_doc_list, _schema()),
        (resource_put, _schema(("content",), content=_STRING)),
        (resource_get, _schema(("id",), id=_STRING)),
        (
            proposal_open,
            _schema(
                ("title", "options"),
                title=_STRING,
                options=_NAMES,
                description=_STRING,
                voters=_NAMES,
            ),
        ),
        (
            proposal_vote,
            _schema(("choice",), proposalId=_STRING, choice=_STRING, reason=_STRING),
        ),
        (proposal_status, _schema(proposalId=_STRING)),
    ]
    return tuple(define_tool(fn, parameters=schema, timeout=15.0) for fn, schema in specs)


def _awaiting(state: WorkflowState, member: str) -> str:
    for p in reversed(state.proposals.values()):
        if not p.closed and member in p.voters and member not in p.votes:
            return p.proposal_id
    raise ToolFailed("no open proposal is waiting for your vote")


def _status(state: WorkflowState, proposal_id: str) -> str:
    p = state.proposals[proposal_id]
    tally = ", ".join(f"{o}: {n}" for o, n in p.tally().items())
    waiting = [v for v in p.voters if v not in p.votes]
    if p.closed:
        return f"{proposal_id} {p.title!r} closed: {p.outcome or 'a tie'} ({tally})"
    return f"{proposal_id} {p.title!r} open ({tally}); waiting for " + ", ".join(
        f"@{v}" for v in waiting
    )


class WorkflowMiddleware(Middleware):
    name = "workflow"
    tags = ("workflow",)

    def __init__(self) -> None:
        self._tools = build_tools(WorkflowContext())

    def tools(self) -> tuple[Tool, ...]:
        return self._tools
