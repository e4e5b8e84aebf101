"""Fair shares under overload: tenant B floods the API from a process of its own (invokes,
thread creates over REST and LangGraph, messages near the size limit, streams held open)
while tenant A runs its usual load against the fake model. None of A's runs fails, none of
A's requests is refused or answered 503, and B's excess is answered 429 with a
`Retry-After` its message agrees with.

Then the memory the flood took in this process (the API with every service beside it) is
given back: its resident size comes down to within half of what the flood added, or 32 MB
of where it was before, whichever is more. A's latency under the flood is the benchmark's
to measure (`bench/fair_share.py`), not asserted here."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from agency.services.api.memory_relief import rss_mb
from bench.fair_share_load import FloodSummary, calm, client, flooding, prepare
from tests.fairness.conftest import System
from tests.helpers import assert_eventually
from tests.langgraph.conftest import new_tenant

FLOOD_SECONDS = 40.0
CALM_RUNS = 24
CALM_AT_ONCE = 3
# How long the process may take to give memory back once the flood is over (the API waits
# for 5 s without a refusal first).
RELIEF_TIMEOUT = 60.0


async def _flooding(http: httpx.AsyncClient, agency: str) -> None:
    """B's flood is on: B has made threads (or is refused already)."""

    async def started() -> None:
        r = await http.get(f"/agency/{agency}/agents")
        assert r.status_code == 429 or len(r.json()) >= 5, r.text

    await assert_eventually(started, timeout=60, interval=0.5)


async def _peak(done: asyncio.Future[FloodSummary]) -> float:
    """The process's largest resident size until the flood is done."""
    peak = rss_mb()
    while not done.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), timeout=0.5)
        peak = max(peak, rss_mb())
    return peak


async def test_a_flooding_tenant_is_refused_its_excess_and_the_other_tenant_runs_unharmed(
    fair_system: System,
) -> None:
    url = fair_system.url
    key_a, _, _ = await new_tenant(url, "calm")
    key_b, _, _ = await new_tenant(url, "flood")
    async with client(url, key_a, connections=16) as a, client(url, key_b, connections=4) as b:
        agency_a, agency_b = await prepare(a), await prepare(b)
        await calm(a, agency_a, CALM_AT_ONCE, CALM_AT_ONCE)  # what A's load takes, taken
        before = rss_mb()
        async with flooding(url, key_b, agency_b, FLOOD_SECONDS) as flood_done:
            peaking = asyncio.create_task(_peak(flood_done))
            await _flooding(b, agency_b)
            mine = await calm(a, agency_a, CALM_RUNS, CALM_AT_ONCE)
            assert not flood_done.done(), "the flood ended before A's load did"
            flood = await flood_done
            peak = await peaking
    assert mine.failed == [], mine.failed
    assert len(mine.latencies_ms) == CALM_RUNS
    assert mine.count(503) == 0, mine.statuses
    assert mine.count(429) == 0, mine.statuses
    assert not any(key.endswith(("500", "502", "504")) for key in mine.statuses), mine.statuses
    assert flood.count(429) > 0, flood.statuses
    assert flood.retry_after_wrong == 0, flood.examples
    assert flood.count(500) == 0, flood.examples
    print(f"A: {mine.statuses}, p95 {mine.p95():.0f} ms; B: {flood.statuses}")
    allowed = before + max(32.0, (peak - before) / 2)

    async def given_back() -> None:
        assert rss_mb() <= allowed, (before, peak, rss_mb())

    await assert_eventually(given_back, timeout=RELIEF_TIMEOUT, interval=1.0)
    print(f"RSS: before {before:.0f} MB, peak {peak:.0f} MB, after {rss_mb():.0f} MB")
