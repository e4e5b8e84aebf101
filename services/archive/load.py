"""Importing an archive into this deployment's log, where it replays to the same state.

The archive is checked whole before anything is written: its format and version, each
aggregate's events numbered 1, 2, 3 … as its manifest counts them, every event of the
archive's tenant, no negative usage, every thread at rest, only threads, trees and
agencies unless it is a tenant's, and nothing else in the target already (a collision is
refused, naming it). What the target holds of the archive itself (the same events, from an
import interrupted halfway) is kept and the rest written after it; an archive the target
holds whole is a collision too. Then each aggregate is appended as the log first held it: the same
event ids, times, causations and idempotency keys, with the target tenant (and the ids it
derives: `remap.py`). The tenant's own events come first, then agencies, trees and the
rest, and threads last, each subagent before its parent (as a fork writes them), so the
services, reacting to the imported events as to any, find every child and every answer
already in place and have nothing left to do. Each thread goes in atomic batches of at
most 1,000 events cut where it was at rest.

The read models follow by themselves: the projector applies the imported events like any.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from agency.contracts.codec import decode_event, encode
from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    BlueprintSaved,
    BlueprintSpec,
    ModelCompleted,
    ThreadCreated,
)
from agency.contracts.http import ArchiveImported
from agency.contracts.subjects import Aggregate
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError, EventTooLarge, InvalidEvent
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import AppendResult, EventContext, Position, RecordedEvent
from agency.infra.jetstream.streams import ATOMIC_BATCH_LIMIT
from agency.services.archive.errors import (
    ArchiveCollision,
    ArchiveRefused,
    MalformedArchive,
    NothingToExport,
    NotQuiet,
    RefusedBlueprint,
)
from agency.services.archive.format import Archive, Kind, unpack
from agency.services.archive.quiet import why_busy
from agency.services.archive.remap import relink, tenant_remap
from agency.services.tenancy.blueprint_checks import save_refusal
from agency.services.tenancy.door_limits import DoorLimits

Key = tuple[Aggregate, str]
# What a thread's, an agency's or an end user's archive may hold.
_PARTIAL = frozenset({"thread", "tree", "agency"})
# The order aggregates are written in; threads last, children first.
_ORDER: dict[str, int] = {"tenant": 0, "agency": 1, "store": 2, "tree": 3, "workflow": 4}


@dataclass(frozen=True, slots=True)
class Imported:
    kind: Kind
    tenant_id: str
    # The exported id as it is in the target.
    root: str
    # The threads written (a thread the target held whole already is not), in order.
    threads: tuple[str, ...]
    events: int
    # Ids that changed because the tenant did: old → new.
    remapped: dict[str, str]
    # Aggregates the target had already and kept (a thread's agency).
    kept: tuple[str, ...] = ()

    def answer(self) -> ArchiveImported:
        """As `POST /import` answers it and `agency import --json` prints it."""
        return ArchiveImported(
            kind=self.kind,
            tenant_id=self.tenant_id,
            id=self.root,
            threads=list(self.threads),
            events=self.events,
            remapped=self.remapped,
            kept=list(self.kept),
        )


async def import_archive(
    bus: Bus,
    data: bytes,
    *,
    tenant_id: str | None,
    operator: bool,
    door: DoorLimits | None = None,
) -> Imported:
    """Import `data` into `tenant_id` (for a tenant archive, None: its own tenant id).

    A tenant archive needs the operator (it creates a tenant, its keys with it) and keeps
    its tenant id; a thread's, an agency's or an end user's archive goes into an existing
    tenant, any one (the agencies of a thread's or an end user's that it has are kept).
    """
    archive = unpack(data)
    manifest = archive.manifest
    source = manifest.tenant_id
    if manifest.kind == "tenant":
        if not operator:
            raise ArchiveRefused("a tenant's archive is imported by the operator (admin key)")
        if tenant_id not in (None, source):
            raise ArchiveRefused(
                f"a tenant's archive keeps its tenant id {source}; import it without a tenant"
            )
        target = source
    else:
        if tenant_id is None:
            raise ArchiveRefused(f"a {manifest.kind}'s archive is imported into a tenant: name it")
        target = tenant_id
        if not await bus.store.read(target, "tenant", target):
            raise NothingToExport("tenant", target, target)
    groups = _groups(archive)
    _check_blueprints(archive.events, door or DoorLimits.from_env())
    ids = tenant_remap(source, target, archive.events)
    moved = {
        (aggregate, ids.get(ident, ident)): [_moved(e, ids) for e in events]
        for (aggregate, ident), events in groups.items()
    }
    _check_quiet(target, moved)
    plan, kept = await _plan(bus, target, manifest.kind, moved)
    store = _ImportStore(bus)
    written: list[str] = []
    count = 0
    for key in _write_order(moved):
        if key not in plan:
            continue
        position, held = plan[key]
        if held == len(moved[key]):
            continue
        for chunk in _chunks(target, key, moved[key]):
            if held >= len(chunk):
                held -= len(chunk)
                continue
            if held:
                raise ArchiveCollision(key[0], key[1], target)
            try:
                result = await store.append_as(target, key, chunk, expected=position)
            except ConcurrencyError as e:
                raise ArchiveCollision(key[0], key[1], target) from e
            except (InvalidEvent, EventTooLarge) as e:
                raise MalformedArchive(f"{key[0]} {key[1]}: {e}") from e
            position = result.position
            count += len(chunk)
        if key[0] == "thread":
            written.append(key[1])
    return Imported(
        kind=manifest.kind,
        tenant_id=target,
        root=ids.get(manifest.root, manifest.root) if manifest.kind != "tenant" else target,
        threads=tuple(written),
        events=count,
        remapped=ids,
        kept=tuple(kept),
    )


async def _plan(
    bus: Bus, target: str, kind: Kind, moved: dict[Key, list[Envelope]]
) -> tuple[dict[Key, tuple[Position, int]], list[str]]:
    """Per aggregate to write, where it stands in the target and how many of its events the
    target holds already; and the agencies kept as the target has them."""
    kept: list[str] = []
    plan: dict[Key, tuple[Position, int]] = {}
    for key, events in moved.items():
        existing, position = await bus.store.read_positioned(target, key[0], key[1])
        held = _held(existing, events)
        if held is None:
            if kind in ("thread", "user") and key[0] == "agency":
                kept.append(f"agency {key[1]}")
                continue
            raise ArchiveCollision(key[0], key[1], target)
        plan[key] = (position, held)
    if plan and all(held == len(moved[key]) for key, (_, held) in plan.items()):
        first = next(iter(plan))
        raise ArchiveCollision(first[0], first[1], target)
    return plan, kept


def _held(existing: Sequence[RecordedEvent], events: Sequence[Envelope]) -> int | None:
    """How many of the archive's `events` the target holds already (an import interrupted
    halfway is finished by a repeat), or None when it holds others."""
    if len(existing) > len(events):
        return None
    for held, event in zip(existing, events, strict=False):
        if held.envelope.event_id != event.event_id:
            return None
    return len(existing)


class _ImportStore(EventStore):
    """The event store writing archived envelopes as they were, but for the tenant."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus.nc, bus.js, stream=bus.store.stream, layout=bus.store.layout)
        self._originals: Sequence[Envelope] = ()

    async def append_as(
        self, tenant_id: str, key: Key, originals: Sequence[Envelope], *, expected: Position
    ) -> AppendResult:
        # `append` builds its envelopes before its first await, and each import has a store
        # of its own, so nothing interleaves between setting the originals and their use.
        self._originals = originals
        payloads = [e.payload for e in originals]
        return await self.append(
            tenant_id, key[0], key[1], payloads, expected=expected, context=EventContext()
        )

    def _stamp(self, envelopes: list[Envelope]) -> list[Envelope]:
        stamped = []
        for new, old in zip(envelopes, self._originals, strict=True):
            if new.seq != old.seq:
                raise MalformedArchive(
                    f"{old.aggregate} {old.aggregate_id} event {old.seq} would be written "
                    f"as {new.seq}"
                )
            stamped.append(
                msgspec.structs.replace(
                    old, tenant_id=new.tenant_id, trace=new.trace, version=new.version
                )
            )
        return stamped


