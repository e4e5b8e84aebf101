"""Commands: intents sent to one service, which may reject them.

Each command's tag, `<service>.<verb>`, names the service and verb that form its subject
(`tenant.<t>.cmd.<service>.<verb>`); the idempotency key becomes `Nats-Msg-Id`.
"""

from __future__ import annotations

from agency.contracts.commands.base import Command, CommandEnvelopeFields
from agency.contracts.commands.registry import (
    ConfigurePush,
    CreateAgency,
    CreateTenant,
    CreateThread,
    DeleteBlueprint,
    ForkThread,
    IssueApiKey,
    RemovePush,
    RemoveTenantProvider,
    RevokeApiKey,
    SaveBlueprint,
    SetAgencyBudget,
    SetAgencyRetention,
    SetTenantBudget,
    SetTenantModelPolicy,
    SetTenantProvider,
    SetTenantRetention,
    SetThreadMetadata,
    SetThreadRetention,
    SubscribeWebhook,
    UnsubscribeWebhook,
)
from agency.contracts.commands.runtime import (
    ApproveToolCalls,
    CancelRun,
    DelayRun,
    InvokeThread,
    ProvideVariables,
    SubagentDeadline,
    TerminateThread,
    UpdateThreadState,
    WatchRun,
)
from agency.contracts.commands.workflows import (
    CreateWorkflow,
    PostChannelMessage,
    RemoveSchedule,
    RetryMember,
    SetSchedule,
    StopWorkflow,
    WorkflowMemberSpec,
)

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


class CommandEnvelope(CommandEnvelopeFields, frozen=True, kw_only=True):
    payload: AnyCommand


__all__ = [
    "AnyCommand",
    "ApproveToolCalls",
    "CancelRun",
    "Command",
    "CommandEnvelope",
    "ConfigurePush",
    "CreateAgency",
    "CreateTenant",
    "CreateThread",
    "CreateWorkflow",
    "DelayRun",
    "DeleteBlueprint",
    "ForkThread",
    "InvokeThread",
    "IssueApiKey",
    "PostChannelMessage",
    "ProvideVariables",
    "RemovePush",
    "RemoveSchedule",
    "RemoveTenantProvider",
    "RetryMember",
    "RevokeApiKey",
    "SaveBlueprint",
    "SetAgencyBudget",
    "SetAgencyRetention",
    "SetSchedule",
    "SetTenantBudget",
    "SetTenantModelPolicy",
    "SetTenantProvider",
    "SetTenantRetention",
    "SetThreadMetadata",
    "SetThreadRetention",
    "StopWorkflow",
    "SubagentDeadline",
    "SubscribeWebhook",
    "TerminateThread",
    "UnsubscribeWebhook",
    "UpdateThreadState",
    "WatchRun",
    "WorkflowMemberSpec",
]
