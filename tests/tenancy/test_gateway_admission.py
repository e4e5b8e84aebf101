"""The gateway admits a tenant's NATS requests within its share: at the limit, a tenant at
its share is answered 429 with `Retry-After` (the description says the same seconds) before
anything is forwarded, and a tenant holding nothing is still admitted."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.services.gateway.service import Gateway
from agency.services.tenancy.admission import ADMISSION_LIMIT, Admission, AdmissionSettings

# One request in flight at a time for the whole gateway.
ONE = AdmissionSettings(initial_limit=1, min_limit=1, max_limit=1)
FLOOD = 40


@pytest.fixture
async def gateway(bus: Bus) -> AsyncIterator[Admission]:
    admission = Admission(ONE)
    stop = asyncio.Event()
    task = asyncio.create_task(Gateway(bus, admission=admission).run(stop))
    await bus.nc.flush(timeout=5)
    try:
        yield admission
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)


async def _send(bus: Bus, tenant: str) -> Msg:
    # A subject no stream keeps: nothing is stored, the forward is answered at once.
    return await bus.nc.request(f"gw.{tenant}.cmd.probe.ping", b"{}", timeout=10)


def _code(reply: Msg) -> int:
    error = json.loads(reply.data).get("error") or {}
    return int(error.get("code", 0))


async def test_a_flood_past_its_share_is_refused_with_retry_after_and_another_tenant_admitted(
    bus: Bus, gateway: Admission
) -> None:
    flooding, other = "tb" + new_id().lower(), "ta" + new_id().lower()
    replies = await asyncio.gather(*(_send(bus, flooding) for _ in range(FLOOD)))
    refused = [r for r in replies if _code(r) == 429]
    assert refused, [r.data for r in replies]
    for reply in refused:
        description = json.loads(reply.data)["error"]["description"]
        assert description.startswith(ADMISSION_LIMIT), description
        assert reply.headers is not None, description
        wait = reply.headers["Retry-After"]
        assert int(wait) >= 1
        assert re.search(rf"retry in {wait} s$", description), (wait, description)
    # While the flood holds the one place, a tenant holding none is admitted, not refused.
    flood = [asyncio.create_task(_send(bus, flooding)) for _ in range(FLOOD)]
    mine = await _send(bus, other)
    assert _code(mine) != 429, mine.data
    await asyncio.gather(*flood)
    assert gateway.work.total == 0