def _groups(archive: Archive) -> dict[Key, list[Envelope]]:
    source = archive.manifest.tenant_id
    groups: dict[Key, list[Envelope]] = {}
    for e in archive.events:
        if e.tenant_id != source:
            raise MalformedArchive(
                f"event {e.event_id} is tenant {e.tenant_id}'s, the archive is {source}'s"
            )
        _check_usage(e)
        events = groups.setdefault((e.aggregate, e.aggregate_id), [])
        if e.seq != len(events) + 1:
            raise MalformedArchive(
                f"{e.aggregate} {e.aggregate_id} has event {e.seq} after {len(events)} events"
            )
        events.append(e)
    kind = archive.manifest.kind
    for aggregate, ident in groups:
        if kind != "tenant" and aggregate not in _PARTIAL:
            raise MalformedArchive(
                f"a {kind}'s archive holds {aggregate} {ident}: only a tenant's archive holds "
                "the tenant's own events, workflows, schedules or store"
            )
    counted = {(a.aggregate, a.id): a.events for a in archive.manifest.aggregates}
    found = {key: len(events) for key, events in groups.items()}
    if counted != found:
        raise MalformedArchive("the events do not match the manifest's aggregates")
    return groups


def _check_blueprints(events: Sequence[Envelope], door: DoorLimits) -> None:
    """Every blueprint of the archive is a tenant's: held to what a tenant may save here
    (`services/tenancy/blueprint_checks.py`), whoever imports it."""
    for e in events:
        match e.payload:
            case (
                BlueprintSaved(blueprint=blueprint)
                | ThreadCreated(blueprint=BlueprintSpec() as blueprint)
            ):
                refused = save_refusal(blueprint, door)
                if refused is not None:
                    raise RefusedBlueprint(e.event_id, *refused)
            case _:
                pass


