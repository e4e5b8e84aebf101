"""The API's walls, tested over real HTTP as a hostile tenant would: no id the caller does
not own names an object (404), and no request, however malformed, answers 5xx."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import assert_eventually
from tests.security.conftest import ADMIN_AUTH, Tenant

DEPTH_LIMIT = "nested deeper than 64 levels"
ADMIN_PREFIXES = ("/tenants", "/dlq", "/metrics")


def not_found(r: httpx.Response) -> None:
    assert r.status_code == 404, (r.request.method, r.request.url.path, r.status_code, r.text)
    assert r.json() == {"error": r.json()["error"], "status": 404}


async def a_schedule(http: httpx.AsyncClient, owner: Tenant) -> str:
    """A cron schedule of the owner's agency, once it is recorded."""
    body = {"name": "daily", "cron": "0 9 * * *", "message": "hi", "agent": "worker"}
    r = await http.post(f"/agency/{owner.agency}/schedules", json=body, headers=owner.auth)
    assert r.status_code == 202, r.text
    schedule = str(r.json()["id"])

    async def listed() -> None:
        r = await http.get(f"/agency/{owner.agency}/schedules", headers=owner.auth)
        assert schedule in [s["id"] for s in r.json()], r.text

    await assert_eventually(listed, timeout=15)
    return schedule


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        pytest.param("GET", "", None, id="workflow"),
        pytest.param("GET", "/channel", None, id="channel"),
        pytest.param("GET", "/documents", None, id="documents"),
        pytest.param("GET", "/proposals", None, id="proposals"),
        pytest.param("GET", "/inbox/worker", None, id="inbox"),
        pytest.param("POST", "/stop", {}, id="stop"),
        pytest.param("POST", "/messages", {"content": "hello"}, id="post"),
        pytest.param("POST", "/messages", {"content": "hi", "to": ["worker"]}, id="post-to"),
    ],
)
async def test_the_global_workflow_of_another_tenants_agency_is_not_found(
    http: httpx.AsyncClient,
    tenant_a: Tenant,
    tenant_b: Tenant,
    method: str,
    suffix: str,
    body: dict[str, Any] | None,
) -> None:
    path = f"/agency/{tenant_a.agency}/workflows/global{suffix}"
    not_found(await http.request(method, path, json=body, headers=tenant_b.auth))
    # An agency nobody has is not found either; the caller's own `@global` reads.
    not_found(await http.get("/agency/nosuchagency/workflows/global", headers=tenant_b.auth))
    own = await http.get(f"/agency/{tenant_b.agency}/workflows/global", headers=tenant_b.auth)
    assert own.status_code in (200, 404), own.text  # 404 until it has a member: no read row


async def test_the_callers_own_global_channel_reads_before_first_use(
    http: httpx.AsyncClient, tenant_b: Tenant
) -> None:
    r = await http.get(f"/agency/{tenant_b.agency}/workflows/global/channel", headers=tenant_b.auth)
    assert r.status_code == 200, r.text
    assert r.json()["messages"] == []


async def test_removing_a_schedule_the_agency_does_not_have_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    schedule = await a_schedule(http, tenant_a)
    for agency in (tenant_b.agency, tenant_a.agency):
        r = await http.post(f"/agency/{agency}/schedules/{schedule}/remove", headers=tenant_b.auth)
        not_found(r)
    r = await http.post(
        f"/agency/{tenant_b.agency}/schedules/sch_nosuchschedule/remove", headers=tenant_b.auth
    )
    not_found(r)
    # The owner removes it.
    r = await http.post(
        f"/agency/{tenant_a.agency}/schedules/{schedule}/remove", headers=tenant_a.auth
    )
    assert r.status_code == 202, r.text


async def test_a_schedule_of_another_agency_of_the_same_tenant_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    schedule = await a_schedule(http, tenant_a)
    r = await http.post("/agencies", json={"name": "other"}, headers=tenant_a.auth)
    other = r.json()["id"]
    r = await http.post(f"/agency/{other}/schedules/{schedule}/remove", headers=tenant_a.auth)
    not_found(r)


