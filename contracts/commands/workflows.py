"""Commands of the workflows service: workflows, their channels and schedules."""

from __future__ import annotations

from datetime import datetime

import msgspec

from agency.contracts.commands.base import Command
from agency.contracts.events.blueprint import BlueprintSpec
from agency.contracts.events.workflow import Schedule, WorkflowLimits


class WorkflowMemberSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A member to add: its name in the channel and the blueprint it runs (a saved or
    static one, resolved by the API, or one defined inline in the workflow)."""

    name: str
    blueprint: BlueprintSpec


class CreateWorkflow(Command, frozen=True, kw_only=True, tag="workflows.create"):
    """Create the workflow if it does not exist, and add the members it lacks."""

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

    agency_id: str
    workflow_id: str
    message_id: str
    sender: str = "user"
    content: str
    to: tuple[str, ...] = ()


class StopWorkflow(Command, frozen=True, kw_only=True, tag="workflows.stop"):
    agency_id: str
    workflow_id: str
    reason: str = ""


class RetryMember(Command, frozen=True, kw_only=True, tag="workflows.retry"):
    """A failed member run tried again once `not_before` has passed (kept by the broker)."""

    agency_id: str
    workflow_id: str
    member: str
    failed_run_id: str
    not_before: datetime


class SetSchedule(Command, Schedule, frozen=True, kw_only=True, tag="workflows.set_schedule"):
    schedule_id: str


class RemoveSchedule(Command, frozen=True, kw_only=True, tag="workflows.remove_schedule"):
    agency_id: str
    schedule_id: str
