"""A store the previous release wrote (one subject per event type) is upgraded to one
subject per aggregate: every thread replays to the same state, every event keeps its id,
its order and its stream sequence, and a crash part-way through is resumed."""

from __future__ import annotations

import asyncio
import os
import sys
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agency.contracts.codec import decode_event
from agency.contracts.errors import ContractError
from agency.contracts.events import MessageAppended
from agency.contracts.events.base import ChatMessage
from agency.contracts.subjects import (
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
    event_subject,
    legacy_event_subject,
)
from agency.domain.thread_state import fold
from agency.infra.jetstream import upgrade
from agency.infra.jetstream.aggregate_reads import direct_batch, scan_from
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import TOOL_REQUESTS
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent
from agency.infra.jetstream.streams import provision
from agency.infra.launch import NatsServer

PREVIOUS = Path(__file__).parent / "previous_release" / "store.tar.gz"
TENANT, THREADS = "acme", ("thread-1", "thread-2", "thread-3")
GARBAGE_SEQ = 20  # the message that is no event, on thread-3


@pytest.fixture
async def previous(tmp_path: Path) -> AsyncIterator[Bus]:
    """A server on a copy of the previous release's store."""
    root = tmp_path / "nats"
    root.mkdir()
    with tarfile.open(PREVIOUS) as archive:
        archive.extractall(root, filter="data")
    async with NatsServer(root, sync_interval="default") as server, Bus(server.url) as bus:
        yield bus


async def legacy_thread(bus: Bus, thread: str) -> list[RecordedEvent]:
    """A thread as the previous release read it: its subjects, one per event type, each
    event's subject naming its tenant, thread and type."""
    family = f"tenant.{TENANT}.evt.thread.{thread}.>"
    request = {"seq": 1, "next_by_subj": family, "batch": 1000}
    events = []
    async for msg in direct_batch(bus.nc, EVENTS_STREAM, request, 5.0):
        headers = msg.headers or {}
        try:
            envelope = decode_event(msg.data)
        except ContractError:
            continue
        subject = headers["Nats-Subject"]
        assert subject == legacy_event_subject(TENANT, "thread", thread, envelope.type)
        seq = int(headers["Nats-Sequence"])
        events.append(
            RecordedEvent(envelope=envelope, stream_seq=seq, subject=subject, raw=msg.data)
        )
    return events


def facts(events: list[RecordedEvent]) -> list[tuple[Any, ...]]:
    return [(e.envelope.event_id, e.seq, e.stream_seq, e.type, e.raw) for e in events]


