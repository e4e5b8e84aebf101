"""A client of a cluster with users signs in, on a reconnect, to the servers the cluster
told it of (by address, without credentials) as to the one it was given: with the
credentials of its URL, never meeting an authorization violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from agency.infra.jetstream.natsclient import connect, url_credentials
from agency.infra.launch import NatsCluster
from tests.helpers import assert_eventually


def test_credentials_are_taken_from_urls_that_agree() -> None:
    urls = ["nats://agency:p%40ss@n1:4222", "nats://agency:p%40ss@n2:4222"]
    assert url_credentials(urls) == {"user": "agency", "password": "p@ss"}
    assert url_credentials(",".join(urls)) == {"user": "agency", "password": "p@ss"}
    assert url_credentials(["nats://a:1@n1:4222", "nats://b:2@n2:4222"]) == {}
    assert url_credentials(["nats://token@n1:4222"]) == {}
    assert url_credentials("nats://n1:4222") == {}


@pytest.mark.cluster
async def test_a_reconnect_to_a_server_told_of_signs_in_with_the_url_credentials(
    tmp_path: Path,
) -> None:
    async with NatsCluster(tmp_path / "cluster", size=2, auth=True) as cluster:
        await cluster.wait_for_meta_leader()
        first = cluster.admin_url.split(",")[0]
        errors: list[str] = []
        reconnected: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(repr(e))

        async def on_reconnected() -> None:
            reconnected.append("yes")

        nc = await connect(
            [first],
            name="told-of",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            error_cb=on_error,
            reconnected_cb=on_reconnected,
        )
        try:

            async def told() -> None:
                assert nc.discovered_servers, "the cluster told of no other server"

            await assert_eventually(told, timeout=10, interval=0.1)
            await cluster.kill_node(0)

            async def back() -> None:
                assert reconnected, errors
                await nc.flush(timeout=2)

            await assert_eventually(back, timeout=20, interval=0.2)
            assert not [e for e in errors if "Authorization" in e], errors
        finally:
            await nc.close()
