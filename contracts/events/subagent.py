"""Subagents: child threads spawned by a parent's tool call, reporting back to it."""

from __future__ import annotations

from typing import Literal

import msgspec

from agency.contracts.events.base import Event, InRun
from agency.contracts.events.blueprint import BlueprintSpec

ChildOutcome = Literal["completed", "error", "canceled", "timeout"]
# How a child's results reach its parent: `implicit` queues its completion and failure to
# the parent; `explicit` leaves that to its tools and hooks (`notify_parent`, `set_status`).
ParentCommunication = Literal["implicit", "explicit"]


class SubagentCall(msgspec.Struct, frozen=True, kw_only=True):
    """The arguments of a tool call that spawns a child. A resumable child has a `name`
    and can be messaged again later; `attachments` are paths of the parent's files to copy
    over. `blueprint` is the child's when the subagent entry defines it inline (else it is
    the agency's or the system's blueprint named `subagent_type`)."""

    run_id: str
    tool_call_id: str
    subagent_type: str
    description: str
    timeout_ms: int | None = None
    name: str | None = None
    resumable: bool = False
    attachments: tuple[str, ...] = ()
    blueprint: BlueprintSpec | None = None


class SubagentRequested(Event, SubagentCall, frozen=True, kw_only=True, tag="subagent.requested"):
    """A tool call asks for a child thread. `sealed_env` holds the child's scoped variables
    (`scopedEnv`), sealed (`infra/sealing.py`): runtime-only data, never shown to a model.
    `deferred`: asked for after the call was answered (its variables were provided later),
    so it is spawned whatever became of the run, and reports as a non-blocking child."""

    blocking: bool = True
    sealed_env: str = ""
    deferred: bool = False
    # For the parent's child registry: a short title and what the child is for (the call's
    # `title` and, for `subagent_create`, its `description`); the children one model step
    # spawns share `spawn_group_id`.
    title: str | None = None
    entry_description: str | None = None
    spawn_group_id: str | None = None
    parent_communication: ParentCommunication = "implicit"


class SubagentMessaged(InRun, frozen=True, kw_only=True, tag="subagent.messaged"):
    """A tool call sends a resumable child another message (it starts a run there)."""

    tool_call_id: str
    child_thread_id: str
    message: str
    blocking: bool = True
    attachments: tuple[str, ...] = ()


class SubagentStatus(Event, frozen=True, kw_only=True, tag="subagent.status"):
    """A child's progress note (its session status tool), shown in the parent's registry."""

    child_thread_id: str
    status: str


class SubagentSpawned(InRun, frozen=True, kw_only=True, tag="subagent.spawned"):
    """A child thread exists and is linked to the parent; the rest is its entry in the
    parent's child registry (`ThreadState.children`), completed by the coordinator from
    the request and the child's blueprint."""

    tool_call_id: str
    child_thread_id: str
    token: str
    subagent_type: str
    name: str | None = None
    title: str | None = None
    description: str = ""
    resumable: bool = False
    blocking: bool = True
    thread_name: str | None = None
    spawn_group_id: str | None = None
    parent_communication: ParentCommunication = "implicit"


class SubagentCompleted(InRun, frozen=True, kw_only=True, tag="subagent.completed"):
    """A child's run ended; `attachments` are the parent-local paths of returned files."""

    tool_call_id: str
    child_thread_id: str
    outcome: ChildOutcome
    report: str = ""
    attachments: tuple[str, ...] = ()


class SubagentEnvRequired(
    Event, SubagentCall, frozen=True, kw_only=True, tag="subagent.env_required"
):
    """A `task` / `subagent_create` call could not spawn its child: scoped variables the
    entry requires (`scopedEnv`) are set neither in the runtime's environment nor provided.
    The call was answered with a tool error naming `request_id`; values posted to
    `/threads/{t}/variables/{request_id}` spawn the child with the call's own arguments
    (kept here). `sealed_present` holds the values that were found, sealed."""

    request_id: str
    required: tuple[str, ...]
    missing: tuple[str, ...]
    sealed_present: str = ""


class SubagentVariablesProvided(
    Event, frozen=True, kw_only=True, tag="subagent.variables_provided"
):
    """Values for a `subagent.env_required` request were provided (sealed: never in
    clear); they count for this thread's later spawns too."""

    request_id: str
    names: tuple[str, ...]
    sealed_env: str


class ParentNotified(Event, frozen=True, kw_only=True, tag="subagent.parent_notified"):
    """On a child: it escalates `content` to its parent (`notify_parent`, by a tool or a
    hook); the coordinator queues it to the parent as a message."""

    run_id: str | None = None
    content: str


class ChildStatusSet(Event, frozen=True, kw_only=True, tag="subagent.status_set"):
    """On a child: it sets its status text in the parent's registry (`set_status`) and goes
    on; the coordinator records it on the parent as `subagent.status`."""

    run_id: str | None = None
    status: str


class SubagentTerminateRequested(
    Event, frozen=True, kw_only=True, tag="subagent.terminate_requested"
):
    """On the parent: its `subagent_terminate` call asks for a child to be terminated; the
    coordinator sends the child's runtime `runtime.terminate`."""

    run_id: str
    tool_call_id: str
    child_thread_id: str
    reason: str = ""


class SubagentTerminated(Event, frozen=True, kw_only=True, tag="subagent.terminated"):
    """On the parent: its child was terminated; the registry entry says so from now on."""

    child_thread_id: str
    reason: str = ""


SubagentEvent = (
    SubagentRequested
    | SubagentMessaged
    | SubagentSpawned
    | SubagentCompleted
    | SubagentStatus
    | SubagentEnvRequired
    | SubagentVariablesProvided
    | SubagentTerminated
    | SubagentTerminateRequested
    | ParentNotified
    | ChildStatusSet
)
