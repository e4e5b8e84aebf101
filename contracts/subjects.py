"""Subject builders. Every token is validated before it reaches a subject.

Layout (see docs/architecture.md):
  events    tenant.<tenant>.evt.<aggregate>.<aggregate_id>  (one subject per aggregate
            instance; the event type is in the envelope and in the `Agency-Event-Type` header)
  notes     tenant.<tenant>.note.<event_token>  (plain NATS, in no stream: a signal that an
            event was appended, for listeners that act at once, e.g. on `run.canceled`)
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


# The header every appended event carries: its type, so a consumer that wants some types
# filters without decoding the payload.
EVENT_TYPE_HEADER = "Agency-Event-Type"

# The header the gateway puts on every command a tenant's own NATS credentials sent (one the
# tenant sent is replaced): the command consumers share their room among tenants by it.
VIA_GATEWAY_HEADER = "Agency-Via-Gateway"

# Event types whose append is also announced on a note subject (`note_subject`).
NOTED_TYPES: frozenset[str] = frozenset({"run.canceled"})


def event_token(event_type: str) -> str:
    """`tool.started` → `tool_started`: an event type as one subject token."""
    return event_type.replace(".", "_")


def _aggregate(aggregate: str) -> str:
    if aggregate not in AGGREGATES:
        raise InvalidToken("aggregate", aggregate, f"must be one of {sorted(AGGREGATES)}")
    return aggregate


def event_subject(tenant_id: str, aggregate: str, aggregate_id: str) -> str:
    """The one subject of an aggregate instance: every event of it, in order. The unit of
    ordering and of concurrency (expected last subject sequence)."""
    return (
        f"tenant.{validate_token('tenant id', tenant_id)}.evt."
        f"{_aggregate(aggregate)}.{validate_token('aggregate id', aggregate_id)}"
    )


def tenant_events_filter(tenant_id: str) -> str:
    return f"tenant.{validate_token('tenant id', tenant_id)}.evt.>"


def aggregate_events_filter(aggregate: str = "thread", tenant_id: str = "*") -> str:
    """Every instance of one aggregate (of one tenant, or of every tenant with `*`). A
    consumer that wants some event types reads this and filters on `EVENT_TYPE_HEADER`."""
    tenant = tenant_id if tenant_id == "*" else validate_token("tenant id", tenant_id)
    return f"tenant.{tenant}.evt.{_aggregate(aggregate)}.*"


def legacy_event_subject(tenant_id: str, aggregate: str, aggregate_id: str, event_type: str) -> str:
    """A subject of the previous layout (one subject per event type of an aggregate), read
    only by the upgrade (`infra/jetstream/upgrade.py`)."""
    token = validate_token("event type", event_token(event_type))
    return f"{event_subject(tenant_id, aggregate, aggregate_id)}.{token}"


def note_subject(tenant_id: str, event_type: str) -> str:
    """Where the append of an event of `NOTED_TYPES` is announced (plain NATS, no stream)."""
    token = validate_token("event type", event_token(event_type))
    return f"tenant.{validate_token('tenant id', tenant_id)}.note.{token}"


def notes_filter(event_type: str) -> str:
    """Every tenant's notes of one event type."""
    return f"tenant.*.note.{validate_token('event type', event_token(event_type))}"


ALL_NOTES = "tenant.*.note.>"


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
