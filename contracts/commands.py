"""Commands: intents sent to one service, which may reject them.

Each command names the service and verb that form its subject
(`tenant.<t>.cmd.<service>.<verb>`); the idempotency key becomes `Nats-Msg-Id`.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec

from agency.contracts.events.base import ChatMessage, ClientTool, ParentRef, Todo, ToolCall
from agency.contracts.events.blueprint import BlueprintSpec
from agency.contracts.events.thread import ConcurrencyStrategy, GraphNode, StateRestored
from agency.contracts.events.webhook import WebhookKind
from agency.contracts.events.workflow import Schedule, WorkflowLimits


class Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    service: ClassVar[str]
    verb: ClassVar[str]
    schema_version: ClassVar[int] = 1


class CreateTenant(Command, frozen=True, kw_only=True, tag="registry.create_tenant"):
    service = "registry"
    verb = "create_tenant"
    name: str
    key_id: str
    key_hash: str


class IssueApiKey(Command, frozen=True, kw_only=True, tag="registry.issue_api_key"):
    """A new key of the tenant; with `replaces`, the old key is revoked in the same append
    (a rotation: there is no moment with neither or, after it, both)."""

    service = "registry"
    verb = "issue_api_key"
    key_id: str
    key_hash: str
    name: str = ""
    replaces: str | None = None


class RevokeApiKey(Command, frozen=True, kw_only=True, tag="registry.revoke_api_key"):
    service = "registry"
    verb = "revoke_api_key"
    key_id: str


class SetTenantProvider(Command, frozen=True, kw_only=True, tag="registry.set_tenant_provider"):
    """The tenant's own key and base URL of a provider, sealed by the API."""

    service = "registry"
    verb = "set_tenant_provider"
    name: str
    sealed: str


class RemoveTenantProvider(
    Command, frozen=True, kw_only=True, tag="registry.remove_tenant_provider"
):
    service = "registry"
    verb = "remove_tenant_provider"
    name: str


class SetTenantModelPolicy(
    Command, frozen=True, kw_only=True, tag="registry.set_tenant_model_policy"
):
    service = "registry"
    verb = "set_tenant_model_policy"
    operator_fallback: bool


class SetTenantBudget(Command, frozen=True, kw_only=True, tag="registry.set_tenant_budget"):
    """The operator's: the tenant's spend budget per period (None: the default)."""

    service = "registry"
    verb = "set_tenant_budget"
    tokens: int | None = None
    usd: float | None = None


class SetTenantRetention(Command, frozen=True, kw_only=True, tag="registry.set_tenant_retention"):
    """How long the tenant's threads are kept after their last activity, in seconds (None:
    the operator's default; 0: kept), within the operator's maximum."""

    service = "registry"
    verb = "set_tenant_retention"
    seconds: float | None = None


class SetAgencyRetention(Command, frozen=True, kw_only=True, tag="registry.set_agency_retention"):
    """How long one agency's threads are kept after their last activity, in seconds (None:
    the tenant's), within the tenant's."""

    service = "registry"
    verb = "set_agency_retention"
    agency_id: str
    seconds: float | None = None


class SetAgencyBudget(Command, frozen=True, kw_only=True, tag="registry.set_agency_budget"):
    """The tenant's: one agency's spend budget per period (None: the default)."""

    service = "registry"
    verb = "set_agency_budget"
    agency_id: str
    tokens: int | None = None
    usd: float | None = None


class CreateAgency(Command, frozen=True, kw_only=True, tag="registry.create_agency"):
    service = "registry"
    verb = "create_agency"
    agency_id: str
    name: str
    metadata: dict[str, str] = {}


class SaveBlueprint(Command, frozen=True, kw_only=True, tag="registry.save_blueprint"):
    service = "registry"
    verb = "save_blueprint"
    agency_id: str
    blueprint: BlueprintSpec


class DeleteBlueprint(Command, frozen=True, kw_only=True, tag="registry.delete_blueprint"):
    """Delete the agency's own blueprint `name` (a static one of that name comes back)."""

    service = "registry"
    verb = "delete_blueprint"
    agency_id: str
    name: str


