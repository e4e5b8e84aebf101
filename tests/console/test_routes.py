"""The routes the console adds, over HTTP: thread trees a page at a time, one thread, its
runs, and re-execution; bad input answers 4xx naming the problem."""

from __future__ import annotations

import httpx

from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import ADMIN, Stack, Tenant
from tests.helpers import assert_eventually, created_tenant


async def setup(http: httpx.AsyncClient, threads: int) -> tuple[str, list[str]]:
    r = await http.post("/agencies", json={"name": "routes"})
    assert r.status_code == 201, r.text
    agency = r.json()["id"]
    ids = []
    for _ in range(threads):
        r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return agency, ids


async def test_thread_trees_page_with_a_cursor(stack: Stack, tenant: Tenant) -> None:
    async with tenant.http(stack) as http:
        agency, ids = await setup(http, 5)
        seen: list[str] = []
        cursor = None
        for _ in range(3):
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            r = await http.get(f"/agency/{agency}/threads", params=params)
            assert r.status_code == 200, r.text
            page = r.json()
            seen.extend(root["id"] for root in page["roots"])
            cursor = page["nextCursor"]
        assert seen == ids[::-1] and cursor is None
        assert page["statusCounts"] == {"idle": 5} and page["agentTypes"] == ["worker"]
        r = await http.get(f"/agency/{agency}/threads", params={"q": ids[2][-12:].lower()})
        assert [root["id"] for root in r.json()["roots"]] == [ids[2]]


async def test_thread_trees_refuse_bad_filters_and_foreign_agencies(
    stack: Stack, tenant: Tenant
) -> None:
    async with tenant.http(stack) as http:
        agency, _ = await setup(http, 0)
        for params, problem in [
            ({"status": "sleeping"}, "status must be one of"),
            ({"limit": "0"}, "limit must be an integer from 1 to 1000"),
            ({"q": "x" * 65}, "q must be at most 64 characters"),
        ]:
            r = await http.get(f"/agency/{agency}/threads", params=params)
            assert r.status_code == 400 and problem in r.json()["error"], (params, r.text)
        r = await http.get(f"/agency/{agency}/threads", params={"cursor": "nosuchthread"})
        assert r.status_code == 404 and "no root thread" in r.json()["error"]
    async with httpx.AsyncClient(base_url=stack.url, timeout=20) as anonymous:
        r = await anonymous.get(f"/agency/{agency}/threads")
        assert r.status_code == 401
    other = await other_tenant(stack)
    async with other.http(stack) as http:
        r = await http.get(f"/agency/{agency}/threads")
        assert r.status_code == 404


async def other_tenant(stack: Stack) -> Tenant:
    async with httpx.AsyncClient(base_url=stack.url, timeout=20) as admin:
        key, tenant_id, _ = await created_tenant(admin, ADMIN, "other")
        return Tenant(id=tenant_id, key=key)


async def test_a_thread_its_runs_and_their_usage(stack: Stack, tenant: Tenant) -> None:
    async with tenant.http(stack) as http:
        agency, (thread,) = await setup(http, 1)
        key = "routes-runs-" + thread
        stack.llm.script(key, [ScriptStep(content="short answer")])
        r = await http.post(
            f"/agency/{agency}/agent/{thread}/invoke",
            json={"messages": [{"role": "user", "content": key}]},
        )
        run_id = r.json()["runId"]

        async def finished() -> list[dict[str, object]]:
            runs = (await http.get(f"/agency/{agency}/agent/{thread}/runs")).json()
            assert runs and runs[0]["status"] == "completed", runs
            return list(runs)

        (run,) = await assert_eventually(finished, timeout=20)
        assert run["runId"] == run_id and run["step"] == 1
        assert isinstance(run["inputTokens"], int) and run["outputTokens"] > 0
        view = (await http.get(f"/agency/{agency}/agent/{thread}")).json()
        assert view["id"] == thread and view["correlationId"] == thread and view["lastSeq"] > 5
        for path in (f"/agency/{agency}/agent/nosuchthread", f"/agency/{agency}/agent/x/runs"):
            r = await http.get(path)
            assert r.status_code == 404 and "not found" in r.json()["error"], path


async def test_reexecution_of_an_unchanged_thread_is_the_same(stack: Stack, tenant: Tenant) -> None:
    async with tenant.http(stack) as http:
        agency, (thread,) = await setup(http, 1)
        key = "routes-reexec-" + thread
        stack.llm.script(key, [ScriptStep(content="all good")])
        await http.post(
            f"/agency/{agency}/agent/{thread}/invoke",
            json={"messages": [{"role": "user", "content": key}]},
        )

        async def finished() -> None:
            state = (await http.get(f"/agency/{agency}/agent/{thread}/state")).json()
            assert state["run"]["status"] == "completed"

        await assert_eventually(finished, timeout=20)
        r = await http.post(f"/agency/{agency}/agent/{thread}/reexecute", json={"tree": False})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["same"] is True and report["compared"] > 5
        (one,) = report["threads"]
        assert one["divergence"] is None and len(one["recorded"]) == len(one["reexecuted"])
        assert [e["type"] for e in one["recorded"]][-2:] == ["run.completed", "checkpoint.saved"]
        r = await http.post(f"/agency/{agency}/agent/{thread}/reexecute", json={"deep": True})
        assert r.status_code == 400 and "deep" in r.json()["error"]
        r = await http.post(f"/agency/{agency}/agent/nosuchthread/reexecute")
        assert r.status_code == 404
