"""Writing an archive from the log: a thread with its subagent tree, an agency, a tenant.

Everything is read from JetStream (never from the read models). A thread's archive holds
its agency's own events too (its creation and blueprints), so it imports into a
deployment that has never seen the agency; an agency's holds every thread created in it
and their trees; a tenant's holds every event of the tenant: its keys, budgets, agencies,
threads, trees, workflows, schedules and store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from agency.contracts.codec import in_clear
from agency.contracts.envelope import utc_now
from agency.contracts.events import ThreadCreated
from agency.contracts.ids import validate_token
from agency.contracts.subjects import EVENTS_STREAM, Aggregate
from agency.contracts.version import package_version
from agency.domain.thread_state import fold
from agency.infra.jetstream.aggregate_reads import scan_from
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent
from agency.services.archive.errors import MalformedArchive, NothingToExport, NotQuiet
from agency.services.archive.format import (
    FORMAT,
    FORMAT_VERSION,
    AggregateEntry,
    FileEntry,
    Kind,
    Manifest,
    events_digest,
    file_name,
    pack,
)
from agency.services.archive.quiet import why_busy
from agency.services.threads.reads import read_thread, thread_creations
from agency.services.threads.tree import descendants

Key = tuple[Aggregate, str]


@dataclass(frozen=True, slots=True)
class Exported:
    data: bytes
    manifest: Manifest


async def export_thread(bus: Bus, tenant_id: str, thread_id: str) -> Exported:
    """A root thread, every thread below it, its tree's log and its agency's events."""
    root = await read_thread(bus.store, tenant_id, validate_token("thread id", thread_id))
    created = root[0].payload
    if isinstance(created, ThreadCreated) and created.parent is not None:
        raise NotQuiet(
            thread_id, f"it is a subagent of {created.parent.thread_id}; export its root thread"
        )
    creations = await thread_creations(
        bus.nc, tenant_id, start_seq=root[0].stream_seq, layout=bus.layout
    )
    found: dict[Key, list[RecordedEvent]] = {("thread", thread_id): root}
    for child, _, _ in descendants(creations, thread_id):
        found[("thread", child)] = await bus.store.read(tenant_id, "thread", child)
    await _add(bus, tenant_id, found, ("tree", thread_id))
    agency = root[0].envelope.agency_id
    if agency:
        await _add(bus, tenant_id, found, ("agency", agency))
    return _archive("thread", thread_id, tenant_id, found)


async def export_end_user(bus: Bus, tenant_id: str, end_user_id: str) -> Exported:
    """Every root thread created for the end user (with its subagents and its tree's log)
    and the events of their agencies: what the tenant holds of that person's threads."""
    found: dict[Key, list[RecordedEvent]] = {}
    creations = await thread_creations(bus.nc, tenant_id, layout=bus.layout)
    roots = [
        c
        for c in creations
        if isinstance(c.event.payload, ThreadCreated)
        and c.parent_id is None
        and c.event.payload.end_user_id == end_user_id
    ]
    if not roots:
        raise NothingToExport("end user", end_user_id, tenant_id)
    for root in roots:
        found[("thread", root.thread_id)] = await bus.store.read(
            tenant_id, "thread", root.thread_id
        )
        for child, _, _ in descendants(creations, root.thread_id):
            found[("thread", child)] = await bus.store.read(tenant_id, "thread", child)
        await _add(bus, tenant_id, found, ("tree", root.thread_id))
    for agency in sorted({r.event.envelope.agency_id or "" for r in roots} - {""}):
        await _add(bus, tenant_id, found, ("agency", agency))
    return _archive("user", end_user_id, tenant_id, found)


async def export_agency(bus: Bus, tenant_id: str, agency_id: str) -> Exported:
    """The agency's events and every thread created in it, with their trees' logs."""
    agency_id = validate_token("agency id", agency_id)
    found: dict[Key, list[RecordedEvent]] = {}
    await _add(bus, tenant_id, found, ("agency", agency_id))
    if not found:
        raise NothingToExport("agency", agency_id, tenant_id)
    for creation in await thread_creations(bus.nc, tenant_id, layout=bus.layout):
        payload = creation.event.payload
        if isinstance(payload, ThreadCreated) and payload.agency_id == agency_id:
            thread = creation.thread_id
            found[("thread", thread)] = await bus.store.read(tenant_id, "thread", thread)
            if creation.parent_id is None:
                await _add(bus, tenant_id, found, ("tree", thread))
    return _archive("agency", agency_id, tenant_id, found)


async def export_tenant(bus: Bus, tenant_id: str) -> Exported:
    """Every event of the tenant (partition by partition, on a log of several: each
    aggregate's events are in one of them, in order)."""
    found: dict[Key, list[RecordedEvent]] = {}
    layout = bus.store.layout
    for partition in range(layout.partitions):
        pattern = layout.tenant_filter(tenant_id, partition)
        stream = layout.stream(partition) if layout.partitioned else bus.store.stream
        async for event in scan_from(bus.nc, stream or EVENTS_STREAM, pattern, 1, 5.0):
            if isinstance(event, UndecodableEvent):
                raise MalformedArchive(
                    f"event {event.stream_seq} on {event.subject} cannot be read: {event.reason}"
                )
            envelope = event.envelope
            found.setdefault((envelope.aggregate, envelope.aggregate_id), []).append(event)
    if not found:
        raise NothingToExport("tenant", tenant_id, tenant_id)
    return _archive("tenant", tenant_id, tenant_id, found)


async def _add(bus: Bus, tenant_id: str, found: dict[Key, list[RecordedEvent]], key: Key) -> None:
    events = await bus.store.read(tenant_id, key[0], key[1])
    if events:
        found[key] = events


def _archive(
    kind: Kind, root: str, tenant_id: str, found: dict[Key, list[RecordedEvent]]
) -> Exported:
    files: dict[str, bytes] = {}
    entries: list[FileEntry] = []
    taken: set[str] = set()
    for (aggregate, ident), events in found.items():
        if aggregate != "thread":
            continue
        state = fold(tenant_id, ident, events)
        busy = why_busy(state)
        if busy is not None:
            raise NotQuiet(ident, busy)
        for index, (path, content) in enumerate(state.files):
            name = file_name(ident, path, index, taken)
            body = content.encode()
            files[name] = body
            entries.append(
                FileEntry(
                    thread_id=ident, path=path, name=name, bytes=len(body),
                    sha256=hashlib.sha256(body).hexdigest(),
                )
            )  # fmt: skip
    ordered = sorted(_every(found.values()), key=lambda e: e.stream_seq)
    # The user's copy: a thread's content opened (docs/data.md), as it was written.
    lines = [in_clear(e.raw) for e in ordered]
    manifest = Manifest(
        format=FORMAT,
        version=FORMAT_VERSION,
        kind=kind,
        root=root,
        tenant_id=tenant_id,
        exported_at=utc_now(),
        agency_version=package_version(),
        events=len(lines),
        events_sha256=events_digest(lines),
        aggregates=tuple(
            AggregateEntry(aggregate=a, id=i, events=len(es)) for (a, i), es in found.items()
        ),
        files=tuple(entries),
    )
    return Exported(data=pack(manifest, lines, files), manifest=manifest)


def _every(groups: Iterable[list[RecordedEvent]]) -> Iterable[RecordedEvent]:
    for events in groups:
        yield from events
