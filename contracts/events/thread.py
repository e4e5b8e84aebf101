"""Thread lifecycle and conversation content: what the loop folds its state from."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from agency.contracts.events.base import (
    ChatMessage,
    ClientTool,
    Event,
    InRun,
    ParentRef,
    Todo,
)
from agency.contracts.events.blueprint import BlueprintSpec

# What an invoke does while another run of the thread is active: `queue` joins it before
# its next model step (or starts a run of its own when it ends without one), `after` waits
# for it to end and starts a run of its own, `reject` is refused, `interrupt` cancels it.
ConcurrencyStrategy = Literal["queue", "after", "reject", "interrupt"]

# The person a root thread serves, as the tenant names them (an account id, an email).
END_USER_ID_PATTERN = r"^[A-Za-z0-9._@+:-]{1,128}$"
EndUserId = Annotated[str, msgspec.Meta(pattern=END_USER_ID_PATTERN)]
_END_USER_ID = re.compile(END_USER_ID_PATTERN)


def end_user_problem(value: str) -> str | None:
    """Why `value` is no end-user id, or None."""
    if _END_USER_ID.match(value):
        return None
    return "must be 1 to 128 letters, digits or any of . _ @ + : -"


class ThreadCreated(Event, frozen=True, kw_only=True, tag="thread.created"):
    agency_id: str
    agent_type: str
    parent: ParentRef | None = None
    request: dict[str, str] = {}
    # A subagent's scoped variables, sealed: runtime-only data, never shown to a model.
    sealed_env: str = ""
    # The blueprint of a subagent its parent's entry defines inline: the thread runs it
    # while its agent type is that blueprint's name (a handoff elsewhere leaves it).
    blueprint: BlueprintSpec | None = None
    # The end user the thread serves, given at its creation (`endUserId` over HTTP,
    # LangGraph's `metadata.user_id`): `agency users export` gathers their threads.
    end_user_id: EndUserId | None = None


class RequestAccepted(InRun, frozen=True, kw_only=True, tag="request.accepted"):
    """An invoke was accepted; the run it starts (now or when queued runs finish)."""

    idempotency_key: str
    strategy: ConcurrencyStrategy = "queue"
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}
    # The child thread whose report the messages are (a non-blocking subagent's result).
    reported_by: str | None = None
    # A URL the run's end is POSTed to, signed (`services/webhooks/`).
    webhook: str | None = None
    # The thread's tree is deleted when the run ends (`services/threads/run_end.py`).
    delete_thread_on_end: bool = False
    # The invoke's `stream_modes`: what a client's rejoin of the run streams.
    stream_modes: tuple[str, ...] = ()
    # Every tool call of the run waits for approval before it runs (the invoke's
    # `pause_before_tools`): the runtime pauses the run as for the blueprint's `hitl.tools`.
    pause_before_tools: bool = False
    # The run pauses before every model call, or before each one that follows a tool
    # step's results (the invoke's `pause_before_model`, `pause_after_tools`).
    pause_before_model: bool = False
    pause_after_tools: bool = False
    # The blueprint the run runs as (the invoke's `agent_type`): when the run starts, the
    # thread switches to it first (`thread.blueprint_switched`) if it runs another then. A
    # request of another blueprint than the active run's never joins that run.
    agent_type: str | None = None
    # Tools the client runs itself, offered to the model during the run (`ClientTool`).
    client_tools: tuple[ClientTool, ...] = ()


class RequestRejected(InRun, frozen=True, kw_only=True, tag="request.rejected"):
    idempotency_key: str
    reason: str


class RequestInjected(InRun, frozen=True, kw_only=True, tag="request.injected"):
    """A queued request joined the thread's active run instead of starting one of its own:
    its files and messages follow, appended to `run_id` before that run's next model step
    (or as it resumes from `exhausted`). The request's own run id (`request_run_id`) ends
    here; what the client asked for is answered by `run_id`."""

    request_run_id: str
    idempotency_key: str


class MessageAppended(Event, frozen=True, kw_only=True, tag="message.appended"):
    run_id: str | None = None
    message: ChatMessage


FileOrigin = Literal["tool", "attachment"]


class FileWritten(Event, frozen=True, kw_only=True, tag="file.written"):
    """A file of the thread's virtual filesystem; files never touch the host. `origin` says
    whether the agent wrote it or it was attached (by a request, a parent or a child)."""

    run_id: str | None = None
    path: str
    content: str
    origin: FileOrigin = "tool"


class TodosWritten(Event, frozen=True, kw_only=True, tag="todos.written"):
    run_id: str | None = None
    todos: tuple[Todo, ...]


class ContextTrimmed(InRun, frozen=True, kw_only=True, tag="context.trimmed"):
    """History assembly dropped the oldest turns to stay within the token budget."""

    step: int
    dropped_messages: int
    tokens_before: int
    tokens_after: int
    budget: int


class BlueprintSwitched(Event, frozen=True, kw_only=True, tag="thread.blueprint_switched"):
    """Control of the thread moved to another blueprint (handoff); history is kept."""

    run_id: str | None = None
    from_agent_type: str
    to_agent_type: str
    reason: str = ""


class SessionTurn(InRun, frozen=True, kw_only=True, tag="session.turn"):
    """A dual-AI session hands the floor to a side (`A` or `B`) for turn number `turn`."""

    side: Literal["A", "B"]
    turn: int


class SessionStatusSet(InRun, frozen=True, kw_only=True, tag="session.status"):
    """A dual-AI side published a progress note (its session status tool)."""

    side: Literal["A", "B"]
    status: str


class ThreadTerminated(Event, frozen=True, kw_only=True, tag="thread.terminated"):
    """The thread was shut down (`terminate`): no run starts on it and no message joins it
    any more; a child's parent shows it `terminated` in its registry."""

    reason: str = ""


