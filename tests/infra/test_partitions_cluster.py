"""A log of three partitions on the project's 3-node cluster: three leaders, one a node,
for the events and for the commands, as the server's own stream info tells (provisioning moves a leader that NATS put beside
another, `infra/jetstream/leaders.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agency.contracts.events import ThreadCreated
from agency.contracts.ids import new_id
from agency.contracts.partitions import EventLayout
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leaders import leaders
from agency.infra.jetstream.records import Position
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsCluster
from tests.helpers import assert_eventually
from tests.infra.test_launchers import retry_transient

LAYOUT = EventLayout(3)


@pytest.mark.cluster
async def test_three_partitions_have_their_leaders_on_three_nodes(tmp_path: Path) -> None:
    async with NatsCluster(tmp_path / "cluster", sync_interval="default") as cluster:
        await cluster.wait_for_meta_leader()
        async with Bus(cluster.url, name="provision") as admin:
            settings = StreamSettings(replicas=3, partitions=3)
            await provision(admin.js, settings, nc=admin.nc)

            async def spread(commands: bool) -> dict[str, str | None]:
                # A leader moved by provisioning is elected again within a few seconds.
                placed = await retry_transient(
                    lambda: leaders(admin.js, LAYOUT, commands=commands), budget=20
                )
                assert None not in placed.values(), placed
                assert len(set(placed.values())) == 3, placed
                return placed

            placed = await assert_eventually(lambda: spread(False), timeout=30, interval=0.5)
            commanding = await assert_eventually(lambda: spread(True), timeout=30, interval=0.5)
        assert set(placed) == set(LAYOUT.streams)
        assert set(commanding) == set(LAYOUT.command_streams)

        async with Bus(cluster.url, name="writer") as bus:
            assert bus.layout == LAYOUT
            threads = [new_id() for _ in range(9)]
            for thread in threads:
                created = ThreadCreated(agency_id="a1", agent_type="main")
                await retry_transient(
                    lambda t=thread, c=created: bus.store.append(
                        "t1", "thread", t, [c], expected=Position()
                    ),
                    budget=20,
                )
            for thread in threads:
                events = await bus.store.read("t1", "thread", thread)
                assert len(events) == 1
                assert events[0].subject == LAYOUT.subject("t1", "thread", thread)
            held = [(await bus.js.stream_info(s)).state.messages for s in LAYOUT.streams]
            assert sum(held) == len(threads)
