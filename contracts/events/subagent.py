"""Subagents: child threads spawned by a parent's tool call, reporting back to it."""

from __future__ import annotations

from typing import Literal

from contracts.events.base import Event

ChildOutcome = Literal["completed", "error", "canceled", "timeout"]


class SubagentRequested(Event, frozen=True, kw_only=True, tag="subagent.requested"):
    """A tool call asks for a child thread. A resumable child has a `name` and can be
    messaged again later; `attachments` are paths of the parent's files to copy over.
    `sealed_env` holds the child's scoped variables (`scopedEnv`), sealed
    (`services/common/sealing.py`): runtime-only data, never shown to a model. `deferred`:
    asked for after the call was answered (its variables were provided later), so it is
    spawned whatever became of the run, and reports as a non-blocking child."""

    run_id: str
    tool_call_id: str
    subagent_type: str
    description: str
    timeout_ms: int | None = None
    blocking: bool = True
    name: str | None = None
    resumable: bool = False
    attachments: tuple[str, ...] = ()
    sealed_env: str = ""
    deferred: bool = False


class SubagentMessaged(Event, frozen=True, kw_only=True, tag="subagent.messaged"):
    """A tool call sends a resumable child another message (it starts a run there)."""

    run_id: str
    tool_call_id: str
    child_thread_id: str
    message: str
    blocking: bool = True
    attachments: tuple[str, ...] = ()


class SubagentStatus(Event, frozen=True, kw_only=True, tag="subagent.status"):
    """A child's progress note (its session status tool), shown in the parent's registry."""

    child_thread_id: str
    status: str


class SubagentSpawned(Event, frozen=True, kw_only=True, tag="subagent.spawned"):
    run_id: str
    tool_call_id: str
    child_thread_id: str
    token: str
    subagent_type: str


class SubagentCompleted(Event, frozen=True, kw_only=True, tag="subagent.completed"):
    """A child's run ended; `attachments` are the parent-local paths of returned files."""

    run_id: str
    tool_call_id: str
    child_thread_id: str
    outcome: ChildOutcome
    report: str = ""
    attachments: tuple[str, ...] = ()


class SubagentEnvRequired(Event, frozen=True, kw_only=True, tag="subagent.env_required"):
    """A `task` / `subagent_create` call could not spawn its child: scoped variables the
    entry requires (`scopedEnv`) are set neither in the runtime's environment nor provided.
    The call was answered with a tool error naming `request_id`; values posted to
    `/threads/{t}/variables/{request_id}` spawn the child with the call's own arguments
    (kept here). `sealed_present` holds the values that were found, sealed."""

    run_id: str
    tool_call_id: str
    request_id: str
    subagent_type: str
    required: tuple[str, ...]
    missing: tuple[str, ...]
    description: str
    name: str | None = None
    resumable: bool = False
    timeout_ms: int | None = None
    attachments: tuple[str, ...] = ()
    sealed_present: str = ""


class SubagentVariablesProvided(
    Event, frozen=True, kw_only=True, tag="subagent.variables_provided"
):
    """Values for a `subagent.env_required` request were provided (sealed: never in
    clear); they count for this thread's later spawns too."""

    request_id: str
    names: tuple[str, ...]
    sealed_env: str


SubagentEvent = (
    SubagentRequested
    | SubagentMessaged
    | SubagentSpawned
    | SubagentCompleted
    | SubagentStatus
    | SubagentEnvRequired
    | SubagentVariablesProvided
)