class SubscribeWebhook(Command, frozen=True, kw_only=True, tag="registry.subscribe_webhook"):
    """Subscribe `url` to the agency's events of `kinds`; the secret is sealed by the API."""

    service = "registry"
    verb = "subscribe_webhook"
    agency_id: str
    subscription_id: str
    url: str
    kinds: tuple[WebhookKind, ...]
    sealed_secret: str
    description: str = ""


class UnsubscribeWebhook(Command, frozen=True, kw_only=True, tag="registry.unsubscribe_webhook"):
    service = "registry"
    verb = "unsubscribe_webhook"
    agency_id: str
    subscription_id: str


class ConfigurePush(Command, frozen=True, kw_only=True, tag="registry.configure_push"):
    """Configure (or replace) an A2A push notification of a task of the agency; what
    authenticates its POSTs is sealed by the API."""

    service = "registry"
    verb = "configure_push"
    agency_id: str
    task_id: str
    config_id: str
    url: str
    sealed_auth: str


class RemovePush(Command, frozen=True, kw_only=True, tag="registry.remove_push"):
    service = "registry"
    verb = "remove_push"
    agency_id: str
    task_id: str
    config_id: str


class CreateThread(Command, frozen=True, kw_only=True, tag="registry.create_thread"):
    service = "registry"
    verb = "create_thread"
    agency_id: str
    thread_id: str
    agent_type: str
    parent: ParentRef | None = None
    request: dict[str, str] = {}
    # The child's scoped variables, sealed (`SubagentRequested.sealed_env`).
    sealed_env: str = ""
    # The child's inline blueprint (`SubagentRequested.blueprint`).
    blueprint: BlueprintSpec | None = None


class SetThreadRetention(Command, frozen=True, kw_only=True, tag="registry.set_thread_retention"):
    """How long the thread is kept after its last activity, in seconds (None: its
    agency's), within its agency's (`thread.retention_set`; LangGraph's `ttl`)."""

    service = "registry"
    verb = "set_thread_retention"
    agency_id: str
    thread_id: str
    seconds: float | None = None


class SetThreadMetadata(Command, frozen=True, kw_only=True, tag="registry.set_thread_metadata"):
    """Set keys of the thread's metadata (`thread.metadata_set`)."""

    service = "registry"
    verb = "set_thread_metadata"
    agency_id: str
    thread_id: str
    metadata: dict[str, str]


class ForkThread(Command, frozen=True, kw_only=True, tag="registry.fork_thread"):
    """Fork `thread_id` at its event `at_seq` into the new thread `fork_thread_id` (chosen
    by the sender, so a redelivery finishes the same fork); `agent_type` switches its
    blueprint. Children of the thread running at the cut are forked along."""

    service = "registry"
    verb = "fork_thread"
    agency_id: str
    thread_id: str
    at_seq: int
    fork_thread_id: str
    agent_type: str | None = None


class InvokeThread(Command, frozen=True, kw_only=True, tag="runtime.invoke"):
    service = "runtime"
    verb = "invoke"
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

    service = "runtime"
    verb = "delay"
    agency_id: str
    thread_id: str
    run_id: str
    not_before: datetime


class ApproveToolCalls(Command, frozen=True, kw_only=True, tag="runtime.approve"):
    """Decide on the calls a run paused for. With `run_id`, it applies to that run only:
    once another run is active (or none), it does nothing."""

    service = "runtime"
    verb = "approve"
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

    service = "runtime"
    verb = "cancel"
    agency_id: str
    thread_id: str
    reason: str = ""
    run_id: str | None = None


class TerminateThread(Command, frozen=True, kw_only=True, tag="runtime.terminate"):
    """Shut the thread down softly: its active run ends (`run.canceled`, reason
    `terminated`), its queued requests with it, and it refuses every later invoke. A
    thread terminated already is left as it is."""

    service = "runtime"
    verb = "terminate"
    agency_id: str
    thread_id: str
    reason: str = ""


