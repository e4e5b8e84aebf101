"""The events log in partitions: provisioned as N streams, N kept with them, another N
refused, and each aggregate's events in the stream of its id's hash."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agency.contracts.events import ThreadCreated
from agency.contracts.ids import new_id
from agency.contracts.partitions import PARTITIONS_KEY, EventLayout, fnv1a_32, partition_of
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.partitions import PartitionsMismatch, stored_partitions
from agency.infra.jetstream.records import Position
from agency.infra.jetstream.streams import StreamSettings, event_stream, provision
from agency.infra.jetstream.upgrade import LAYOUT_KEY
from agency.infra.launch import NatsServer


class _MappingServer(NatsServer):
    """A server partitioning `tenant.*.evt.*.*` itself, as NATS's subject mapping does."""

    def __init__(self, store_dir: Path, partitions: int) -> None:
        super().__init__(store_dir, sync_interval="default")
        self._partitions = partitions

    def _write_config(self) -> None:
        super()._write_config()
        mapping = (
            '"tenant.*.evt.*.*": "tenant.{{wildcard(1)}}.evt.'
            f"{{{{partition({self._partitions},3)}}}}"
            '.{{wildcard(2)}}.{{wildcard(3)}}"'
        )
        with self.config_path.open("a") as f:
            f.write(f"mappings = {{ {mapping} }}\n")


def _threads_in_every_partition(partitions: int, each: int) -> list[str]:
    """Fresh thread ids, `each` of them falling in every partition."""
    chosen: dict[int, list[str]] = {p: [] for p in range(partitions)}
    while any(len(ids) < each for ids in chosen.values()):
        thread_id = new_id()
        ids = chosen[partition_of(thread_id, partitions)]
        if len(ids) < each:
            ids.append(thread_id)
    return [t for ids in chosen.values() for t in ids]


def test_fnv1a_matches_the_reference_vectors() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


async def test_partition_is_the_one_nats_subject_mapping_computes(tmp_path: Path) -> None:
    """An integrator may let the server partition instead: it lands where we do."""
    layout = EventLayout(3)
    ids = _threads_in_every_partition(3, each=8)
    async with _MappingServer(tmp_path / "nats", 3) as server, Bus(server.url) as bus:
        seen: asyncio.Queue[str] = asyncio.Queue()

        async def on_message(msg: object) -> None:
            seen.put_nowait(msg.subject)  # type: ignore[attr-defined]

        await bus.nc.subscribe("tenant.t1.evt.>", cb=on_message)
        for aggregate_id in ids:
            await bus.nc.publish(f"tenant.t1.evt.thread.{aggregate_id}", b"{}")
        await bus.nc.flush()
        mapped = [await asyncio.wait_for(seen.get(), 5.0) for _ in ids]
    assert mapped == [layout.subject("t1", "thread", i) for i in ids]


async def test_one_partition_provisions_the_events_stream_as_before(
    fresh_server: NatsServer,
) -> None:
    async with Bus(fresh_server.url) as bus:
        await provision(bus.js, StreamSettings(partitions=1))
        info = await bus.js.stream_info(EVENTS_STREAM)
        assert info.config.subjects == ["tenant.*.evt.>"]
        metadata = info.config.metadata or {}
        assert metadata[LAYOUT_KEY] == (event_stream(StreamSettings()).metadata or {})[LAYOUT_KEY]
        assert PARTITIONS_KEY not in metadata
        names = await bus.js.streams_info()
        assert not [s for s in names if s.config.name.startswith(f"{EVENTS_STREAM}_")]
        assert await stored_partitions(bus.js) == 1


async def test_three_partitions_provision_three_streams_with_their_count(
    fresh_server: NatsServer,
) -> None:
    async with Bus(fresh_server.url) as bus:
        await provision(bus.js, StreamSettings(partitions=3))
        await provision(bus.js, StreamSettings(partitions=3))  # again: idempotent
        for p in range(3):
            info = await bus.js.stream_info(f"{EVENTS_STREAM}_{p}")
            assert info.config.subjects == [f"tenant.*.evt.{p}.>"]
            assert (info.config.metadata or {})[PARTITIONS_KEY] == "3"
            consumers = {c.name for c in await bus.js.consumers_info(f"{EVENTS_STREAM}_{p}")}
            assert "runtime-triggers" in consumers
            trigger = await bus.js.consumer_info(f"{EVENTS_STREAM}_{p}", "runtime-triggers")
            assert trigger.config.filter_subject == f"tenant.*.evt.{p}.thread.*"
        assert await stored_partitions(bus.js) == 3
        with pytest.raises(Exception, match="not found"):
            await bus.js.stream_info(EVENTS_STREAM)


@pytest.mark.parametrize(("provisioned", "asked"), [(1, 3), (3, 1), (3, 2)])
async def test_another_count_of_partitions_is_refused_naming_both(
    fresh_server: NatsServer, provisioned: int, asked: int
) -> None:
    async with Bus(fresh_server.url) as bus:
        await provision(bus.js, StreamSettings(partitions=provisioned))
        before = sorted(s.config.name for s in await bus.js.streams_info())
        with pytest.raises(PartitionsMismatch) as refused:
            await provision(bus.js, StreamSettings(partitions=asked))
        assert f"provisioned with {provisioned} partition(s)" in str(refused.value)
        assert f"AGENCY_EVENT_PARTITIONS={asked}" in str(refused.value)
        assert f"start with AGENCY_EVENT_PARTITIONS={provisioned}" in str(refused.value)
        assert sorted(s.config.name for s in await bus.js.streams_info()) == before


async def test_a_bus_finds_the_partitions_and_appends_each_thread_to_its_own(
    fresh_server: NatsServer, tenant: str
) -> None:
    async with Bus(fresh_server.url) as admin:
        await provision(admin.js, StreamSettings(partitions=3))
    async with Bus(fresh_server.url) as bus:
        assert bus.layout == EventLayout(3)
        threads = _threads_in_every_partition(3, each=4)
        for thread_id in threads:
            created = ThreadCreated(agency_id="a1", agent_type="main")
            result = await bus.store.append(
                tenant, "thread", thread_id, [created], expected=Position()
            )
            recorded = result.events[0]
            assert recorded.subject == bus.layout.subject(tenant, "thread", thread_id)
            events = await bus.store.read(tenant, "thread", thread_id)
            assert [e.envelope.event_id for e in events] == [recorded.envelope.event_id]
        held = {
            p: (await bus.js.stream_info(f"{EVENTS_STREAM}_{p}")).state.messages for p in range(3)
        }
        assert held == {0: 4, 1: 4, 2: 4}


async def test_a_bus_before_provisioning_takes_the_configured_partitions(
    fresh_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service started before the store is provisioned does not settle on one stream."""
    monkeypatch.setenv("AGENCY_EVENT_PARTITIONS", "3")
    async with Bus(fresh_server.url) as early:
        assert early.layout == EventLayout(3)
    async with Bus(fresh_server.url) as admin:
        await provision(admin.js, StreamSettings(partitions=1))
    async with Bus(fresh_server.url) as late:
        assert late.layout == EventLayout(1)  # what the store holds wins
