"""A server of the store tests' own, for a log provisioned otherwise than the shared one's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agency.infra.launch import NatsServer


@pytest.fixture
async def fresh_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A server of its own: the shared one's log is provisioned with one partition."""
    async with NatsServer(tmp_path / "nats", sync_interval="default") as server:
        yield server