class UpdateThreadState(Command, frozen=True, kw_only=True, tag="runtime.update_state"):
    """Add to an idle thread's state, as a person would: `messages` appended, `files`
    written, the todos replaced (when given). Refused while a run is active."""

    service = "runtime"
    verb = "update_state"
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

    service = "runtime"
    verb = "watch"
    agency_id: str
    thread_id: str
    run_id: str
    generation: int = 0
    epoch: str = ""


class SubagentDeadline(Command, frozen=True, kw_only=True, tag="subagents.deadline"):
    """A subagent call's timeout, kept by the broker: delivered again until `deadline`."""

    service = "subagents"
    verb = "deadline"
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

    service = "subagents"
    verb = "provide_variables"
    agency_id: str
    parent_thread_id: str
    request_id: str
    names: tuple[str, ...]
    sealed_env: str


class WorkflowMemberSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A member to add: its name in the channel and the blueprint it runs (a saved or
    static one, resolved by the API, or one defined inline in the workflow)."""

    name: str
    blueprint: BlueprintSpec


class CreateWorkflow(Command, frozen=True, kw_only=True, tag="workflows.create"):
    """Create the workflow if it does not exist, and add the members it lacks."""

    service = "workflows"
    verb = "create"
    agency_id: str
    workflow_id: str
    name: str
    tag: str = ""
    members: tuple[WorkflowMemberSpec, ...] = ()
    limits: WorkflowLimits = WorkflowLimits()
    source: str = ""


class PostChannelMessage(Command, frozen=True, kw_only=True, tag="workflows.post"):
    """A message from outside (a person, a schedule) onto the channel; it starts a run of
    the workflow when none is going."""

    service = "workflows"
    verb = "post"
    agency_id: str
    workflow_id: str
    message_id: str
    sender: str = "user"
    content: str
    to: tuple[str, ...] = ()


class StopWorkflow(Command, frozen=True, kw_only=True, tag="workflows.stop"):
    service = "workflows"
    verb = "stop"
    agency_id: str
    workflow_id: str
    reason: str = ""


class RetryMember(Command, frozen=True, kw_only=True, tag="workflows.retry"):
    """A failed member run tried again once `not_before` has passed (kept by the broker)."""

    service = "workflows"
    verb = "retry"
    agency_id: str
    workflow_id: str
    member: str
    failed_run_id: str
    not_before: datetime


class SetSchedule(Command, Schedule, frozen=True, kw_only=True, tag="workflows.set_schedule"):
    service = "workflows"
    verb = "set_schedule"
    schedule_id: str


class RemoveSchedule(Command, frozen=True, kw_only=True, tag="workflows.remove_schedule"):
    service = "workflows"
    verb = "remove_schedule"
    agency_id: str
    schedule_id: str


AnyCommand = (
    CreateTenant
    | IssueApiKey
    | RevokeApiKey
    | SetTenantProvider
    | RemoveTenantProvider
    | SetTenantModelPolicy
    | SetTenantBudget
    | SetAgencyBudget
    | SetTenantRetention
    | SetAgencyRetention
    | CreateAgency
    | SaveBlueprint
    | DeleteBlueprint
    | SubscribeWebhook
    | UnsubscribeWebhook
    | ConfigurePush
    | RemovePush
    | CreateThread
    | SetThreadMetadata
    | SetThreadRetention
    | ForkThread
    | InvokeThread
    | DelayRun
    | ApproveToolCalls
    | CancelRun
    | TerminateThread
    | UpdateThreadState
    | WatchRun
    | SubagentDeadline
    | ProvideVariables
    | CreateWorkflow
    | PostChannelMessage
    | StopWorkflow
    | RetryMember
    | SetSchedule
    | RemoveSchedule
)


class CommandEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    command_id: str
    tenant_id: str
    idempotency_key: str
    ts: datetime
    type: str
    version: int = 1
    causation_id: str | None = None
    correlation_id: str | None = None
    trace: dict[str, str] = {}
    payload: AnyCommand