class ThreadDeleted(Event, frozen=True, kw_only=True, tag="thread.deleted"):
    """The thread's content was erased at `requested_by`'s request (docs/data.md): the data
    key of its tree (`root_thread_id`) is destroyed, so every earlier event of the threads
    in `tree` is unreadable for good; reads of them answer 410 from this event (its time is
    the envelope's). Never sealed, so it is always readable. `request_id`: the erasure by
    scope it was part of (the id of its `end_user.forget_requested` or
    `agency.deletion_requested`), if any."""

    requested_by: str
    root_thread_id: str
    tree: tuple[str, ...] = ()
    request_id: str | None = None


class ThreadMetadataSet(Event, frozen=True, kw_only=True, tag="thread.metadata_set"):
    """Keys of the thread's metadata set (merged over those its creation and earlier
    settings gave it)."""

    metadata: dict[str, str] = {}


class ThreadRetentionSet(Event, frozen=True, kw_only=True, tag="thread.retention_set"):
    """How long this thread is kept after its last activity, in seconds (LangGraph's
    `ttl`), within its agency's retention; None leaves the agency's."""

    seconds: float | None = None


# The nodes of the agent loop's graph as LangGraph names them (`model` ⇄ `tools`).
GraphNode = Literal["model", "tools"]


class StateUpdated(Event, frozen=True, kw_only=True, tag="thread.state_updated"):
    """A person's update of an idle thread's state (`runtime.update_state`) was made as the
    graph's node `as_node` (LangGraph's `update_state(as_node=…)`): the update's events
    follow it, and what comes after that node is the thread's next step until its next run
    (`tools` → `model`)."""

    as_node: GraphNode


class StateRestored(Event, frozen=True, kw_only=True, tag="thread.state_restored"):
    """An idle thread's state set back to what it was at its event `from_seq` (LangGraph's
    run from a past checkpoint): these messages, files and todos are its state from here
    on. Nothing before is removed: the log keeps both branches. `message_ids` are the ids
    the messages were read by there (`msg-<seq>`, a model step's `<run id>-<step>`)."""

    from_seq: int
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}
    todos: tuple[Todo, ...] = ()
    message_ids: tuple[str, ...] = ()


class HistoryPruned(Event, frozen=True, kw_only=True, tag="thread.history_pruned"):
    """The thread's checkpoints before its event `before_seq` (its latest checkpoint then)
    are no longer listed nor read (LangGraph's `threads.prune(strategy="keep_latest")`):
    its state stays as it is, and the log keeps every event (the thread's own events,
    replays and forks still read them)."""

    before_seq: int


class CheckpointSaved(Event, frozen=True, kw_only=True, tag="checkpoint.saved"):
    """The thread's state where a run stopped: the sha256 and byte size of a canonical
    snapshot of its fold up to and including seq `upto_seq` (`services/runtime/checkpoint`).
    `run_id` is the run that paused or ended."""

    state_hash: str
    size: int
    upto_seq: int
    run_id: str | None = None


ThreadEvent = (
    ThreadCreated
    | RequestAccepted
    | RequestRejected
    | RequestInjected
    | MessageAppended
    | FileWritten
    | TodosWritten
    | ContextTrimmed
    | BlueprintSwitched
    | SessionTurn
    | SessionStatusSet
    | ThreadTerminated
    | ThreadDeleted
    | ThreadMetadataSet
    | ThreadRetentionSet
    | StateUpdated
    | StateRestored
    | HistoryPruned
    | CheckpointSaved
)
