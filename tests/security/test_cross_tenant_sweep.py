"""Every route, called by tenant B with tenant A's ids, finds nothing of A's and changes
nothing of A's.

The routes are not listed here: they come from the server's OpenAPI document, from the
LangGraph and AI SDK routers (kept out of the document) and from the MCP server's
`tools/list` (its resources and prompts, A's thread files and blueprints, are tried too). Path
parameters are filled by name with A's ids (and B's own agency id, so B's agency with A's
thread, schedule or workflow is tried too); every combination naming something of A's must
answer 404 (403 on the admin's routes). A route that names no tenant object at all is in
`NAMES_NOTHING`, with why. The WebSocket is tried too. A new path parameter, or a new
route that needs a body, makes the sweep fail until it knows what to fill in.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agency.services.api.aisdk import aisdk_router
from agency.services.api.langgraph.router import langgraph_router
from tests.helpers import assert_eventually
from tests.mcp.conftest import mcp_session
from tests.security.conftest import Tenant, new_tenant

DEFINITION = """
name: review
agents:
  writer: worker
kickoff: "@writer go"
triggers:
  - cron: "0 9 * * *"
    message: "@writer the daily note"
"""
BLUEPRINT = "bp-a"
ADMIN_PREFIXES = ("/tenants", "/dlq", "/metrics")
# Routes whose request names no tenant object: they answer for the caller's own tenant.
NAMES_NOTHING = {
    ("GET", "/healthz"): "public liveness probe",
    ("GET", "/readyz"): "public readiness probe",
    ("GET", "/agencies"): "the caller's own agencies",
    ("POST", "/agencies"): "creates an agency of the caller's",
    ("GET", "/keys"): "the caller's own keys",
    ("POST", "/keys"): "creates a key of the caller's",
    ("GET", "/usage"): "the caller's own totals",
    ("GET", "/budget"): "the caller's own spend budget",
    ("GET", "/retention"): "the caller's own retention",
    ("PUT", "/retention"): "sets the caller's own retention",
    ("GET", "/export"): "the caller's own tenant, as an archive",
    ("GET", "/langgraph/info"): "the server's own description (LangGraph's health check)",
    ("GET", "/langgraph/ok"): "public liveness probe of the LangGraph surface",
    # End-user ids are the tenant's own words: B forgetting A's end user's id forgets B's
    # user of that name (nobody here) and must leave A's thread, tagged with it, whole.
    ("POST", "/users/{endUserId}/forget"): "an end user of the caller's own tenant",
}
# The end user of A's thread (`world_of`), as NAMES_NOTHING's routes name it.
END_USER = "sweep-user@example.com"
# A kind nothing in the sweep makes: no delivery is attempted.
WEBHOOK = {"url": "https://hooks.invalid/agency", "events": ["workflow.proposal"]}
# Routes whose request names no tenant object and needs a body of the caller's own: asked
# with none, each refuses with 400 and names nothing of anyone's.
REFUSED_WITHOUT_BODY = {
    ("POST", "/import"): "writes the archive it is given into the caller's own tenant",
}
STREAM_READ = 4.0  # seconds a stream that answers is read for, at most
READ_BYTES = 64 * 1024


@dataclass(frozen=True)
class World:
    """Tenant A's things, by what names them."""

    owner: Tenant
    thread: str
    run: str
    workflow: str
    schedule: str
    key_id: str
    pending_thread: str  # a LangGraph thread awaiting its first run
    webhook: str


@dataclass(frozen=True)
class Value:
    text: str
    of_a: bool  # names something of A's (else B's own, or nobody's in particular)


