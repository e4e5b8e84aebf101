"""The events log in N partitions: which stream and subject hold an aggregate's events.

With one partition (the default) the log is one stream, `AGENCY_EVENTS`, and an aggregate's
subject is `tenant.<t>.evt.<aggregate>.<id>`. With N > 1 it is N streams,
`AGENCY_EVENTS_0` … `AGENCY_EVENTS_<N-1>`, and the partition is a token of the subject:
`tenant.<t>.evt.<p>.<aggregate>.<id>`, stream `AGENCY_EVENTS_<p>` taking
`tenant.*.evt.<p>.>`. The commands follow: `AGENCY_COMMANDS` and
`tenant.<t>.cmd.<service>.<verb>` with one partition; otherwise `AGENCY_COMMANDS_<p>` taking
`tenant.*.cmd.<p>.>`, a command in the partition of the aggregate it is for (its thread, or
else its agency, or else its tenant). An aggregate's partition is fixed by its id:

    p = fnv1a_32(aggregate_id) % N

the hash NATS's own subject mapping `{{partition(N, …)}}` computes over the id token, so
`tenant.*.evt.*.*` mapped to `tenant.{{wildcard(1)}}.evt.{{partition(N,3)}}.{{wildcard(2)}}.`
`{{wildcard(3)}}` on a server lands each event where this module puts it. Every event of
one aggregate is on one subject of one stream: its order and the expected-sequence check
on that subject are those of one stream. `tenant.<t>.evt.>` still spans a tenant's events
in every partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.ids import validate_token
from agency.contracts.subjects import (
    AGGREGATES,
    ALL_COMMANDS,
    ALL_EVENTS,
    COMMANDS_STREAM,
    EVENTS_STREAM,
    aggregate_events_filter,
    command_subject,
    event_subject,
    service_commands_filter,
)

# The events stream's metadata key holding the count of partitions (N > 1 only: a log of one
# partition carries none, as before partitions existed).
PARTITIONS_KEY = "agency_event_partitions"
MAX_PARTITIONS = 64

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def partition_of(aggregate_id: str, partitions: int) -> int:
    """The partition of an aggregate: the same as NATS's `{{partition(n, …)}}` of its id."""
    if partitions <= 1:
        return 0
    return fnv1a_32(aggregate_id.encode()) % partitions


def partitioned_stream(partition: int) -> str:
    return f"{EVENTS_STREAM}_{partition}"


def partitioned_command_stream(partition: int) -> str:
    return f"{COMMANDS_STREAM}_{partition}"


def is_command_stream(stream: str) -> bool:
    """Whether `stream` is a commands stream of any layout."""
    suffix = stream.removeprefix(f"{COMMANDS_STREAM}_")
    return stream == COMMANDS_STREAM or (suffix != stream and suffix.isdigit())


def command_aggregate(tenant_id: str, thread_id: object, agency_id: object) -> str:
    """The id a command's partition is hashed from: its thread's, else its agency's, else
    its tenant's (a thread's commands lie in the partition of its events)."""
    for value in (thread_id, agency_id):
        if isinstance(value, str) and value:
            return value
    return tenant_id