def _check_usage(e: Envelope) -> None:
    # Spend is counted from these events: a negative count would lower it.
    match e.payload:
        case ModelCompleted(usage=usage, cost_usd=cost) if (
            min(usage.input_tokens, usage.output_tokens, cost) < 0
        ):
            raise MalformedArchive(f"event {e.event_id} records a negative usage or cost")
        case _:
            pass


def _moved(envelope: Envelope, ids: dict[str, str]) -> Envelope:
    if not ids:
        return envelope
    return decode_event(relink(encode(envelope), ids))


def _check_quiet(tenant_id: str, moved: dict[Key, list[Envelope]]) -> None:
    for (aggregate, ident), events in moved.items():
        if aggregate != "thread":
            continue
        if not isinstance(events[0].payload, ThreadCreated):
            raise MalformedArchive(f"thread {ident} does not start with thread.created")
        busy = why_busy(_fold(tenant_id, ident, events))
        if busy is not None:
            raise NotQuiet(ident, busy)


def _fold(tenant_id: str, thread_id: str, events: Sequence[Envelope]) -> ThreadState:
    state = ThreadState(tenant_id=tenant_id, thread_id=thread_id)
    for e in events:
        state = state.apply(RecordedEvent(envelope=e, stream_seq=0, subject=""))
    return state


def _write_order(moved: dict[Key, list[Envelope]]) -> list[Key]:
    """Non-thread aggregates first; threads last, each after every thread below it."""
    others = sorted((k for k in moved if k[0] != "thread"), key=lambda k: _ORDER.get(k[0], 5))
    # `moved` is in the order of each aggregate's first event in the log, and a child is
    # created after its parent: the threads reversed put every child before its parent.
    threads = [k for k in moved if k[0] == "thread"]
    return others + threads[::-1]


def _chunks(tenant_id: str, key: Key, events: list[Envelope]) -> list[list[Envelope]]:
    if len(events) <= ATOMIC_BATCH_LIMIT:
        return [events]
    rest = [True] * (len(events) + 1)
    if key[0] == "thread":
        state = ThreadState(tenant_id=tenant_id, thread_id=key[1])
        for i, e in enumerate(events, 1):
            state = state.apply(RecordedEvent(envelope=e, stream_seq=0, subject=""))
            rest[i] = why_busy(state) is None
    chunks: list[list[Envelope]] = []
    start = 0
    while len(events) - start > ATOMIC_BATCH_LIMIT:
        limit = start + ATOMIC_BATCH_LIMIT
        cut = next((i for i in range(limit, start, -1) if rest[i]), limit)
        chunks.append(events[start:cut])
        start = cut
    chunks.append(events[start:])
    return chunks
