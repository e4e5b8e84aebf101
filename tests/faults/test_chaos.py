"""Random SIGKILLs of services, nats-server and PostgreSQL under a workload: every promise
of the log holds (the long version: `just chaos`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.chaos import ChaosParams, run_chaos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]


async def test_random_kills_of_services_and_servers_keep_every_promise(tmp_path: Path) -> None:
    """10 threads, 6 kills (nats-server and PostgreSQL among them): each run ends exactly
    once, each tool call has one result, no gaps, no crash, read models equal a rebuild."""
    report = await run_chaos(tmp_path / "chaos", ChaosParams(threads=10, kills=6))

    assert report.ok, report.details()
    assert len(report.killed) == 6 and {"nats", "postgres"} <= set(report.killed)


@pytest.mark.cluster
async def test_a_cluster_node_killed_and_restarted_under_load_loses_nothing(
    tmp_path: Path,
) -> None:
    """A 3-node cluster with R3 streams, the events log in 3 partitions (their leaders on
    the 3 nodes), a node SIGKILLed twice: every service stays up and every run ends."""
    params = ChaosParams(
        threads=15, kills=2, cluster=True, partitions=3, targets="nats", always=("nats",)
    )

    report = await run_chaos(tmp_path / "chaos", params)

    assert report.ok, report.details()
    assert all(k.startswith("nats-") for k in report.killed)


@pytest.mark.timeout(300)
async def test_broker_outages_of_seconds_under_cpu_load_are_waited_out(tmp_path: Path) -> None:
    """nats-server SIGKILLed three times and kept down 3-6 s each, every core busy with a
    competing process: each run still completes, with one terminal event; an outage is no
    run's failure."""
    params = ChaosParams(
        threads=9,
        kills=3,
        targets="nats",
        always=("nats",),
        down=(3.0, 6.0),
        busy=True,
        settle_timeout=150.0,
    )

    report = await run_chaos(tmp_path / "chaos", params)

    assert report.ok, report.details()
    assert report.killed == ["nats"] * 3
    assert set(report.outcomes) == {"run.completed"}, report.details()
    # The steps the outages met waited them out, each to its end.
    assert report.outage_waits["over"] > 0 and not report.outage_waits["outlasted"], (
        report.summary()
    )
