"""`just bench http`'s client script, run as is against our `/langgraph` routes with tiny
counts: every phase measures and checks its runs (the Aegra side is not installed here)."""

from __future__ import annotations

import httpx

from bench.http import script
from bench.http_client import Counts, Target, measure
from bench.system_ours import AGENT, BLUEPRINT
from tests.langgraph.conftest import LangGraph


async def test_the_http_benchmark_script_measures_our_routes(lg: LangGraph) -> None:
    async with httpx.AsyncClient(base_url=lg.url, timeout=20) as http:
        r = await http.post(
            f"/agency/{lg.agency}/blueprints",
            json=BLUEPRINT,
            headers={"Authorization": f"Bearer {lg.key}"},
        )
        assert r.status_code in (201, 202), r.text
    script(lg.llm, model_ttft_ms=10)
    target = Target(
        name="ours",
        url=f"{lg.url}/langgraph",
        assistant=AGENT,
        api_key=lg.key,
        headers={"x-agency-id": lg.agency},
    )
    counts = Counts(
        sequential=2, concurrent=3, creates=2, resumes=2, ttfts=2, warmup=0, model_ttft_ms=10
    )
    results = (await measure([target], counts))["ours"]
    assert set(results) == {"create", "sequential", "resume", "ttft", "concurrent"}
    assert all(value > 0 for value in results.values()), results