async def test_a_previous_release_store_is_upgraded_and_every_thread_replays_the_same(
    previous: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = previous
    before = {t: await legacy_thread(bus, t) for t in THREADS}
    assert [len(before[t]) for t in THREADS] == [9, 9, 6]
    states = {t: fold(TENANT, t, before[t]) for t in THREADS}
    floor = (await bus.js.consumer_info(EVENTS_STREAM, TOOL_REQUESTS.name)).ack_floor.stream_seq
    assert floor > 0

    # Not upgraded by a provision that cannot copy: refused, saying what to do.
    with pytest.raises(upgrade.UpgradeError, match="agency migrate"):
        await provision(bus.js)

    # A crash part-way through the copy into the staging stream, then one part-way through
    # the copy back (the stream of the previous layout deleted by then)...
    real_store, copied, crashes = upgrade._store, [], [7, 26 + 7]

    async def crashing(*args: Any) -> None:
        if crashes and len(copied) == crashes[0]:
            crashes.pop(0)
            raise RuntimeError("the process died")
        copied.append(args)
        await real_store(*args)

    monkeypatch.setattr(upgrade, "_store", crashing)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="died"):
            await provision(bus.js, nc=bus.nc)
    # The stream half filled back is not used as it is...
    with pytest.raises(upgrade.UpgradeError, match="agency migrate"):
        await provision(bus.js)
    # ... and the next start finishes the upgrade.
    await provision(bus.js, nc=bus.nc)
    assert len(copied) == 2 * 26

    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=f"tenant.{TENANT}.evt.>")
    assert upgrade.is_upgraded(info)
    assert set(info.state.subjects or {}) == {
        event_subject(TENANT, "agency", "agency-1"),
        *(event_subject(TENANT, "thread", t) for t in THREADS),
    }
    names = {s.config.name for s in await bus.js.streams_info()}
    assert upgrade.UPGRADE_STREAM not in names

    for thread in THREADS:
        after = await bus.store.read(TENANT, "thread", thread)
        assert facts(after) == facts(before[thread])
        assert fold(TENANT, thread, after) == states[thread]
        for event in after:
            msg = await bus.js.get_msg(EVENTS_STREAM, seq=event.stream_seq)
            assert (msg.headers or {}).get(EVENT_TYPE_HEADER) == event.type
    # The message that is no event keeps its place, and is passed over as before.
    garbage = await bus.js.get_msg(EVENTS_STREAM, seq=GARBAGE_SEQ)
    assert garbage.subject == event_subject(TENANT, "thread", "thread-3")
    scanned = [e async for e in scan_from(bus.nc, EVENTS_STREAM, garbage.subject, 1, 5.0)]
    assert [e.stream_seq for e in scanned if isinstance(e, UndecodableEvent)] == [GARBAGE_SEQ]

    # The tools durable goes on after what it had acknowledged, on the new subjects.
    tools = await bus.js.consumer_info(EVENTS_STREAM, TOOL_REQUESTS.name)
    assert tools.config.opt_start_seq == floor + 1
    assert tools.config.filter_subject == "tenant.*.evt.thread.*"
    # One filter a type before, the aggregates they span now.
    triggers = await bus.js.consumer_info(EVENTS_STREAM, "runtime-triggers")
    assert (triggers.config.filter_subject, triggers.config.filter_subjects) == (
        "tenant.*.evt.thread.*",
        None,
    )
    assert triggers.config.opt_start_seq == 1

    # Appends go on from each thread's position, and a stale one is refused.
    _, position = await bus.store.read_positioned(TENANT, "thread", "thread-3")
    more = [MessageAppended(message=ChatMessage(role="user", content="after the upgrade"))]
    appended = await bus.store.append(TENANT, "thread", "thread-3", more, expected=position)
    assert appended.events[0].seq == 7
    with pytest.raises(ConcurrencyError):
        await bus.store.append(TENANT, "thread", "thread-3", more, expected=position)
    assert await upgrade.upgrade_events(bus.nc, bus.js, info.config) is False


async def test_an_empty_or_upgraded_store_has_nothing_to_upgrade(bus: Bus) -> None:
    info = await bus.js.stream_info(EVENTS_STREAM)
    assert upgrade.is_upgraded(info)
    assert await upgrade.upgrade_events(bus.nc, bus.js, info.config) is False
    assert upgrade.aggregate_subject("tenant.a.evt.thread.x.run_tick") == "tenant.a.evt.thread.x"
    assert upgrade.aggregate_filter("tenant.*.evt.thread.*.tool_requested") == (
        "tenant.*.evt.thread.*"
    )
    assert upgrade.aggregate_filter("tenant.a.evt.>") == "tenant.a.evt.>"


async def test_agency_migrate_upgrades_a_data_directory_of_the_previous_release(
    tmp_path: Path, database_url: str
) -> None:
    """With the server's accounts too: the store of a server without them is moved into
    `AGENCY` first, then upgraded."""
    data = tmp_path / "data"
    (data / "nats").mkdir(parents=True)
    with tarfile.open(PREVIOUS) as archive:
        archive.extractall(data / "nats", filter="data")
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("NATS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "migrate", "--data-dir", str(data),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out.decode()
    assert "this release's layout" in out.decode()

    server = NatsServer(data / "nats", sync_interval="default", auth=True)
    async with server, Bus(server.admin_url) as bus:
        assert upgrade.is_upgraded(await bus.js.stream_info(EVENTS_STREAM))
        events = await bus.store.read(TENANT, "thread", "thread-1")
        assert [e.seq for e in events] == list(range(1, 10))