async def world_of(http: httpx.AsyncClient, a: Tenant) -> World:
    agency = f"/agency/{a.agency}"
    r = await http.post(f"{agency}/blueprints", json={"name": BLUEPRINT, "prompt": "You help."},
                        headers=a.auth)  # fmt: skip
    assert r.status_code == 201, r.text
    r = await http.post(f"{agency}/agents", json={"agentType": "worker", "endUserId": END_USER},
                        headers=a.auth)  # fmt: skip
    assert r.status_code == 201, r.text
    thread = r.json()["id"]
    body = {"messages": [{"role": "user", "content": "hello"}]}
    r = await http.post(f"{agency}/agent/{thread}/invoke", json=body, headers=a.auth)
    assert r.status_code == 202, r.text
    run = r.json()["runId"]

    async def completed() -> None:
        r = await http.get(f"{agency}/agent/{thread}/state", headers=a.auth)
        assert r.json()["run"]["status"] == "completed", r.text

    await assert_eventually(completed, timeout=30)
    r = await http.post(f"{agency}/workflows", json={"definition": DEFINITION, "tag": "t1"},
                        headers=a.auth)  # fmt: skip
    assert r.status_code == 201, r.text
    workflow = r.json()["id"]

    async def scheduled() -> str:
        r = await http.get(f"{agency}/schedules", headers=a.auth)
        found = [s["id"] for s in r.json() if s["workflowId"] == workflow]
        assert len(found) == 1, r.text
        return str(found[0])

    schedule = await assert_eventually(scheduled, timeout=15)
    r = await http.post("/keys", json={"name": "second"}, headers=a.auth)
    assert r.status_code in (201, 202), r.text
    key_id = r.json()["keyId"]
    r = await http.post("/langgraph/threads", json={}, headers=a.auth)
    assert r.status_code == 200, r.text
    pending = r.json()["thread_id"]
    r = await http.post(f"{agency}/webhooks", json=WEBHOOK, headers=a.auth)
    assert r.status_code == 201, r.text
    return World(a, thread, run, workflow, schedule, key_id, pending, r.json()["id"])


def values(world: World, b: Tenant, name: str, path: str) -> list[Value]:
    """What to put for path parameter `name`: A's ids, and B's own agency."""
    a = world.owner
    langgraph = path.startswith("/langgraph")
    if name == "name" and "/providers/" in path:
        return [Value("openai", False)]  # a provider's name: no one's object
    table: dict[str, list[Value]] = {
        "agencyId": [Value(a.agency, True), Value(b.agency, False)],
        "threadId": [Value(world.thread, True)],
        "thread_id": [Value(world.thread, True)]
        + ([Value(world.pending_thread, True)] if langgraph else []),
        "run_id": [Value(world.run, True)],
        "name": [Value(BLUEPRINT, True)],
        "assistant_id": [Value(BLUEPRINT, True)],
        # `global` is whoever's agency it is in: A's with A's agency, B's own with B's.
        "workflow": [Value(world.workflow, True), Value("review:t1", True), Value("global", False)],
        "member": [Value("writer", False)],
        "scheduleId": [Value(world.schedule, True)],
        "keyId": [Value(world.key_id, True)],
        "webhookId": [Value(world.webhook, True)],
        # No variables request is made here: A's thread is what B must not reach.
        "requestId": [Value("req0", False)],
        "tenantId": [Value(a.id, True)],
        "seq": [Value("1", False)],
        "checkpoint_id": [Value("1", False)],
        "namespace": [Value("x", False)],  # a subgraph's namespace: no one's object
        # The AI SDK's chat: A's blueprint, A's thread as the chat.
        "blueprint": [Value(BLUEPRINT, True)],
        "chatId": [Value(world.thread, True)],
    }
    assert name in table, f"the sweep has no value for path parameter {name!r} ({path})"
    return table[name]


