"""What a subscription's kinds are made of, and the body each delivery carries.

| kind | events of the log | on |
|---|---|---|
| `run.ended` | `run.completed`, `run.error`, `run.canceled` | a thread |
| `approval.needed` | `hitl.interrupt` (a run stops for its tool calls to be approved) | a thread |
| `subagent.reported` | `subagent.completed` (a child's report reached its parent) | a thread |
| `workflow.proposal` | `proposal.opened` (a decision put to a vote) | a workflow |

The body is Standard Webhooks' recommended shape, camelCase as the HTTP API:
`{"type": <kind>, "timestamp": <the event's time>, "data": {...}}`; `data` names the
agency, the thread (or workflow), the run and the event it was made of (`eventId`).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from agency.contracts.events import (
    HitlInterrupt,
    ProposalOpened,
    RunCanceled,
    RunCompleted,
    RunError,
    SubagentCompleted,
    WebhookKind,
)
from agency.contracts.events.subagent import ChildOutcome
from agency.infra.jetstream.records import RecordedEvent

# The log's event types the service reads, and the kind each makes.
KIND_OF_TYPE: dict[str, WebhookKind] = {
    "run.completed": "run.ended",
    "run.error": "run.ended",
    "run.canceled": "run.ended",
    "hitl.interrupt": "approval.needed",
    "subagent.completed": "subagent.reported",
    "proposal.opened": "workflow.proposal",
}


class _Data(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    agency_id: str
    event_id: str
    thread_id: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None


class RunEnded(_Data, frozen=True, kw_only=True):
    status: Literal["completed", "error", "canceled"]
    result: str | None = None
    error: str | None = None
    reason: str | None = None


class ProposedCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str


class ApprovalNeeded(_Data, frozen=True, kw_only=True):
    tool_calls: list[ProposedCall]


class SubagentReported(_Data, frozen=True, kw_only=True):
    child_thread_id: str
    tool_call_id: str
    outcome: ChildOutcome
    report: str = ""


class WorkflowProposal(_Data, frozen=True, kw_only=True):
    proposal_id: str
    title: str
    options: list[str]
    author: str
    voters: list[str]
    description: str = ""


Data = RunEnded | ApprovalNeeded | SubagentReported | WorkflowProposal
D = TypeVar("D", bound=_Data)


class Message(msgspec.Struct, frozen=True, kw_only=True):
    type: WebhookKind
    timestamp: str
    data: Data


_encode = msgspec.json.Encoder().encode


def message_of(
    event: RecordedEvent, agency_id: str | None = None
) -> tuple[WebhookKind, bytes] | None:
    """The kind and body of what `event` tells subscribers, or None (not a kind, or of no
    agency). `agency_id`: the event's agency when its envelope does not name it (a
    workflow's events written by its members' tools)."""
    env = event.envelope
    kind = KIND_OF_TYPE.get(env.type)
    agency_id = env.agency_id or agency_id
    if kind is None or agency_id is None:
        return None

    def made(cls: type[D], **fields: Any) -> D:
        return cls(
            agency_id=agency_id,
            event_id=env.event_id,
            thread_id=env.aggregate_id if env.aggregate == "thread" else env.thread_id,
            workflow_id=env.aggregate_id if env.aggregate == "workflow" else None,
            run_id=env.run_id or getattr(env.payload, "run_id", None),
            **fields,
        )

    data: Data
    match env.payload:
        case RunCompleted(result=result):
            data = made(RunEnded, status="completed", result=result)
        case RunError(error=error):
            data = made(RunEnded, status="error", error=error)
        case RunCanceled(reason=reason):
            data = made(RunEnded, status="canceled", reason=reason or None)
        case HitlInterrupt(proposed_tool_calls=calls):
            proposed = [ProposedCall(id=c.id, name=c.name, arguments=c.arguments) for c in calls]
            data = made(ApprovalNeeded, tool_calls=proposed)
        case SubagentCompleted() as done:
            data = made(
                SubagentReported,
                child_thread_id=done.child_thread_id,
                tool_call_id=done.tool_call_id,
                outcome=done.outcome,
                report=done.report,
            )
        case ProposalOpened() as opened:
            data = made(
                WorkflowProposal,
                proposal_id=opened.proposal_id,
                title=opened.title,
                options=list(opened.options),
                author=opened.author,
                voters=list(opened.voters),
                description=opened.description,
            )
        case _:
            return None
    return kind, _encode(Message(type=kind, timestamp=env.ts.isoformat(), data=data))