@dataclass(frozen=True, slots=True)
class EventLayout:
    """Where the events live for a log of `partitions` partitions."""

    partitions: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ValueError(
                f"{self.partitions} event partitions: give between 1 and {MAX_PARTITIONS}"
            )

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1

    @property
    def streams(self) -> tuple[str, ...]:
        """Every events stream, partition 0 first."""
        return tuple(self.stream(p) for p in range(self.partitions))

    def stream(self, partition: int) -> str:
        if not self.partitioned:
            return EVENTS_STREAM
        return partitioned_stream(partition)

    def partition(self, aggregate_id: str) -> int:
        return partition_of(aggregate_id, self.partitions)

    def stream_of(self, aggregate_id: str) -> str:
        """The stream holding an aggregate's events."""
        return self.stream(self.partition(aggregate_id))

    def subject(self, tenant_id: str, aggregate: str, aggregate_id: str) -> str:
        """The one subject of an aggregate instance (see `event_subject`)."""
        subject = event_subject(tenant_id, aggregate, aggregate_id)
        if not self.partitioned:
            return subject
        tenant, _, rest = subject.removeprefix("tenant.").partition(".evt.")
        return f"tenant.{tenant}.evt.{self.partition(aggregate_id)}.{rest}"

    def all_events(self, partition: int) -> str:
        """Every event of one partition: its stream's subjects."""
        if not self.partitioned:
            return ALL_EVENTS
        return f"tenant.*.evt.{partition}.>"

    def aggregate_filter(self, aggregate: str, tenant_id: str = "*", partition: int = 0) -> str:
        """Every instance of one aggregate in one partition (of one tenant or of all)."""
        subject = aggregate_events_filter(aggregate, tenant_id)
        if not self.partitioned:
            return subject
        return subject.replace(".evt.", f".evt.{partition}.", 1)

    def live_filter(self, aggregate: str, tenant_id: str = "*") -> str:
        """Every instance of one aggregate in any partition: a core NATS subscription's
        subject (a stream's consumer reads one partition: `aggregate_filter`)."""
        subject = aggregate_events_filter(aggregate, tenant_id)
        if not self.partitioned:
            return subject
        return subject.replace(".evt.", ".evt.*.", 1)

    # --- the commands ------------------------------------------------------------------

    @property
    def command_streams(self) -> tuple[str, ...]:
        """Every commands stream, partition 0 first."""
        return tuple(self.command_stream(p) for p in range(self.partitions))

    def command_stream(self, partition: int) -> str:
        if not self.partitioned:
            return COMMANDS_STREAM
        return partitioned_command_stream(partition)

    def all_commands(self, partition: int) -> str:
        """Every command of one partition: its stream's subjects."""
        if not self.partitioned:
            return ALL_COMMANDS
        return f"tenant.*.cmd.{partition}.>"

    def command_subject(self, tenant_id: str, service: str, verb: str, aggregate_id: str) -> str:
        """Where a command for `aggregate_id` (`command_aggregate`) is stored."""
        subject = command_subject(tenant_id, service, verb)
        if not self.partitioned:
            return subject
        return subject.replace(".cmd.", f".cmd.{self.partition(aggregate_id)}.", 1)

    def service_commands(self, service: str, partition: int = 0) -> str:
        """One service's commands in one partition: its durable's filter."""
        subject = service_commands_filter(service)
        if not self.partitioned:
            return subject
        return subject.replace(".cmd.", f".cmd.{partition}.", 1)

    def tenant_filter(self, tenant_id: str, partition: int = 0) -> str:
        """Every event of one tenant in one partition."""
        tenant = validate_token("tenant id", tenant_id)
        if not self.partitioned:
            return f"tenant.{tenant}.evt.>"
        return f"tenant.{tenant}.evt.{partition}.>"


def checkpoint_name(projection: str, partition: int) -> str:
    """The name of a projection's checkpoint on one partition: the projection's own name on
    partition 0 (the only one of an unpartitioned log), `<name>@<p>` on the others."""
    return projection if partition == 0 else f"{projection}@{partition}"


def command_of_subject(subject: str) -> tuple[str, str] | None:
    """(service, verb) of a command subject of any layout, None for another subject."""
    tokens = subject.split(".")
    if len(tokens) == 6 and tokens[3].isdigit():
        tokens = [*tokens[:3], *tokens[4:]]
    if len(tokens) != 5 or tokens[0] != "tenant" or tokens[2] != "cmd":
        return None
    return tokens[3], tokens[4]


def partition_of_subject(subject: str) -> int:
    """The partition an event subject names (0 for one of an unpartitioned log)."""
    tokens = subject.split(".")
    if len(tokens) == 6 and tokens[3].isdigit():
        return int(tokens[3])
    return 0


def live_filters(aggregate: str, tenant_id: str = "*") -> tuple[str, str]:
    """Every instance of one aggregate in a log of any layout: a process-long core NATS
    subscription takes both (the one that does not match the log's layout hears nothing)."""
    return EventLayout(1).live_filter(aggregate, tenant_id), EventLayout(2).live_filter(
        aggregate, tenant_id
    )


def any_tenant_subject(layout: EventLayout, aggregate: str, aggregate_id: str) -> str:
    """An aggregate's subject with `*` for its tenant: who holds an id, whoever they are."""
    subject = layout.subject("_", aggregate, aggregate_id)
    return "tenant.*." + subject.removeprefix("tenant._.")


def aggregate_of(subject: str) -> tuple[str, str, str] | None:
    """(tenant, aggregate, id) of an event subject of any layout, None for another subject."""
    tokens = subject.split(".")
    if len(tokens) == 6 and tokens[4] in AGGREGATES and tokens[3].isdigit():
        tokens = [*tokens[:3], *tokens[4:]]
    if len(tokens) != 5 or tokens[0] != "tenant" or tokens[2] != "evt":
        return None
    return tokens[1], tokens[3], tokens[4]
