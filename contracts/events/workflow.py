"""Workflows: named groups of agents sharing a channel, documents, resources and proposals.

One workflow is one aggregate (`tenant.<t>.evt.workflow.<id>`). Its members are
threads of the runtime; the workflows controller turns a mention on the channel into a run
of the mentioned member's thread (`member.invoked`) and posts the run's answer back
(`member.answered` with a `channel.message_posted`). Schedules are aggregates of their own
(`tenant.<t>.evt.schedule.<id>`): a cron expression and the tick it last fired.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from agency.contracts.events.base import Event, InRun

MemberOutcome = Literal["completed", "error", "canceled"]
ScheduleTarget = Literal["workflow", "agent"]


class WorkflowLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Loop protection, per workflow run: how long a chain of answers may grow (`max_hops`:
    a person's message is hop 0, an answer to hop n is hop n + 1) and how many messages a
    run may post before it is stopped."""

    max_hops: int = 10
    max_messages: int = 50
    max_attempts: int = 3


class WorkflowCreated(Event, frozen=True, kw_only=True, tag="workflow.created"):
    agency_id: str
    name: str
    tag: str = ""
    limits: WorkflowLimits = WorkflowLimits()
    source: str = ""


class MemberAdded(Event, frozen=True, kw_only=True, tag="workflow.member_added"):
    """A member: its name in the channel, the blueprint it came from, the blueprint its
    thread runs (the base one with the workflow's context tools) and that thread."""

    member: str
    blueprint: str
    agent_type: str
    thread_id: str


class WorkflowStarted(InRun, frozen=True, kw_only=True, tag="workflow.started"):
    """The workflow's run `run_id` began."""


class WorkflowStopped(Event, frozen=True, kw_only=True, tag="workflow.stopped"):
    run_id: str | None = None
    reason: str = ""


class RunOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the runs a message sets off are asked for beyond their prompt (as on
    `runtime.invoke`): a URL each run's end is POSTed to, and the static breakpoints it
    pauses at. A schedule's tick carries its schedule's."""

    webhook: str | None = None
    pause_before_tools: bool = False
    pause_before_model: bool = False
    pause_after_tools: bool = False


class ChannelMessagePosted(Event, frozen=True, kw_only=True, tag="channel.message_posted"):
    """A message on the channel. `mentions` are the members it asks to act (their inboxes);
    `hop` counts answers since a person spoke; `run_id` is the workflow run it belongs to."""

    message_id: str
    sender: str
    content: str
    mentions: tuple[str, ...] = ()
    hop: int = 0
    run_id: str | None = None
    reply_to: str | None = None
    run: RunOptions | None = None


class MemberInvoked(Event, frozen=True, kw_only=True, tag="member.invoked"):
    """The controller started a run of a member's thread for its inbox up to `upto_seq`."""

    member: str
    run_id: str
    upto_seq: int
    hop: int
    prompt: str
    attempt: int = 1
    # How the run is asked for, from the newest message of the inbox that said (a tick's).
    run: RunOptions | None = None


class MemberAnswered(Event, frozen=True, kw_only=True, tag="member.answered"):
    """A member's run ended. An error with attempts left is retried (`retrying`)."""

    member: str
    run_id: str
    outcome: MemberOutcome
    message_id: str | None = None
    error: str = ""
    retrying: bool = False


class MemberSkipped(Event, frozen=True, kw_only=True, tag="member.skipped"):
    """Mentions up to `upto_seq` were not acted on (loop limit, workflow stopped)."""

    member: str
    upto_seq: int
    reason: str


class DocumentWritten(Event, frozen=True, kw_only=True, tag="document.written"):
    path: str
    content: str
    author: str


class ResourceStored(Event, frozen=True, kw_only=True, tag="resource.stored"):
    """Content-addressed: `resource_id` is `sha256:<hex>` of the content."""

    resource_id: str
    content: str
    author: str
    size: int


class ProposalOpened(Event, frozen=True, kw_only=True, tag="proposal.opened"):
    """A decision put to a vote among `voters`; it closes once every voter has voted."""

    proposal_id: str
    title: str
    options: tuple[str, ...]
    author: str
    voters: tuple[str, ...]
    description: str = ""


class ProposalVoted(Event, frozen=True, kw_only=True, tag="proposal.voted"):
    proposal_id: str
    voter: str
    choice: str
    reason: str = ""


class ProposalClosed(Event, frozen=True, kw_only=True, tag="proposal.closed"):
    """`outcome` is the option with most votes, or "" on a tie."""

    proposal_id: str
    outcome: str
    tally: dict[str, int] = {}
    reason: str = ""


class ScheduleOptions(msgspec.Struct, frozen=True, kw_only=True):
    """When a schedule ticks besides its cron: in which time zone (an IANA name), until
    when (no tick after `end_time`), whether at all (`enabled`), and the labels its owner
    gave it (`metadata`, strings)."""

    timezone: str = "UTC"
    end_time: datetime | None = None
    enabled: bool = True
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    # How each tick's runs are asked for (a LangGraph cron's `webhook` and breakpoints).
    run: RunOptions | None = None
    # An agent schedule's tick runs on a thread of its own, a new one each tick, rather than
    # on the agent's thread in `@global`: kept, or deleted when its run ends (LangGraph's
    # stateless cron, `on_run_completed`). None: the agent's thread.
    own_thread: Literal["keep", "delete"] | None = None


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A cron trigger (in `options.timezone`, UTC unless said) of a workflow (a message
    posted to it) or of an agent (a run of its thread in the agency's `@global` workflow):
    what `workflows.set_schedule` asks for and `schedule.set` records."""

    agency_id: str
    name: str
    cron: str
    target: ScheduleTarget
    workflow_id: str | None = None
    agent: str | None = None
    message: str = ""
    options: ScheduleOptions = msgspec.field(default_factory=ScheduleOptions)


class ScheduleSet(Event, Schedule, frozen=True, kw_only=True, tag="schedule.set"):
    """A schedule was set (created, or replaced whole)."""


class ScheduleRemoved(Event, frozen=True, kw_only=True, tag="schedule.removed"):
    reason: str = ""


class ScheduleFired(Event, frozen=True, kw_only=True, tag="schedule.fired"):
    """One tick of a schedule; at most one per tick however many schedulers run."""

    tick: datetime


WorkflowEvent = (
    WorkflowCreated
    | MemberAdded
    | WorkflowStarted
    | WorkflowStopped
    | ChannelMessagePosted
    | MemberInvoked
    | MemberAnswered
    | MemberSkipped
    | DocumentWritten
    | ResourceStored
    | ProposalOpened
    | ProposalVoted
    | ProposalClosed
)
ScheduleEvent = ScheduleSet | ScheduleRemoved | ScheduleFired
