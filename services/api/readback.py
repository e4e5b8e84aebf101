"""Read your writes: a create answers once what it wrote can be read back (bounded), and a
read of a thread waits for the read models to catch up with its log (`caught_up`).

The command's event is awaited in its aggregate's log (woken by the event's own message,
`services/api/logwait.py`), then every projection that handles its type is awaited past it
(woken by the projector's notifications, `services/api/progress.py`). Both waits share
`read_your_writes_timeout`; past it the caller answers 202 instead of 201.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from litestar.exceptions import ValidationException

from agency.contracts.commands import AnyCommand, SaveBlueprint
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.ids import new_id
from agency.contracts.partitions import partition_of_subject
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.records import RecordedEvent
from agency.projections import catalog
from agency.services.api.deps import ApiDeps
from agency.services.api.logwait import watch_log
from agency.services.tenancy.door_limits import prompt_problem


@dataclass(frozen=True, slots=True)
class Written:
    """What a command wrote, as its aggregate's log was read until it showed it."""

    # The command's event; None if it was not seen in time.
    event: RecordedEvent | None
    # Whether every read model handling it has passed it (and what was stored with it).
    readable: bool
    # The aggregate's whole log as read, up to and including the command's events.
    log: list[RecordedEvent]


async def read_your_write(
    deps: ApiDeps,
    tenant: str,
    aggregate: Aggregate,
    aggregate_id: str,
    key: str,
    send: Callable[[], Awaitable[object]] | None = None,
    *,
    from_end: bool = False,
) -> Written:
    """Wait for the event our command produced (the registry stores the command's key on
    it), then for every projection handling its type to have passed it and whatever the
    aggregate stored with it, within `read_your_writes_timeout`. What was seen, and the
    aggregate's log as read (so the caller need not read it again).

    `send` sends the command once the aggregate is watched: see `watch_log` for why a
    command sent before would sometimes be found only by the periodic re-read.

    `from_end`: read only what the aggregate stores from now on (its position is looked up
    once the watch is in place), for a command whose events can only follow: `log` then
    holds those alone, and the wait costs the same however long the aggregate's log is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deps.settings.read_your_writes_timeout
    log: list[RecordedEvent] = []

    def ours(events: list[RecordedEvent]) -> RecordedEvent | None:
        log.extend(events)
        return next((e for e in events if e.envelope.idempotency_key == key), None)

    async with watch_log(deps.bus.nc, deps.bus.store, tenant, aggregate, aggregate_id) as watch:
        if from_end:
            watch.position = await deps.bus.store.last_position(tenant, aggregate, aggregate_id)
        if send is not None:
            await send()
        event = await watch.until(ours, deadline - loop.time())
    if event is None:
        return Written(None, False, log)
    # A command may store several events in its one atomic append (a tenant and its first
    # key): what it wrote is readable once the read models passed the last of them, which
    # the projector may take in a later batch than the first. The append is stored whole,
    # so the read that found the event read the rest of it too.
    names = [p.name for p in catalog.ALL if p.wants(event.type)]
    readable = await deps.progress.wait_passed(
        names,
        log[-1].stream_seq,
        deadline - loop.time(),
        partition=partition_of_subject(log[-1].subject),
    )
    return Written(event, readable, log)


async def send_and_read(
    deps: ApiDeps,
    tenant: str,
    aggregate: Aggregate,
    aggregate_id: str,
    command: AnyCommand,
    key: str | None = None,
    *,
    from_end: bool = False,
) -> Written:
    """Send `command` under the idempotency `key` (a fresh one without it) once its
    aggregate is watched, and read back what it wrote (`read_your_write`; `from_end`: the
    wait starts at the aggregate's end, for one with a long history)."""
    key = key or new_id()
    return await read_your_write(
        deps, tenant, aggregate, aggregate_id, key,
        send=lambda: deps.bus.commands.send(tenant, command, idempotency_key=key),
        from_end=from_end,
    )  # fmt: skip


async def caught_up(deps: ApiDeps, tenant: str, thread_id: str) -> bool:
    """Wait for every read model to have applied the thread's log as far as it goes now
    (within `read_lag_timeout`), so a read of the thread shows what its stream has shown or
    a command's answer said. Whether they did in time: if not, the read goes on with what
    they hold."""
    position = await deps.bus.store.last_position(tenant, "thread", thread_id)
    if not position.stream_seq:
        return True
    return await deps.progress.wait_passed(
        catalog.NAMES,
        position.stream_seq,
        deps.settings.read_lag_timeout,
        partition=deps.bus.layout.partition(thread_id),
    )


async def send_blueprint(
    deps: ApiDeps, tenant: str, agency_id: str, blueprint: BlueprintSpec
) -> tuple[bool, int | None]:
    """Send `blueprints.save` and wait (as `read_your_write` does) for what it wrote:
    whether the read models show it yet, and the revision it was saved as (None if the
    save was not seen in time). A prompt beyond the limit is refused here (400), as the
    registry would."""
    refuse_prompt(deps, blueprint)
    command = SaveBlueprint(agency_id=agency_id, blueprint=blueprint)
    written = await send_and_read(deps, tenant, "agency", agency_id, command, from_end=True)
    event = written.event
    saved = event.payload if event and isinstance(event.payload, BlueprintSaved) else None
    return written.readable, saved.revision if saved else None


def refuse_prompt(deps: ApiDeps, blueprint: BlueprintSpec) -> None:
    """400 naming the limit when the blueprint's prompt is larger than the operator allows."""
    if (problem := prompt_problem(blueprint, deps.door)) is not None:
        raise ValidationException(problem)
