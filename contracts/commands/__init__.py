"""Commands: intents sent to one service, which may reject them.

Each command names the service and verb that form its subject
(`tenant.<t>.cmd.<service>.<verb>`); the idempotency key becomes `Nats-Msg-Id`.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from agency.contracts.commands.base import Command
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
