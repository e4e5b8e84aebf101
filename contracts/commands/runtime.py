"""Commands of the runtime (runs of a thread) and of the subagents service."""

from __future__ import annotations

from datetime import datetime

from agency.contracts.commands.base import Command
from agency.contracts.events.base import ChatMessage, ClientTool, Todo, ToolCall
from agency.contracts.events.thread import ConcurrencyStrategy, GraphNode, StateRestored


class InvokeThread(Command, frozen=True, kw_only=True, tag="runtime.invoke"):
    agency_id: str
    thread_id: str
    run_id: str
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}
    strategy: ConcurrencyStrategy = "queue"
    # Set when the messages are a non-blocking child's report (the child thread's id).
    reported_by: str | None = None
    # A URL to POST to when the run ends (`services/webhooks/`).
    webhook: str | None = None
    # The thread is deleted when the run ends (LangGraph's stateless `on_completion="delete"`,
    # `services/threads/run_end.py`).
    delete_thread_on_end: bool = False
    # What a client streams the run as (its LangGraph `stream_mode`s): a rejoin that names
    # none streams these. Nothing else reads them.
    stream_modes: tuple[str, ...] = ()
    # Run as this blueprint: the thread switches to it first (`thread.blueprint_switched`):
    # at once when it has no active run or the strategy is `interrupt`; with `queue` or
    # `after`, when the request's run starts, after the active one (it never joins a run
    # of another blueprint); refused with `reject`, or while the active run is out of steps.
    agent_type: str | None = None
    # Every tool call of this run waits for a person's approval before it runs, as if the
    # blueprint's `hitl.tools` named every tool (LangGraph's `interrupt_before=["tools"]`).
    pause_before_tools: bool = False
    # The run pauses (`run.paused`, reason `breakpoint`) before every model call, the first
    # included (LangGraph's `interrupt_before=["model"]`), or before each model call that
    # follows a tool step's results (`interrupt_after=["tools"]`); an approval goes on.
    pause_before_model: bool = False
    pause_after_tools: bool = False
    # Tools the client runs itself, offered to the model during this run (`ClientTool`).
    client_tools: tuple[ClientTool, ...] = ()
    # Decided no sooner (LangGraph's `after_seconds`): the runtime hands the command back
    # to the broker until then (a durable timer), and decides it as sent at that time. A
    # `runtime.delay` of the same run puts it on the log as pending meanwhile.
    not_before: datetime | None = None


class DelayRun(Command, frozen=True, kw_only=True, tag="runtime.delay"):
    """The run `run_id`, whose invoke waits for `not_before`, is on the thread's log as
    pending from now (`run.delayed`): listed, and canceled like a queued run. Nothing once
    the run is there (accepted, or delayed already)."""

    agency_id: str
    thread_id: str
    run_id: str
    not_before: datetime


class ApproveToolCalls(Command, frozen=True, kw_only=True, tag="runtime.approve"):
    """Decide on the calls a run paused for. With `run_id`, it applies to that run only:
    once another run is active (or none), it does nothing."""

    agency_id: str
    thread_id: str
    approved: bool
    modified_tool_calls: tuple[ToolCall, ...] | None = None
    reason: str = ""
    run_id: str | None = None
    # What a client streams the resumed run as: a rejoin that names no modes streams these.
    stream_modes: tuple[str, ...] = ()
    # An update of the run's state with the decision: `files` written at once, `messages`
    # appended after the step's tool results, before the run's next model call.
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}


class CancelRun(Command, frozen=True, kw_only=True, tag="runtime.cancel"):
    """Cancel the thread's active run. With `run_id`, that run only: a cancel delivered
    again after it ended never cancels the next run. A command whose idempotency key the
    thread has already decided does nothing, however late it comes."""

    agency_id: str
    thread_id: str
    reason: str = ""
    run_id: str | None = None


class TerminateThread(Command, frozen=True, kw_only=True, tag="runtime.terminate"):
    """Shut the thread down softly: its active run ends (`run.canceled`, reason
    `terminated`), its queued requests with it, and it refuses every later invoke. A
    thread terminated already is left as it is."""

    agency_id: str
    thread_id: str
    reason: str = ""


class UpdateThreadState(Command, frozen=True, kw_only=True, tag="runtime.update_state"):
    """Add to an idle thread's state, as a person would: `messages` appended, `files`
    written, the todos replaced (when given). Refused while a run is active."""

    agency_id: str
    thread_id: str
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}
    todos: tuple[Todo, ...] | None = None
    # Made as this node of the graph (LangGraph's `as_node`): `thread.state_updated` first.
    as_node: GraphNode | None = None
    # The state set back to a past checkpoint's before the rest (`thread.state_restored`).
    restore: StateRestored | None = None


class WatchRun(Command, frozen=True, kw_only=True, tag="runtime.watch"):
    """The runtime's watchdog over one run, kept by the broker: delivered again and again
    (deferred) until the run has ended; a run without progress and without a worker holding
    its thread is resumed, and ended as `stalled` if that does not help. `generation`
    counts the times the watch was sent afresh to stay within the delivery limit; `epoch`
    names what armed it again after it was given up (a run parked on a person's approval
    gives its watch up; the approval arms a new one)."""

    agency_id: str
    thread_id: str
    run_id: str
    generation: int = 0
    epoch: str = ""


class SubagentDeadline(Command, frozen=True, kw_only=True, tag="subagents.deadline"):
    """A subagent call's timeout, kept by the broker: delivered again until `deadline`."""

    agency_id: str
    parent_thread_id: str
    run_id: str
    tool_call_id: str
    child_thread_id: str
    deadline: datetime
    timeout_ms: int


class ProvideVariables(Command, frozen=True, kw_only=True, tag="subagents.provide_variables"):
    """Values for a parent's `subagent.env_required` request, sealed by the sender: the
    coordinator records them and spawns the deferred child."""

    agency_id: str
    parent_thread_id: str
    request_id: str
    names: tuple[str, ...]
    sealed_env: str
