"""A root thread created over HTTP: the API appends its `thread.created` itself.

The registry's decision for a root thread needs the agency to exist, the agent type to be
one of its blueprints, and the new thread's subject to be empty. The route checks the first
two before it gets here, and the append's expected sequence 0 on the thread's subject is the
third: a second creation of one id is refused by the broker. Going through the registry
added a durable command write, its delivery and its acknowledgement to every create, about
3 ms of one (`docs/performance.md`, "A thread create, counted"). The registry still creates
the threads commanded over NATS: subagents' children, workflows' members, outside services.

A create may answer once the log has the thread (`listed=False`), before the read models
do: everything that reads one thread reads its log or waits for the read models to pass it
(`readback.caught_up`). What lists threads waits instead (`PendingListings`) for the read
models to pass the last creation this process answered for the tenant, so a client's list
after its create still shows the thread.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from litestar.exceptions import ClientException, ValidationException

from agency.contracts.events.thread import ThreadCreated
from agency.contracts.partitions import partition_of_subject
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError, EventTooLarge, InvalidEvent
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.projections import catalog
from agency.services.api.progress import ProjectionProgress

# The read models that list a thread once they have applied its `thread.created`.
LISTING = tuple(p.name for p in catalog.ALL if p.wants("thread.created"))
# How many tenants' last unlisted creation are kept: past it, the oldest is let go (a list
# then reads the read models as they are, as it would from another API process).
TENANTS_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class Created:
    """The thread's creation as appended, and whether the read models list it yet."""

    event: RecordedEvent
    listed: bool


class PendingListings:
    """Per tenant (and partition of the log), the stream sequence of the last thread this
    process created and answered before the read models listed it; a list waits (bounded)
    for them to pass it."""

    def __init__(self, progress: ProjectionProgress, capacity: int = TENANTS_KEPT) -> None:
        self._progress = progress
        self._capacity = capacity
        self._last: OrderedDict[str, dict[int, int]] = OrderedDict()

    def mark(self, tenant: str, stream_seq: int, partition: int = 0) -> None:
        last = self._last.setdefault(tenant, {})
        last[partition] = max(stream_seq, last.get(partition, 0))
        self._last.move_to_end(tenant)
        while len(self._last) > self._capacity:
            self._last.popitem(last=False)

    async def listed(self, tenant: str, timeout: float) -> bool:
        """Wait until the read models list every thread this process created for `tenant`;
        whether they did within `timeout` (if not, the list goes on with what they hold)."""
        last = self._last.get(tenant)
        if last is None:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for partition, seq in sorted(last.items()):
            remaining = deadline - loop.time()
            if not await self._progress.wait_passed(LISTING, seq, remaining, partition=partition):
                return False
            if last.get(partition) == seq:
                del last[partition]
        if not last and self._last.get(tenant) is last:
            del self._last[tenant]
        return True


class CreateSettings(Protocol):
    @property
    def read_your_writes_timeout(self) -> float: ...


class CreateDeps(Protocol):
    """What a root thread's creation uses of the API's dependencies (`deps.ApiDeps`)."""

    @property
    def bus(self) -> Bus: ...

    @property
    def settings(self) -> CreateSettings: ...

    @property
    def progress(self) -> ProjectionProgress: ...

    @property
    def listings(self) -> PendingListings: ...


# Where the protocols' free-form fields name the end user a new thread is for (A2A's
# `metadata`, AG-UI's `forwardedProps`); Agency's own routes take `endUserId` in the body,
# LangGraph's `metadata.user_id` (docs/data.md, "End users").
END_USER_FIELD = "endUserId"


async def create_root_thread(
    deps: CreateDeps,
    tenant: str,
    agency_id: str,
    thread_id: str,
    agent_type: str,
    request: dict[str, str],
    *,
    listed: bool,
    end_user_id: str | None = None,
) -> Created:
    """Append the thread's `thread.created` (the caller checked the agency and the agent
    type). With `listed`, also wait (within `read_your_writes_timeout`) for the read models
    to list it; without, the tenant's next list waits for that instead.

    409 if the thread exists; 400 if its creation could not be stored as it is."""
    created = ThreadCreated(
        agency_id=agency_id, agent_type=agent_type, request=request, end_user_id=end_user_id
    )
    context = EventContext(agency_id=agency_id, thread_id=thread_id, correlation_id=thread_id)
    try:
        result = await deps.bus.store.append(
            tenant, "thread", thread_id, [created], expected=Position(), context=context
        )
    except ConcurrencyError:
        raise ClientException(
            status_code=409, detail=f"thread {thread_id} already exists"
        ) from None
    except (InvalidEvent, EventTooLarge) as e:
        raise ValidationException(f"the thread cannot be created: {e}") from e
    event = result.events[0]
    if not listed:
        deps.listings.mark(tenant, event.stream_seq, partition_of_subject(event.subject))
        return Created(event, listed=False)
    timeout = deps.settings.read_your_writes_timeout
    passed = await deps.progress.wait_passed(
        LISTING, event.stream_seq, timeout, partition=partition_of_subject(event.subject)
    )
    return Created(event, listed=passed)
