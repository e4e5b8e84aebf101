"""Tenants, agencies and blueprints."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from contracts.events.base import Event


class TenantCreated(Event, frozen=True, kw_only=True, tag="tenant.created"):
    name: str


class ApiKeyIssued(Event, frozen=True, kw_only=True, tag="tenant.api_key_issued"):
    """Only a hash of the key is stored; the key itself is shown once, to its creator."""

    key_id: str
    key_hash: str


class ApiKeyRevoked(Event, frozen=True, kw_only=True, tag="tenant.api_key_revoked"):
    key_id: str


class AgencyCreated(Event, frozen=True, kw_only=True, tag="agency.created"):
    name: str
    metadata: dict[str, str] = {}


class SessionToolBinding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool that drives a dual-AI session's lifecycle; `message_property` names the
    argument whose text becomes the lifecycle message (the result, the failure, the status)."""

    name: str
    message_property: str = "message"
    attachments_property: str | None = None


Binding = str | SessionToolBinding


class SideConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One side of a dual-AI session. Its turn ends on `stop_tool`, on a text answer
    (`stop_on_response`) or after `max_steps` model calls; the session ends on
    `session_stop` (success) or `session_fail`; `session_status` publishes progress."""

    prompt: str
    label: str = ""
    stop_on_response: bool = True
    stop_tool: str | None = None
    stop_tool_response_property: str | None = None
    max_steps: int | None = None
    session_stop: Binding | None = None
    session_fail: Binding | None = None
    session_status: Binding | None = None


AgentKind = Literal["ai_human", "dual_ai"]


class BlueprintSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An agent definition: prompt, model and the tags that pick tools and middleware.

    `config` holds middleware settings (hitl tool lists, subagent types, budgets); it is
    JSON by nature since middleware added by users defines its own keys. A `dual_ai`
    blueprint has two AI sides (`side_a`, `side_b`) talking to each other, bounded by
    `max_session_turns`. With `expose_as_tool`, other agents that list it in
    `config.callableAgents` get a tool of its name: a handoff to it (ai_human) or a
    subagent session of it (dual_ai).
    """

    name: str
    description: str = ""
    prompt: str = ""
    model: str = ""
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = {}
    type: AgentKind = "ai_human"
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: int | None = None
    expose_as_tool: bool = False
    tool_description: str = ""


class BlueprintSaved(Event, frozen=True, kw_only=True, tag="blueprint.saved"):
    blueprint: BlueprintSpec
    revision: int


class BlueprintDeleted(Event, frozen=True, kw_only=True, tag="blueprint.deleted"):
    name: str


RegistryEvent = (
    TenantCreated | ApiKeyIssued | ApiKeyRevoked | AgencyCreated | BlueprintSaved | BlueprintDeleted
)