async def test_a_langgraph_thread_awaiting_its_first_run_is_its_tenants_only(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    r = await http.post("/langgraph/threads", json={}, headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    thread = r.json()["thread_id"]
    r = await http.get(f"/langgraph/threads/{thread}", headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["status"] == "idle", r.text
    for path in ("", "/state"):
        not_found(await http.get(f"/langgraph/threads/{thread}{path}", headers=tenant_b.auth))
    r = await http.post(f"/langgraph/threads/{thread}/history", json={}, headers=tenant_b.auth)
    not_found(r)
    run = {"assistant_id": "worker", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    r = await http.post(f"/langgraph/threads/{thread}/runs", json=run, headers=tenant_b.auth)
    not_found(r)


async def test_a_langgraph_thread_create_naming_another_tenants_agency_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    headers = {**tenant_b.auth, "x-agency-id": tenant_a.agency}
    not_found(await http.post("/langgraph/threads", json={}, headers=headers))


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def _body_routes(http: httpx.AsyncClient) -> list[tuple[str, str]]:
    """Every (method, path) of the OpenAPI document with a request body, and LangGraph's."""
    doc = (await http.get("/schema/openapi.json")).json()
    routes = [
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "requestBody" in op
    ]
    langgraph = ["/assistants/search", "/threads", "/threads/search", "/runs", "/runs/wait",
                 "/threads/{thread_id}/history", "/threads/{thread_id}/runs"]  # fmt: skip
    routes += [("POST", "/langgraph" + p) for p in langgraph]
    return routes


def _filled(path: str, owner: Tenant) -> str:
    for name in ("{agencyId}", "{tenantId}"):
        path = path.replace(name, owner.agency if name == "{agencyId}" else owner.id)
    for name in ("{threadId}", "{thread_id}", "{requestId}", "{name}", "{workflow}",
                 "{scheduleId}", "{keyId}", "{seq}"):  # fmt: skip
        path = path.replace(name, "x1")
    return path


@pytest.mark.parametrize("depth", [65, 1_000, 100_000])
async def test_json_nested_beyond_the_limit_is_refused_on_every_body_route(
    http: httpx.AsyncClient, tenant_b: Tenant, depth: int
) -> None:
    routes = await _body_routes(http)
    assert len(routes) > 20
    for method, path in routes:
        auth = ADMIN_AUTH if path.startswith(ADMIN_PREFIXES) else tenant_b.auth
        headers = {**auth, "content-type": "application/json"}
        r = await http.request(
            method, _filled(path, tenant_b), content=nested(depth), headers=headers
        )
        assert r.status_code == 400, (method, path, r.status_code, r.text)
        assert DEPTH_LIMIT in r.json()["error"], (method, path, r.text)


async def test_json_nested_within_the_limit_is_accepted(
    http: httpx.AsyncClient, tenant_b: Tenant
) -> None:
    extra: Any = "leaf"
    for _ in range(60):
        extra = {"k": extra}
    spec = {"name": "deep", "prompt": "p", "config": {"extra": extra}}
    r = await http.post(f"/agency/{tenant_b.agency}/blueprints", json=spec, headers=tenant_b.auth)
    assert r.status_code in (201, 202), r.text


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"name": "\xff\xfe"}', id="in-a-string"),
        pytest.param(b'{"na\xc3me": "x"}', id="in-a-key"),
        pytest.param(b"\xef\xbb\xbf{}", id="a-bom"),
        pytest.param(b'{"name": "\xed\xa0\x80"}', id="a-surrogate"),
    ],
)
async def test_a_body_that_is_not_utf8_is_refused(
    http: httpx.AsyncClient, tenant_b: Tenant, body: bytes
) -> None:
    headers = {**tenant_b.auth, "content-type": "application/json"}
    for path in ("/agencies", f"/agency/{tenant_b.agency}/blueprints", "/langgraph/threads"):
        r = await http.post(path, content=body, headers=headers)
        assert r.status_code == 400, (path, r.status_code, r.text)


@pytest.mark.parametrize(
    ("path", "auth"),
    [
        pytest.param("/console/index.html%00.js", False, id="console-nul"),
        pytest.param("/console/%FF%FE.js", False, id="console-not-utf8"),
        pytest.param("/console/%C0%AE%C0%AE/index.html", False, id="console-overlong"),
        pytest.param("/console/" + "a" * 5000 + ".js", False, id="console-long-name"),
        pytest.param("/console/%2e%2e/%2e%2e/pyproject.toml", False, id="console-dot-dot"),
        pytest.param("/agency/a%00b/agents", True, id="api-nul"),
        pytest.param("/agency/%FF/agents", True, id="api-not-utf8"),
        pytest.param("/langgraph/threads/a%00", True, id="langgraph-nul"),
    ],
)
async def test_a_path_with_nul_or_not_utf8_is_refused(
    http: httpx.AsyncClient, tenant_b: Tenant, path: str, auth: bool
) -> None:
    r = await http.get(path, headers=tenant_b.auth if auth else {})
    assert r.status_code in (400, 404), (r.status_code, r.text)
    assert r.json()["status"] == r.status_code


async def test_a_workflow_definition_nested_too_deep_is_refused(
    http: httpx.AsyncClient, tenant_b: Tenant
) -> None:
    for definition in ("a: " + "[" * 20_000 + "]" * 20_000, "agents: " + "{a: " * 200 + "}" * 200):
        r = await http.post(
            f"/agency/{tenant_b.agency}/workflows",
            json={"definition": definition},
            headers=tenant_b.auth,
        )
        assert r.status_code == 400, r.text
        assert DEPTH_LIMIT.replace("nested", "YAML nested") in r.json()["error"], r.text


async def test_a_workflow_definition_expanding_aliases_beyond_the_limit_is_refused(
    http: httpx.AsyncClient, tenant_b: Tenant
) -> None:
    """Each line ten aliases of the one before: 10^9 values from a few hundred bytes."""
    lines = ['  - &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"  - &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    r = await http.post(
        f"/agency/{tenant_b.agency}/workflows",
        json={
            "definition": "description:\n"
            + "\n".join(lines)
            + "\nname: bomb\nagents: {w: worker}\n"
        },
        headers=tenant_b.auth,
    )
    assert r.status_code == 400, r.text
    assert "more than 100000 values once its aliases are expanded" in r.json()["error"], r.text


PROTOCOL_BODY_ROUTES = (
    "/a2a",
    "/a2a/{agencyId}/worker",
    "/a2a/{agencyId}/worker/message:send",
    "/a2a/{agencyId}/worker/message:stream",
    "/a2a/{agencyId}/worker/tasks/x1/pushNotificationConfigs",
    "/agui/{agencyId}/worker",
    "/aisdk/{agencyId}/worker/chat",
)


@pytest.mark.parametrize("depth", [65, 10_000])
async def test_json_nested_beyond_the_limit_is_refused_on_every_protocol_route(
    http: httpx.AsyncClient, tenant_b: Tenant, depth: int
) -> None:
    """The protocols' own routes (outside the OpenAPI document) answer their refusal in
    their own shape, naming the limit: never a 5xx, never a stream started. `/mcp` is
    decoded by the MCP library, which refuses it as a JSON-RPC error of its own."""
    headers = {
        **tenant_b.auth,
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    answers = {}
    for path in PROTOCOL_BODY_ROUTES:
        r = await http.post(_filled(path, tenant_b), content=nested(depth), headers=headers)
        answers[path] = (r.status_code, r.headers.get("content-type", ""), r.text[:200])
    wrong = {
        path: answer
        for path, answer in answers.items()
        if answer[0] >= 500 or DEPTH_LIMIT not in answer[2] or "event-stream" in answer[1]
    }
    assert not wrong, "\n".join(f"{p}: {a}" for p, a in wrong.items())
    r = await http.post("/mcp", content=nested(depth), headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] in (-32700, -32602), r.text
