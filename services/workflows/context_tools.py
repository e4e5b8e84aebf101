"""What the workflow context tools do: what a member of a workflow can do with the shared
context.

The tools (`channel_send`, `channel_read`, `my_inbox`, `team_doc_read|write|list`,
`resource_put|get`, `proposal_open|vote|status`) are declared by the `workflow` middleware
of the agents API (`services/agents/builtin/workflow.py`); the tools service runs each call
here, through `ToolContext.workflow`. They act on the workflow aggregate the calling thread
belongs to (named in its `thread.created`); each append carries the key `tool:<call id>`,
so a call run again after a crash writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agency.contracts.events import DocumentWritten, ThreadCreated
from agency.contracts.ids import derived_id
from agency.domain import workflow_decisions as decisions
from agency.domain.workflow_state import WorkflowState, fold
from agency.infra.jetstream.ports import AggregateStore
from agency.services.agents.tools import ToolContext, ToolFailed
from agency.services.decide import applied, decide_and_append

ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


class WorkflowContext:
    """Finds the calling member's workflow and reads or changes it."""

    def __init__(self, store: AggregateStore) -> None:
        self._store = store
        self._links: dict[tuple[str, str], tuple[str, str]] = {}

    async def link(self, ctx: ToolContext) -> tuple[AggregateStore, str, str]:
        """(store, workflow id, member name) of the calling thread."""
        key = (ctx.tenant_id, ctx.thread_id)
        if key not in self._links:
            history = await self._store.read(ctx.tenant_id, "thread", ctx.thread_id)
            created = next(
                (e.payload for e in history if isinstance(e.payload, ThreadCreated)), None
            )
            request = created.request if created else {}
            if "workflow_id" not in request or "member" not in request:
                raise ToolFailed("this thread is not a member of a workflow")
            self._links[key] = (request["workflow_id"], request["member"])
        workflow_id, member = self._links[key]
        return self._store, workflow_id, member

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


def build_tools(context: WorkflowContext) -> dict[str, ToolFn]:
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

    found: list[ToolFn] = [
        channel_send, channel_read, my_inbox, team_doc_read, team_doc_write, team_doc_list,
        resource_put, resource_get, proposal_open, proposal_vote, proposal_status,
    ]  # fmt: skip
    return {fn.__name__: fn for fn in found}


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


class WorkflowContextTools:
    """The workflow context tools over the event store: what `ToolContext.workflow` is in
    the tools service (`services.agents.WorkflowTools`)."""

    def __init__(self, store: AggregateStore) -> None:
        self._tools = build_tools(WorkflowContext(store))

    async def run(self, tool: str, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Run the context tool named `tool` for the calling member."""
        fn = self._tools.get(tool)
        if fn is None:
            raise ToolFailed(f"no workflow context tool {tool!r}")
        return await fn(dict(args), ctx)