def bodies(world: World) -> dict[tuple[str, str], tuple[Any, bool]]:
    """A valid body per route that needs one, and whether it names something of A's."""
    a = world.owner
    message = {"messages": [{"role": "user", "content": "hi"}]}
    run = {"assistant_id": BLUEPRINT, "input": message}
    run_a = {"agency": a.agency, "agent": "worker", "message": "hi", "timeoutSeconds": 1}
    schedule = {"name": "s", "cron": "0 9 * * *", "message": "hi", "workflow": world.workflow}
    cron = {"assistant_id": BLUEPRINT, "schedule": "0 9 * * *", "input": message}
    return {
        ("POST", "/agencies"): ({"name": "b-own"}, False),
        ("POST", "/tenants"): ({"name": "x"}, False),
        ("POST", "/keys"): ({"name": "b-own"}, False),
        ("POST", "/tenants/{tenantId}/keys"): ({"name": "x"}, False),
        ("POST", "/agency/{agencyId}/blueprints"): ({"name": BLUEPRINT, "prompt": "B's"}, False),
        ("POST", "/agency/{agencyId}/agents"): ({"agentType": BLUEPRINT}, True),
        ("POST", "/agency/{agencyId}/agent/{threadId}/invoke"): (message, False),
        ("POST", "/agency/{agencyId}/agent/{threadId}/approve"): (
            {"approved": True, "runId": world.run}, True),
        ("POST", "/agency/{agencyId}/agent/{threadId}/cancel"): ({"runId": world.run}, True),
        ("POST", "/agency/{agencyId}/agent/{threadId}/terminate"): ({}, False),
        ("POST", "/agency/{agencyId}/agent/{threadId}/fork"): ({"atSeq": 1}, False),
        ("POST", "/agency/{agencyId}/agent/{threadId}/reexecute"): ({}, False),
        ("POST", "/threads/{threadId}/variables/{requestId}"): ({"values": {"X": "y"}}, False),
        ("PUT", "/agency/{agencyId}/blueprints/{name}/settings"): ({"settings": {}}, False),
        ("PUT", "/agency/{agencyId}/budget"): ({"tokens": 1000}, False),
        ("PUT", "/tenants/{tenantId}/budget"): ({"tokens": 1000}, False),
        ("PUT", "/retention"): ({"days": 1}, False),
        ("PUT", "/agency/{agencyId}/retention"): ({"days": 1}, False),
        ("PUT", "/tenants/{tenantId}/retention"): ({"days": 1}, False),
        ("POST", "/agency/{agencyId}/workflows"): ({"definition": DEFINITION, "tag": "t1"}, False),
        ("POST", "/agency/{agencyId}/workflows/{workflow}/messages"): ({"content": "hi"}, False),
        ("POST", "/agency/{agencyId}/workflows/{workflow}/stop"): ({}, False),
        ("POST", "/agency/{agencyId}/schedules"): (schedule, True),
        ("POST", "/agency/{agencyId}/webhooks"): (WEBHOOK, False),
        ("POST", "/run"): (run_a, True),
        ("POST", "/serve"): (run_a, True),
        ("POST", "/langgraph/assistants/search"): ({}, False),
        ("POST", "/langgraph/threads"): ({}, False),
        ("POST", "/langgraph/threads/search"): ({}, False),
        ("POST", "/langgraph/threads/{thread_id}/state/checkpoint"): ({"checkpoint": {}}, False),
        ("POST", "/langgraph/threads/{thread_id}/history"): ({}, False),
        ("POST", "/langgraph/threads/{thread_id}/runs"): (run, False),
        ("POST", "/langgraph/threads/{thread_id}/runs/wait"): (run, False),
        ("POST", "/langgraph/threads/{thread_id}/runs/stream"): (run, False),
        ("POST", "/langgraph/threads/{thread_id}/runs/{run_id}/cancel"): ({}, False),
        ("POST", "/langgraph/runs"): (run, False),
        ("POST", "/langgraph/runs/wait"): (run, False),
        ("POST", "/langgraph/runs/stream"): (run, False),
        ("POST", "/langgraph/assistants"): ({"graph_id": BLUEPRINT}, False),
        ("POST", "/langgraph/assistants/count"): ({}, False),
        ("POST", "/langgraph/assistants/{assistant_id}/versions"): ({}, False),
        ("POST", "/langgraph/assistants/{assistant_id}/latest"): ({"version": 1}, False),
        ("POST", "/langgraph/threads/count"): ({}, False),
        ("POST", "/langgraph/threads/prune"): ({"thread_ids": [world.thread]}, True),
        ("POST", "/langgraph/threads/{thread_id}/copy"): (None, False),
        ("POST", "/langgraph/threads/{thread_id}/state"): ({"values": message}, False),
        ("POST", "/langgraph/threads/{thread_id}/runs/crons"): (cron, False),
        ("POST", "/langgraph/runs/crons"): (cron, False),
        ("POST", "/langgraph/runs/crons/search"): ({}, False),
        ("POST", "/langgraph/runs/crons/count"): ({}, False),
        ("POST", "/langgraph/runs/batch"): ([run], False),
        ("POST", "/langgraph/runs/cancel"): ({"status": "all"}, False),
        ("POST", "/langgraph/store/items/search"): ({}, False),
        ("POST", "/langgraph/store/namespaces"): ({}, False),
        ("POST", "/langgraph/threads/{thread_id}/commands"): (
            {"id": 1, "method": "input.respond",
             "params": {"interrupt_id": "interrupt-of-a", "response": True}}, False),
        ("POST", "/langgraph/threads/{thread_id}/stream/events"): (
            {"channels": ["values", "lifecycle"]}, False),
        ("POST", "/aisdk/{agencyId}/{blueprint}/chat"): (
            {"id": world.thread, "messages": [
                {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}, True),
        ("PUT", "/providers/{name}"): ({"apiKey": "sk-of-b"}, False),
        ("PUT", "/tenants/{tenantId}/providers/{name}"): ({"apiKey": "sk-of-b"}, False),
        ("PUT", "/tenants/{tenantId}/model-policy"): ({"operatorFallback": False}, False),
    }  # fmt: skip


async def routes(http: httpx.AsyncClient) -> list[tuple[str, str, bool]]:
    """(method, path template, whether it takes a body) of every route: the OpenAPI
    document's, LangGraph's and the AI SDK's."""
    doc = (await http.get("/schema/openapi.json")).json()
    found = [
        (method.upper(), path, "requestBody" in op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    for route in [*langgraph_router().routes, *aisdk_router().routes]:
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        found += [(m, path, m == "POST") for m in sorted(route.methods) if m in ("GET", "POST")]
    assert len(found) > 70, found
    return found


async def answer(
    http: httpx.AsyncClient, method: str, url: str, body: Any, headers: dict[str, str]
) -> tuple[int, str]:
    """The status and the start of the body; a stream is read a few seconds at most."""
    kwargs: dict[str, Any] = {"headers": headers}
    if body is not None:
        kwargs["json"] = body
    async with http.stream(method, url, **kwargs) as r:
        text = b""
        try:
            async with asyncio.timeout(STREAM_READ):
                async for chunk in r.aiter_bytes():
                    text += chunk
                    if len(text) >= READ_BYTES:
                        break
        except TimeoutError:
            pass
        return r.status_code, text[:300].decode(errors="replace")


async def snapshot(http: httpx.AsyncClient, world: World) -> dict[str, Any]:
    """What A reads of its own things, with A's key (times of last use left out)."""
    a = world.owner
    agency, thread = f"/agency/{a.agency}", f"/agency/{a.agency}/agent/{world.thread}"
    paths = [
        "/agencies", f"{agency}/blueprints/{BLUEPRINT}", f"{agency}/blueprints",
        f"{agency}/threads", thread, f"{thread}/runs", f"{thread}/events", f"{thread}/state",
        f"{agency}/workflows/{world.workflow}", f"{agency}/workflows/global/channel",
        f"{agency}/schedules", "/keys", f"/langgraph/threads/{world.pending_thread}",
    ]  # fmt: skip
    seen: dict[str, Any] = {}
    for path in paths:
        r = await http.get(path, headers=a.auth)
        assert r.status_code == 200, (path, r.text)
        seen[path] = _without(r.json(), ("lastUsedAt", "last_used_at"))
    seen["events"] = len(seen[f"{thread}/events"])
    return seen


def _without(value: Any, names: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, names) for k, v in value.items() if k not in names}
    if isinstance(value, list):
        return [_without(v, names) for v in value]
    return value


async def test_tenant_b_with_tenant_a_ids_finds_and_changes_nothing_on_any_route(
    http: httpx.AsyncClient,
) -> None:
    a = await new_tenant(http, "a")
    b = await new_tenant(http, "b")
    world = await world_of(http, a)
    before = await snapshot(http, world)
    table = bodies(world)
    problems: list[str] = []
    tried = 0
    for method, path, takes_body in await routes(http):
        if takes_body and (method, path) not in table:
            problems.append(f"{method} {path}: the sweep has no body for it (see `bodies`)")
            continue
        if (method, path) in REFUSED_WITHOUT_BODY:
            status, text = await answer(http, method, path, None, b.auth)
            if status != 400 or a.agency in text or world.thread in text:
                problems.append(f"{method} {path} -> {status} {text}")
            continue
        if (method, path) in NAMES_NOTHING:
            url = path.replace("{endUserId}", END_USER)
            status, text = await answer(http, method, url, table.get((method, path), (None,))[0],
                                        b.auth)  # fmt: skip
            if status >= 300 or a.agency in text or world.thread in text:
                problems.append(f"{method} {path} -> {status} {text}")
            continue
        body, body_of_a = table.get((method, path), (None, False))
        headers = {**b.auth}
        names = re.findall(r"\{(\w+)\}", path)
        if path.startswith("/langgraph"):
            headers["x-agency-id"] = a.agency  # LangGraph names its agency in a header
        named_a = body_of_a or "x-agency-id" in headers
        expected = 403 if path.startswith(ADMIN_PREFIXES) else 404
        choices = [values(world, b, n, path) for n in names]
        for combo in itertools.product(*choices):
            if not (named_a or any(v.of_a for v in combo)):
                continue  # B's own things only
            url = path
            for n, v in zip(names, combo, strict=True):
                url = url.replace("{" + n + "}", v.text)
            tried += 1
            status, text = await answer(http, method, url, body, headers)
            if status != expected:
                problems.append(f"{method} {url} -> {status} (expected {expected}) {text}")
            elif expected == 404 and '"status":404' not in text.replace(" ", ""):
                problems.append(f"{method} {url} -> 404 without the error body: {text}")
    problems += await websocket_problems(http, world, b)
    problems += await mcp_problems(http, world, b)
    after = await snapshot(http, world)
    changed = [k for k in before if before[k] != after[k]]
    assert tried > 100, tried
    assert not problems, "\n".join(problems)
    assert not changed, {k: (before[k], after[k]) for k in changed}


async def websocket_problems(http: httpx.AsyncClient, world: World, b: Tenant) -> list[str]:
    """The WebSocket (OpenAPI cannot describe one) refuses the handshake with 404."""
    problems: list[str] = []
    base = "ws" + str(http.base_url).rstrip("/").removeprefix("http")
    for agency in (world.owner.agency, b.agency):
        url = f"{base}/agency/{agency}/agent/{world.thread}/ws"
        try:
            async with connect(url, additional_headers=b.auth, open_timeout=10):
                problems.append(f"WS {url} was accepted")
        except InvalidStatus as e:
            if e.response.status_code != 404:
                problems.append(f"WS {url} -> {e.response.status_code}")
    return problems


MCP_ARGUMENTS: dict[str, Callable[[World], Any]] = {
    "agencyId": lambda w: w.owner.agency,
    "threadId": lambda w: w.thread,
    "runId": lambda w: w.run,
    "agentType": lambda w: "worker",
    "message": lambda w: "hi",
    "approved": lambda w: True,
    "waitSeconds": lambda w: 0,
}


async def mcp_problems(http: httpx.AsyncClient, world: World, b: Tenant) -> list[str]:
    """Each MCP tool, called by B with A's ids, fails with the API's 404 as a tool error."""
    problems: list[str] = []
    url = str(http.base_url).rstrip("/")
    async with mcp_session(url, b.auth) as session:
        listed = await session.list_tools()
        assert len(listed.tools) >= 5
        for tool in listed.tools:
            properties = tool.input_schema.get("properties", {})
            if not properties:  # names nothing: answers for B's own tenant
                result = await session.call_tool(tool.name, {})
                if result.is_error or world.owner.agency in str(result.content):
                    problems.append(f"mcp {tool.name}: {result.content}")
                continue
            arguments: dict[str, Any] = {}
            for name in [*tool.input_schema.get("required", []), "runId", "approved"]:
                if name in properties:
                    assert name in MCP_ARGUMENTS, f"the sweep has no value for {tool.name}.{name}"
                    arguments[name] = MCP_ARGUMENTS[name](world)
            result = await session.call_tool(tool.name, arguments)
            (text,) = result.content
            assert isinstance(text, types.TextContent)
            if not result.is_error or "(HTTP 404)" not in text.text:
                problems.append(f"mcp {tool.name}({arguments}) -> {text.text[:300]}")
        problems += await mcp_resource_problems(session, world, b)
    return problems


async def mcp_resource_problems(session: ClientSession, world: World, b: Tenant) -> list[str]:
    """A's thread files (resources) and blueprints (prompts): B lists none and reads none."""
    problems: list[str] = []
    files = await session.list_resources()
    prompts = await session.list_prompts()
    named = [*(str(r.uri) for r in files.resources), *(p.name for p in prompts.prompts)]
    problems += [f"mcp lists {n}" for n in named if world.owner.agency in n or world.thread in n]
    for agency in (world.owner.agency, b.agency):
        uri = f"agency://agencies/{agency}/threads/{world.thread}/files/notes.md"
        try:
            read = await session.read_resource(uri)
            problems.append(f"mcp resources/read {uri} -> {read.contents}")
        except MCPError as e:
            if "(HTTP 404)" not in e.error.message:
                problems.append(f"mcp resources/read {uri} -> {e.error.message}")
    name = f"{world.owner.agency}/{BLUEPRINT}"
    try:
        got = await session.get_prompt(name, {"message": "hi"})
        problems.append(f"mcp prompts/get {name} -> {got.messages}")
    except MCPError as e:
        if "unknown prompt" not in e.error.message:
            problems.append(f"mcp prompts/get {name} -> {e.error.message}")
    return problems


async def test_tenant_b_can_neither_delete_nor_list_tenants(http: httpx.AsyncClient) -> None:
    """The admin's tenant routes answer B 403, as the sweep expects of every admin route;
    A stays whole and its key keeps working."""
    a = await new_tenant(http, "a")
    b = await new_tenant(http, "b")
    assert ("DELETE", "/tenants/{tenantId}", False) in await routes(http)
    for method, path in (("DELETE", f"/tenants/{a.id}"), ("GET", "/tenants")):
        status, text = await answer(http, method, path, None, b.auth)
        assert status == 403, (method, path, status, text)
        assert a.id not in text
    mine = await http.get("/agencies", headers=a.auth)
    assert mine.status_code == 200 and a.agency in mine.text
