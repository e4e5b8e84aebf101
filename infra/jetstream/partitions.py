"""How many partitions a provisioned events log has, and refusing a start that disagrees.

The count lives with the streams themselves: a log of one partition is the stream
`AGENCY_EVENTS` (as before partitions existed, no marker); a log of N > 1 is the streams
`AGENCY_EVENTS_0` … `AGENCY_EVENTS_<N-1>`, each carrying N in its metadata
(`agency_event_partitions`). Every process finds it there when it connects; a start asking
for another count is refused, since an aggregate's partition is its id's hash modulo N and
another N would look for its events in the wrong stream (docs/scaling.md).
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError

from agency.contracts.partitions import PARTITIONS_KEY, EventLayout, partitioned_stream
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.errors import StoreError


class PartitionsMismatch(StoreError):
    """The events log was provisioned with another count of partitions than asked for."""

    stored: int
    asked: int
    message = (
        "the events log was provisioned with {stored} partition(s) and this start asks "
        "for {asked} (AGENCY_EVENT_PARTITIONS={asked}): start with "
        "AGENCY_EVENT_PARTITIONS={stored}, or move the tenants to a new deployment "
        'provisioned with {asked} (docs/scaling.md, "Changing N")'
    )


async def _info(js: JetStreamContext, stream: str) -> StreamInfo | None:
    try:
        return await js.stream_info(stream)
    except NotFoundError:
        return None


async def stored_partitions(js: JetStreamContext) -> int | None:
    """The count of partitions of the provisioned log; None when none is provisioned."""
    if await _info(js, EVENTS_STREAM) is not None:
        return 1
    first = await _info(js, partitioned_stream(0))
    if first is None:
        return None
    stored = (first.config.metadata or {}).get(PARTITIONS_KEY, "")
    if not stored.isdigit():
        raise StoreError(
            f"{partitioned_stream(0)} carries no count of partitions ({PARTITIONS_KEY}); "
            "it was not made by this system's provisioning"
        )
    return int(stored)


async def check_partitions(js: JetStreamContext, layout: EventLayout) -> None:
    """Raise `PartitionsMismatch` when the provisioned log has another count than `layout`."""
    stored = await stored_partitions(js)
    if stored is not None and stored != layout.partitions:
        raise PartitionsMismatch(stored, layout.partitions)


async def discover_layout(js: JetStreamContext, default: int = 1) -> EventLayout:
    """The layout of the provisioned log (`default` partitions when none is provisioned
    yet: the count the deployment is configured with)."""
    return EventLayout(await stored_partitions(js) or default)
