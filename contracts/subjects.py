"""Subject builders. Every token is validated before it reaches a subject.

Layout (see docs/architecture.md):
  events    tenant.<tenant>.evt.<aggregate>.<aggregate_id>.<event_token>
  commands  tenant.<tenant>.cmd.<service>.<verb>
  requests  tenant.<tenant>.req.<service>.<verb>  (plain NATS request-reply, in no stream)
"""

from __future__ import annotations

from typing import Literal, get_args

from agency.contracts.errors import InvalidToken
from agency.contracts.ids import validate_token

Aggregate = Literal["tenant", "agency", "thread", "workflow", "schedule", "store", "tree"]
AGGREGATES: frozenset[str] = frozenset(get_args(Aggregate))

EVENTS_STREAM = "AGENCY_EVENTS"
COMMANDS_STREAM = "AGENCY_COMMANDS"
DEAD_LETTER_STREAM = "AGENCY_DLQ"

ALL_EVENTS = "tenant.*.evt.>"
ALL_COMMANDS = "tenant.*.cmd.>"
ALL_DEAD_LETTERS = "dlq.>"


def event_token(event_type: str) -> str:
    """`tool.started` → `tool_started`: an event type as one subject token."""
    return event_type.replace(".", "_")


def _aggregate(aggregate: str) -> str:
    if aggregate not in AGGREGATES:
        raise InvalidToken("aggregate", aggregate, f"must be one of {sorted(AGGREGATES)}")
    return aggregate


def _aggregate_prefix(tenant_id: str, aggregate: str, aggregate_id: str) -> str:
    return (
        f"tenant.{validate_token('tenant id', tenant_id)}.evt."
        f"{_aggregate(aggregate)}.{validate_token('aggregate id', aggregate_id)}"
    )


def event_subject(tenant_id: str, aggregate: str, aggregate_id: str, event_type: str) -> str:
    prefix = _aggregate_prefix(tenant_id, aggregate, aggregate_id)
    return f"{prefix}.{validate_token('event type', event_token(event_type))}"


def aggregate_filter(tenant_id: str, aggregate: str, aggregate_id: str) -> str:
    """Every event of one aggregate instance: the unit of ordering and of concurrency."""
    return f"{_aggregate_prefix(tenant_id, aggregate, aggregate_id)}.>"


def tenant_events_filter(tenant_id: str) -> str:
    return f"tenant.{validate_token('tenant id', tenant_id)}.evt.>"


def events_of_type_filter(event_type: str, aggregate: str = "thread") -> str:
    """Every tenant's events of one type, for a service that reacts to that type only."""
    token = validate_token("event type", event_token(event_type))
    return f"tenant.*.evt.{_aggregate(aggregate)}.*.{token}"


def _service_subject(kind: str, tenant_id: str, service: str, verb: str) -> str:
    return (
        f"tenant.{validate_token('tenant id', tenant_id)}.{kind}."
        f"{validate_token('service', service)}.{validate_token('verb', verb)}"
    )


def command_subject(tenant_id: str, service: str, verb: str) -> str:
    return _service_subject("cmd", tenant_id, service, verb)


def service_commands_filter(service: str) -> str:
    return f"tenant.*.cmd.{validate_token('service', service)}.*"


def request_subject(tenant_id: str, service: str, verb: str) -> str:
    """A request one service answers for the system's own users: `tenant.<t>.req.…`."""
    return _service_subject("req", tenant_id, service, verb)


def reexecution_subject(tenant_id: str) -> str:
    """The runtime's re-execution of a recorded thread (`contracts/reexecution.py`)."""
    return request_subject(tenant_id, "runtime", "reexecute")


# Every tenant's re-execution requests, for the runtime to answer.
REEXECUTIONS = "tenant.*.req.runtime.reexecute"


def dead_letter_subject(source_stream: str, reason_code: str) -> str:
    return f"dlq.{validate_token('stream', source_stream)}.{validate_token('reason', reason_code)}"


def tenant_of(subject: str) -> str:
    """The tenant token of any tenant-scoped subject."""
    parts = subject.split(".")
    if len(parts) < 3 or parts[0] != "tenant":
        raise InvalidToken("subject", subject, "is not a tenant-scoped subject")
    return parts[1]
