"""Commands: intents sent to one service, which may reject them.

Each command names the service and verb that form its subject
(`tenant.<t>.cmd.<service>.<verb>`); the idempotency key becomes `Nats-Msg-Id`.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec

from contracts.events.base import ChatMessage, ParentRef, ToolCall
from contracts.events.registry import BlueprintSpec
from contracts.events.thread import ConcurrencyStrategy


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


class CreateThread(Command, frozen=True, kw_only=True, tag="registry.create_thread"):
    service = "registry"
    verb = "create_thread"
    agency_id: str
    thread_id: str
    agent_type: str
    parent: ParentRef | None = None
    request: dict[str, str] = {}


class InvokeThread(Command, frozen=True, kw_only=True, tag="runtime.invoke"):
    service = "runtime"
    verb = "invoke"
    agency_id: str
    thread_id: str
    run_id: str
    messages: tuple[ChatMessage, ...] = ()
    files: dict[str, str] = {}
    strategy: ConcurrencyStrategy = "queue"


class ApproveToolCalls(Command, frozen=True, kw_only=True, tag="runtime.approve"):
    service = "runtime"
    verb = "approve"
    agency_id: str
    thread_id: str
    approved: bool
    modified_tool_calls: tuple[ToolCall, ...] | None = None
    reason: str = ""


class CancelRun(Command, frozen=True, kw_only=True, tag="runtime.cancel"):
    service = "runtime"
    verb = "cancel"
    agency_id: str
    thread_id: str
    reason: str = ""


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


AnyCommand = (
    CreateTenant
    | CreateAgency
    | SaveBlueprint
    | CreateThread
    | InvokeThread
    | ApproveToolCalls
    | CancelRun
    | SubagentDeadline
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
