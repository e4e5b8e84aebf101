"""The default tenant of `agency up`: a first start cut short leaves a system that starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nats.errors
import pytest

from agency.infra.jetstream.connection import Bus
from agency.services.cli.bootstrap import ensure_default_tenant, load_credentials
from tests.api.conftest import Api


async def test_a_first_start_cut_short_after_minting_the_key_creates_the_tenant_next_time(
    api: Api, nats_url: str, tmp_path: Path
) -> None:
    # The first start dies as it sends the create command: the key is already saved.
    gone = await Bus(nats_url, name="crashing").connect()
    await gone.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await ensure_default_tenant(
            dataclasses.replace(api.deps, bus=gone), load_credentials(tmp_path), tmp_path
        )
    saved = load_credentials(tmp_path)
    assert saved.tenant_id == "default" and saved.api_key

    # The next start sends the same command again and the key works.
    created = await ensure_default_tenant(api.deps, saved, tmp_path)
    assert created == saved
    # And every start after that finds it as it is.
    assert await ensure_default_tenant(api.deps, load_credentials(tmp_path), tmp_path) == saved
