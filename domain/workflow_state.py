"""A workflow's state as a fold of its events: members, channel, inboxes, the member runs
under way, documents, resources and proposals. Nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from agency.contracts.events import (
    ChannelMessagePosted,
    DocumentWritten,
    MemberAdded,
    MemberAnswered,
    MemberInvoked,
    MemberSkipped,
    ProposalClosed,
    ProposalOpened,
    ProposalVoted,
    ResourceStored,
    WorkflowCreated,
    WorkflowLimits,
    WorkflowStarted,
    WorkflowStopped,
)
from agency.contracts.events.workflow import RunOptions
from agency.contracts.records import RecordedEvent

WorkflowStatus = Literal["absent", "created", "running", "stopped"]


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    blueprint: str
    agent_type: str
    thread_id: str


@dataclass(frozen=True, slots=True)
class Message:
    seq: int
    ts: datetime
    message_id: str
    sender: str
    content: str
    mentions: tuple[str, ...]
    hop: int
    run_id: str | None
    reply_to: str | None
    run: RunOptions | None = None


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a member's thread for its inbox up to `upto_seq`."""

    member: str
    run_id: str
    upto_seq: int
    hop: int
    prompt: str
    attempt: int
    run: RunOptions | None = None


@dataclass
class Proposal:
    proposal_id: str
    title: str
    options: tuple[str, ...]
    author: str
    voters: tuple[str, ...]
    description: str
    votes: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    closed: bool = False
    outcome: str = ""

    def tally(self) -> dict[str, int]:
        counts = dict.fromkeys(self.options, 0)
        for choice in self.votes.values():
            counts[choice] = counts.get(choice, 0) + 1
        return counts


@dataclass
class WorkflowState:
    workflow_id: str = ""
    agency_id: str = ""
    name: str = ""
    tag: str = ""
    limits: WorkflowLimits = field(default_factory=WorkflowLimits)
    status: WorkflowStatus = "absent"
    run_id: str | None = None
    run_messages: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    # Per member: the last message seq its inbox has been handed over (or skipped) up to.
    cursors: dict[str, int] = field(default_factory=dict)
    # Per member: the run under way, or failed and waiting for its retry.
    active: dict[str, Invocation] = field(default_factory=dict)
    retrying: set[str] = field(default_factory=set)
    invocations: dict[str, Invocation] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    documents: dict[str, tuple[str, str]] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    proposals: dict[str, Proposal] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    last_seq: int = 0

    @property
    def display_name(self) -> str:
        return f"@{self.name}:{self.tag}" if self.tag else f"@{self.name}"

    def inbox(self, member: str, *, after: int = 0) -> list[Message]:
        """Messages mentioning `member` (not its own), after message seq `after`."""
        return [
            m
            for m in self.messages
            if m.seq > after and member in m.mentions and m.sender != member
        ]

    def pending(self, member: str) -> list[Message]:
        """The member's inbox not yet handed to one of its runs."""
        return self.inbox(member, after=self.cursors.get(member, 0))

    @property
    def settled(self) -> bool:
        """Nothing under way and nothing waiting: the run has gone quiet."""
        if self.status != "running":
            return not self.active
        return not self.active and not any(self.pending(m) for m in self.members)

    def member_of_thread(self, thread_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.thread_id == thread_id), None)


def fold(history: list[RecordedEvent], workflow_id: str = "") -> WorkflowState:
    state = WorkflowState(workflow_id=workflow_id)
    for event in history:
        apply(state, event)
    return state


def apply(state: WorkflowState, event: RecordedEvent) -> None:
    env = event.envelope
    state.last_seq = env.seq
    state.workflow_id = env.aggregate_id
    if env.idempotency_key:
        state.keys.add(env.idempotency_key)
    match env.payload:
        case WorkflowCreated(agency_id=agency, name=name, tag=tag, limits=limits):
            state.agency_id, state.name, state.tag, state.limits = agency, name, tag, limits
            state.status = "created"
        case MemberAdded(member=name, blueprint=blueprint, agent_type=agent_type, thread_id=t):
            state.members[name] = Member(name, blueprint, agent_type, t)
        case WorkflowStarted(run_id=run_id):
            state.status, state.run_id, state.run_messages = "running", run_id, 0
        case WorkflowStopped():
            state.status = "stopped"
        case ChannelMessagePosted() as p:
            state.messages.append(
                Message(
                    env.seq,
                    env.ts,
                    p.message_id,
                    p.sender,
                    p.content,
                    p.mentions,
                    p.hop,
                    p.run_id,
                    p.reply_to,
                    p.run,
                )
            )
            if p.sender != "system":
                state.run_messages += 1
        case MemberInvoked() as i:
            invocation = Invocation(
                i.member, i.run_id, i.upto_seq, i.hop, i.prompt, i.attempt, i.run
            )
            state.invocations[i.run_id] = invocation
            state.active[i.member] = invocation
            state.retrying.discard(i.member)
            state.cursors[i.member] = max(state.cursors.get(i.member, 0), i.upto_seq)
        case MemberAnswered(member=member, run_id=run_id, retrying=retrying):
            state.answered.add(run_id)
            if retrying:
                state.retrying.add(member)
            elif member in state.active and state.active[member].run_id == run_id:
                del state.active[member]
        case MemberSkipped(member=member, upto_seq=upto):
            state.cursors[member] = max(state.cursors.get(member, 0), upto)
        case DocumentWritten(path=path, content=content, author=author):
            state.documents[path] = (content, author)
        case ResourceStored(resource_id=resource_id, content=content):
            state.resources[resource_id] = content
        case ProposalOpened() as o:
            state.proposals[o.proposal_id] = Proposal(
                o.proposal_id, o.title, o.options, o.author, o.voters, o.description
            )
        case ProposalVoted(proposal_id=pid, voter=voter, choice=choice, reason=reason):
            if pid in state.proposals:
                state.proposals[pid].votes[voter] = choice
                state.proposals[pid].reasons[voter] = reason
        case ProposalClosed(proposal_id=pid, outcome=outcome):
            if pid in state.proposals:
                state.proposals[pid].closed = True
                state.proposals[pid].outcome = outcome
        case _:
            pass
