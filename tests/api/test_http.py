"""The HTTP API over real HTTP: auth, commands, bad input, tenant isolation, docs."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import replace

import httpx
import pytest

from agency.contracts.codec import decode_command
from agency.contracts.commands import ApproveToolCalls, CancelRun, CommandEnvelope, InvokeThread
from agency.contracts.ids import is_valid_token
from agency.contracts.subjects import COMMANDS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.services.api.auth import UNAUTHORIZED
from tests.api.conftest import (
    MAX_BODY,
    STATIC_AGENT,
    Api,
    Tenant,
    Thread,
    create_agency,
    create_thread,
    paused_for_approval,
    running_api,
)
from tests.helpers import assert_eventually

PUBLIC = {"/healthz", "/readyz"}
ROUTES = {
    "/agencies": {"get", "post"},
    "/agency/{agencyId}/blueprints": {"get", "post"},
    "/agency/{agencyId}/agents": {"get", "post"},
    "/agency/{agencyId}/agent/{threadId}/invoke": {"post"},
    "/agency/{agencyId}/agent/{threadId}/state": {"get"},
    "/agency/{agencyId}/agent/{threadId}/events": {"get"},
    "/agency/{agencyId}/agent/{threadId}/stream": {"get"},
    "/agency/{agencyId}/agent/{threadId}/approve": {"post"},
    "/agency/{agencyId}/agent/{threadId}/cancel": {"post"},
    "/tenants": {"post"},
    "/usage": {"get"},
    "/keys": {"get", "post"},
    "/keys/{keyId}": {"delete"},
    "/keys/{keyId}/rotate": {"post"},
    "/tenants/{tenantId}/keys": {"get", "post"},
    "/tenants/{tenantId}/keys/{keyId}": {"delete"},
    "/tenants/{tenantId}/keys/{keyId}/rotate": {"post"},
}


async def last_command(bus: Bus, tenant: str, verb: str) -> CommandEnvelope:
    msg = await bus.js.get_msg(COMMANDS_STREAM, subject=f"tenant.{tenant}.cmd.runtime.{verb}")
    assert msg.data is not None
    return decode_command(msg.data)


async def commands_stored(bus: Bus, tenant: str, verb: str) -> int:
    subject = f"tenant.{tenant}.cmd.runtime.{verb}"
    info = await bus.js.stream_info(COMMANDS_STREAM, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


# --- auth -------------------------------------------------------------------------------


async def test_every_protected_route_answers_401_without_or_with_a_wrong_credential(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    wrong_secret = thread_a.tenant.key[:-1] + ("A" if thread_a.tenant.key[-1] != "A" else "B")
    credentials = [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer ak_01abc_notakey"},
        {"Authorization": f"Bearer {wrong_secret}"},
        {"X-SECRET": "nope"},
    ]
    checked = 0
    for template, item in schema["paths"].items():
        if template in PUBLIC:
            continue
        path = template.replace("{agencyId}", thread_a.agency_id)
        path = path.replace("{threadId}", thread_a.thread_id)
        path = path.replace("{seq}", "1")
        for method in item:
            for headers in credentials:
                r = await client.request(method.upper(), path, headers=headers, json={})
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.json() == {"error": UNAUTHORIZED, "status": 401}
                checked += 1
    assert checked >= sum(len(m) for m in ROUTES.values()) * len(credentials)


async def test_openapi_lists_every_route_and_the_docs_page_is_public(
    client: httpx.AsyncClient,
) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    listed = {path: set(item) for path, item in schema["paths"].items()}
    for path, methods in ROUTES.items():
        assert methods <= listed.get(path, set()), path
    docs = await client.get("/schema", follow_redirects=True)
    assert docs.status_code == 200 and "html" in docs.headers["content-type"]


async def test_admin_creates_a_tenant_whose_key_works_at_once(
    client: httpx.AsyncClient, api: Api
) -> None:
    r = await client.post("/tenants", json={"name": "acme"}, headers=api.admin)
    assert r.status_code == 201, r.text
    body = r.json()
    api.tenants.append(body["tenantId"])
    assert body["apiKey"].startswith("ak_") and is_valid_token(body["tenantId"])
    listed = await client.get("/agencies", headers={"Authorization": f"Bearer {body['apiKey']}"})
    assert listed.status_code == 200 and listed.json() == []


async def test_admin_and_tenant_credentials_stay_on_their_own_routes(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant
) -> None:
    as_admin = await client.get("/agencies", headers=api.admin)
    assert as_admin.status_code == 403 and "admin" in as_admin.json()["error"]
    as_tenant = await client.post("/tenants", json={"name": "x"}, headers=tenant_a.auth)
    assert as_tenant.status_code == 403 and as_tenant.json()["status"] == 403


async def test_shared_secret_acts_for_the_configured_tenant(
    client: httpx.AsyncClient, api: Api
) -> None:
    assert api.settings.shared_secret and api.settings.shared_secret_tenant
    api.tenants.append(api.settings.shared_secret_tenant)
    secret = {"X-SECRET": api.settings.shared_secret}
    created = await client.post("/agencies", json={"name": "solo"}, headers=secret)
    assert created.status_code == 201, created.text
    listed = await client.get("/agencies", headers=secret)
    assert created.json()["id"] in [a["id"] for a in listed.json()]


async def test_access_token_query_is_accepted_by_the_stream_route_only(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    token = {"access_token": thread_a.tenant.key}
    refused = await client.get("/agencies", params=token)
    assert refused.status_code == 401
    async with client.stream("GET", thread_a.path + "/stream", params=token) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")


# --- creating things ----------------------------------------------------------------------


async def test_created_agency_is_listed(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    r = await client.post(
        "/agencies", json={"name": "ops", "metadata": {"team": "blue"}}, headers=tenant_a.auth
    )
    assert r.status_code == 201, r.text
    agency = r.json()
    assert agency["name"] == "ops" and agency["metadata"] == {"team": "blue"}
    listed = (await client.get("/agencies", headers=tenant_a.auth)).json()
    assert [(a["id"], a["name"]) for a in listed] == [(agency["id"], "ops")]


async def test_created_thread_is_listed(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency_id}/agents", json={"agentType": STATIC_AGENT}, headers=tenant_a.auth
    )
    assert r.status_code == 201, r.text
    thread = r.json()
    assert thread["agentType"] == STATIC_AGENT and thread["agencyId"] == agency_id
    assert thread["createdAt"]
    listed = (await client.get(f"/agency/{agency_id}/agents", headers=tenant_a.auth)).json()
    assert [t["id"] for t in listed] == [thread["id"]]


async def test_saved_blueprint_is_listed_and_can_start_threads(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    config = {"maxSteps": 3, "extra": {"x": 1}}
    spec = {"name": "researcher", "prompt": "Dig.", "tags": ["counted"], "config": config}
    first = await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant_a.auth)
    assert first.status_code == 201, first.text
    assert first.json()["revision"] == 1 and first.json()["config"] == config
    again = await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant_a.auth)
    assert again.json()["revision"] == 2
    names = [
        b["name"]
        for b in (await client.get(f"/agency/{agency_id}/blueprints", headers=tenant_a.auth)).json()
    ]
    assert {"researcher", STATIC_AGENT} <= set(names)
    thread = await client.post(
        f"/agency/{agency_id}/agents", json={"agentType": "researcher"}, headers=tenant_a.auth
    )
    assert thread.status_code == 201, thread.text


async def test_blueprint_with_an_unknown_type_is_refused(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec = {"name": "odd", "type": "triple_ai"}
    r = await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant_a.auth)
    assert r.status_code == 400 and "type" in r.json()["error"]


async def test_create_answers_202_with_the_same_body_when_read_models_lag(
    api: Api, tenant_a: Tenant
) -> None:
    impatient = replace(api.deps, settings=replace(api.settings, read_your_writes_timeout=0.0))
    async with running_api(impatient) as url, httpx.AsyncClient(base_url=url) as client:
        r = await client.post("/agencies", json={"name": "later"}, headers=tenant_a.auth)
        assert r.status_code == 202, r.text
        assert r.json()["name"] == "later" and is_valid_token(r.json()["id"])
        agency_id = r.json()["id"]

        async def listed() -> None:
            agencies = (await client.get("/agencies", headers=tenant_a.auth)).json()
            assert agency_id in [a["id"] for a in agencies]

        await assert_eventually(listed)


async def test_unknown_agent_type_is_refused(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency_id}/agents", json={"agentType": "ghost"}, headers=tenant_a.auth
    )
    assert r.status_code == 404
    assert "unknown agentType 'ghost'" in r.json()["error"] and STATIC_AGENT in r.json()["error"]


async def test_a_thread_may_use_a_static_or_the_agency_s_own_blueprint_in_its_own_agency(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency_id}/blueprints", json={"name": "own-helper"}, headers=tenant_a.auth
    )
    assert r.status_code == 201, r.text
    for agent_type in ("own-helper", STATIC_AGENT):
        r = await client.post(
            f"/agency/{agency_id}/agents", json={"agentType": agent_type}, headers=tenant_a.auth
        )
        assert r.status_code == 201, r.text
        assert r.json()["agentType"] == agent_type
    # Another tenant names the agency, with a static blueprint or the agency's own: the
    # agency is not found, whichever it names.
    for agent_type in ("own-helper", STATIC_AGENT):
        r = await client.post(
            f"/agency/{agency_id}/agents", json={"agentType": agent_type}, headers=tenant_b.auth
        )
        assert r.status_code == 404, r.text
        assert f"agency {agency_id} not found" in r.json()["error"]


# --- invoke, approve, cancel --------------------------------------------------------------


async def test_invoke_answers_the_same_run_for_the_same_key(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    auth, url = thread_a.tenant.auth, thread_a.path + "/invoke"
    message = {"messages": [{"role": "user", "content": "hello"}]}

    async def run_id(body: Mapping[str, object], **headers: str) -> str:
        r = await client.post(url, json=body, headers={**auth, **headers})
        assert r.status_code == 202, r.text
        # No runtime runs in this package: nothing takes the run up.
        assert r.json()["status"] == "pending"
        return str(r.json()["runId"])

    first = await run_id({**message, "idempotencyKey": "k-1"})
    assert first.startswith("run_") and is_valid_token(first)
    assert await run_id({**message, "idempotencyKey": "k-1"}) == first
    assert await run_id(message, **{"Idempotency-Key": "k-1"}) == first
    # The body's key wins over the header's.
    assert await run_id({**message, "idempotencyKey": "k-1"}, **{"Idempotency-Key": "k-2"}) == first
    second = await run_id(message, **{"Idempotency-Key": "k-2"})
    fresh = {await run_id(message), await run_id(message)}
    assert len({first, second, *fresh}) == 4
    # One command per key reached the bus.
    assert await commands_stored(bus, thread_a.tenant.id, "invoke") == 4
    command = (await last_command(bus, thread_a.tenant.id, "invoke")).payload
    assert isinstance(command, InvokeThread)
    assert command.thread_id == thread_a.thread_id and command.messages[0].content == "hello"


async def test_invoke_takes_the_seeds_thread_id_and_agent_type(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    body = {"threadId": thread_a.thread_id, "agentType": STATIC_AGENT, "messages": []}
    r = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 202, r.text
    assert await commands_stored(bus, thread_a.tenant.id, "invoke") == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"threadId": "x"}, "is not the thread of the path", id="other-thread"),
        pytest.param({"agentType": "nope"}, "is not the thread's agent type", id="other-type"),
    ],
)
async def test_invoke_body_naming_another_thread_or_type_is_a_conflict(
    client: httpx.AsyncClient, thread_a: Thread, body: dict[str, object], expected: str
) -> None:
    r = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 409, r.text
    assert expected in r.json()["error"]


async def test_bodies_are_checked_strictly(client: httpx.AsyncClient, thread_a: Thread) -> None:
    auth = thread_a.tenant.auth
    r = await client.post(thread_a.path + "/approve", json={"approved": 0}, headers=auth)
    assert r.status_code == 400 and "Expected `bool`, got `int`" in r.json()["error"]
    r = await client.post(thread_a.path + "/approve", json={"approved": "true"}, headers=auth)
    assert r.status_code == 400 and "Expected `bool`, got `str`" in r.json()["error"]


async def test_the_same_key_on_another_thread_is_another_run(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    other = await create_thread(client, thread_a.tenant)
    body = {"idempotencyKey": "same"}
    a = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    b = await client.post(other.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert a.json()["runId"] != b.json()["runId"]
    assert await commands_stored(bus, thread_a.tenant.id, "invoke") == 2


async def test_a_thread_created_with_messages_starts_its_run_in_the_same_request(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    auth, agency = thread_a.tenant.auth, thread_a.agency_id
    body = {
        "agentType": STATIC_AGENT,
        "messages": [{"role": "user", "content": "hello"}],
        "files": {"notes.md": "# Notes"},
        "idempotencyKey": "first",
    }
    r = await client.post(f"/agency/{agency}/agents", json=body, headers=auth)
    assert r.status_code == 202, r.text
    answer = r.json()
    # No runtime runs in this package: nothing takes the run up.
    assert answer["runStatus"] == "pending" and answer["runId"].startswith("run_")
    assert answer["agentType"] == STATIC_AGENT and answer["agencyId"] == agency
    command = (await last_command(bus, thread_a.tenant.id, "invoke")).payload
    assert isinstance(command, InvokeThread)
    assert (command.thread_id, command.run_id) == (answer["id"], answer["runId"])
    assert command.messages[0].content == "hello" and command.files == {"notes.md": "# Notes"}
    # Its key names the run as an invoke's would: the same key on the thread is that run.
    again = {"messages": [{"role": "user", "content": "hello"}], "idempotencyKey": "first"}
    path = f"/agency/{agency}/agent/{answer['id']}/invoke"
    r = await client.post(path, json=again, headers=auth)
    assert r.status_code == 202 and r.json()["runId"] == answer["runId"]
    # Listed from this process at once, though the create did not wait for the listing.
    listed = await client.get(f"/agency/{agency}/agents", headers=auth)
    assert answer["id"] in {t["id"] for t in listed.json()}


async def test_a_thread_created_without_messages_names_no_run(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    agency, auth = thread_a.agency_id, thread_a.tenant.auth
    body = {"agentType": STATIC_AGENT, "messages": []}
    r = await client.post(f"/agency/{agency}/agents", json=body, headers=auth)
    assert r.status_code == 201, r.text
    assert "runId" not in r.json() and "runStatus" not in r.json()
    assert await commands_stored(bus, thread_a.tenant.id, "invoke") == 0


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({"messages": [{"role": "robot", "content": "x"}]}, "role", id="bad-role"),
        pytest.param({"files": {"a.txt": 1}}, "Expected `str`", id="bad-file"),
        pytest.param({"idempotencyKey": "has space"}, "idempotencyKey", id="bad-key"),
        pytest.param({"strategy": "reject"}, "unknown field `strategy`", id="strategy"),
    ],
)
async def test_a_create_with_a_bad_first_run_gets_400_and_creates_nothing(
    client: httpx.AsyncClient, thread_a: Thread, extra: dict[str, object], expected: str
) -> None:
    agency, auth = thread_a.agency_id, thread_a.tenant.auth
    body = {"agentType": STATIC_AGENT, **extra}
    r = await client.post(f"/agency/{agency}/agents", json=body, headers=auth)
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]
    listed = await client.get(f"/agency/{agency}/agents", headers=auth)
    assert [t["id"] for t in listed.json()] == [thread_a.thread_id]


async def test_approve_sends_modified_calls_with_their_arguments_as_json(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await paused_for_approval(bus, thread_a, "run-1", "call-1")
    body = {
        "approved": True,
        "modifiedToolCalls": [{"id": "call-1", "name": "lookup", "args": {"q": "x", "n": 2}}],
    }
    r = await client.post(thread_a.path + "/approve", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 202 and r.json() == {"status": "accepted", "runId": "run-1"}
    command = (await last_command(bus, thread_a.tenant.id, "approve")).payload
    assert isinstance(command, ApproveToolCalls) and command.approved
    assert command.run_id == "run-1"
    assert command.modified_tool_calls is not None
    call = command.modified_tool_calls[0]
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call-1",
        "lookup",
        {"q": "x", "n": 2},
    )


async def test_cancel_takes_an_optional_reason_and_is_bound_to_the_active_run(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await paused_for_approval(bus, thread_a, "run-1", "call-1")
    bare = await client.post(thread_a.path + "/cancel", headers=thread_a.tenant.auth)
    assert bare.status_code == 202, bare.text
    r = await client.post(
        thread_a.path + "/cancel", json={"reason": "enough"}, headers=thread_a.tenant.auth
    )
    assert r.status_code == 202 and r.json()["runId"] == "run-1"
    command = (await last_command(bus, thread_a.tenant.id, "cancel")).payload
    assert isinstance(command, CancelRun) and command.reason == "enough"
    assert command.run_id == "run-1"


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b'{"name": x}', "not valid JSON: JSON is malformed", id="malformed-json"),
        pytest.param(b'{"name": "x"', "not valid JSON", id="truncated-json"),
        pytest.param(b"", "a JSON request body is required", id="empty-body"),
        pytest.param(b'{"name": "x", "colour": 1}', "unknown field `colour`", id="unknown-field"),
        pytest.param(b'{"name": 3}', "Expected `str`, got `int`", id="wrong-type"),
        pytest.param(b"{}", "missing required field `name`", id="missing-field"),
        pytest.param(b"[1]", "Expected `object`", id="not-an-object"),
        pytest.param(b'{"name": ""}', "length >= 1", id="empty-name"),
    ],
)
async def test_bad_bodies_get_400_saying_what_is_wrong(
    client: httpx.AsyncClient, tenant_a: Tenant, body: bytes, expected: str
) -> None:
    headers = {**tenant_a.auth, "Content-Type": "application/json"}
    r = await client.post("/agencies", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"] and r.json()["status"] == 400


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"messages": [{"role": "robot", "content": "x"}]}, "role", id="bad-role"),
        pytest.param({"messages": [{"role": "user"}]}, "`content`", id="message-without-content"),
        pytest.param({"strategy": "shout"}, "strategy", id="bad-strategy"),
        pytest.param({"files": {"a.txt": 1}}, "Expected `str`", id="bad-file"),
        pytest.param({"idempotencyKey": "has space"}, "idempotencyKey", id="bad-key"),
        pytest.param({"thread": "x"}, "unknown field `thread`", id="unknown-field"),
    ],
)
async def test_bad_invoke_bodies_get_400(
    client: httpx.AsyncClient, thread_a: Thread, body: dict[str, object], expected: str
) -> None:
    r = await client.post(thread_a.path + "/invoke", json=body, headers=thread_a.tenant.auth)
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_oversized_body_gets_413(client: httpx.AsyncClient, thread_a: Thread) -> None:
    huge = {"messages": [{"role": "user", "content": "x" * MAX_BODY}]}
    r = await client.post(thread_a.path + "/invoke", json=huge, headers=thread_a.tenant.auth)
    assert r.status_code == 413
    assert r.json() == {
        "error": f"request body too large: the limit is {MAX_BODY} bytes",
        "status": 413,
    }


@pytest.mark.parametrize(
    "bad", ["a.b", "*", ">", "a b", "x" * 65], ids=["dot", "star", "gt", "space", "long"]
)
async def test_invalid_ids_in_paths_get_400(
    client: httpx.AsyncClient, thread_a: Thread, bad: str
) -> None:
    auth, agency = thread_a.tenant.auth, thread_a.agency_id
    requests = [
        ("GET", f"/agency/{bad}/agents", None),
        ("POST", f"/agency/{bad}/agents", {"agentType": STATIC_AGENT}),
        ("POST", f"/agency/{bad}/blueprints", {"name": "x"}),
        ("POST", f"/agency/{agency}/agent/{bad}/invoke", {}),
        ("POST", f"/agency/{agency}/agent/{bad}/approve", {"approved": True}),
        ("POST", f"/agency/{agency}/agent/{bad}/cancel", {}),
        ("GET", f"/agency/{agency}/agent/{bad}/stream", None),
        ("GET", f"/agency/{agency}/agent/{bad}/state", None),
    ]
    for method, path, body in requests:
        r = await client.request(method, path, json=body, headers=auth)
        assert r.status_code == 400, (method, path, r.text)
        assert "invalid" in r.json()["error"] and "id" in r.json()["error"]


@pytest.mark.parametrize(
    ("params", "headers", "expected"),
    [
        pytest.param({"fromSeq": "x"}, {}, "fromSeq must be an integer from 0", id="text"),
        pytest.param({"fromSeq": "-1"}, {}, "fromSeq must be an integer from 0", id="negative"),
        pytest.param({"fromSeq": ""}, {}, "fromSeq must be an integer from 0", id="empty"),
        pytest.param({"fromSeq": "1e3"}, {}, "fromSeq", id="float"),
        pytest.param({}, {"Last-Event-ID": "abc"}, "Last-Event-ID must be", id="last-event-id"),
    ],
)
async def test_bad_stream_positions_get_400(
    client: httpx.AsyncClient,
    thread_a: Thread,
    params: dict[str, str],
    headers: dict[str, str],
    expected: str,
) -> None:
    r = await client.get(
        thread_a.path + "/stream", params=params, headers={**thread_a.tenant.auth, **headers}
    )
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_bad_idempotency_header_gets_400(client: httpx.AsyncClient, thread_a: Thread) -> None:
    headers = {**thread_a.tenant.auth, "Idempotency-Key": "two words"}
    r = await client.post(thread_a.path + "/invoke", json={}, headers=headers)
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["error"]


async def test_unknown_routes_and_methods_get_json_errors(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    missing = await client.get("/nowhere", headers=tenant_a.auth)
    assert missing.status_code == 404 and missing.json()["status"] == 404
    wrong = await client.delete("/agencies", headers=tenant_a.auth)
    assert wrong.status_code == 405 and "DELETE" in wrong.json()["error"]


# --- tenant isolation ---------------------------------------------------------------------------


async def test_another_tenants_agency_and_thread_are_not_found_on_every_route(
    client: httpx.AsyncClient, thread_a: Thread, tenant_b: Tenant
) -> None:
    agency, path = thread_a.agency_id, thread_a.path
    own_agency = await create_agency(client, tenant_b)
    requests = [
        ("GET", f"/agency/{agency}/blueprints", None),
        ("POST", f"/agency/{agency}/blueprints", {"name": "spy"}),
        ("GET", f"/agency/{agency}/agents", None),
        ("POST", f"/agency/{agency}/agents", {"agentType": STATIC_AGENT}),
        ("GET", path + "/state", None),
        ("GET", path + "/events", None),
        ("GET", path + "/stream", None),
        ("POST", path + "/invoke", {"messages": [{"role": "user", "content": "hi"}]}),
        ("POST", path + "/approve", {"approved": True}),
        ("POST", path + "/cancel", {}),
        # A's thread addressed through B's own agency is not found either.
        ("POST", f"/agency/{own_agency}/agent/{thread_a.thread_id}/invoke", {}),
        ("GET", f"/agency/{own_agency}/agent/{thread_a.thread_id}/stream", None),
    ]
    for method, url, body in requests:
        r = await client.request(method, url, json=body, headers=tenant_b.auth)
        assert r.status_code == 404, (method, url, r.text)
        assert r.json()["status"] == 404
    listed = (await client.get("/agencies", headers=tenant_b.auth)).json()
    assert [a["id"] for a in listed] == [own_agency]


async def test_a_thread_is_not_found_under_another_agency_of_its_tenant(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    other_agency = await create_agency(client, thread_a.tenant)
    path = f"/agency/{other_agency}/agent/{thread_a.thread_id}"
    for method, suffix in [("POST", "/invoke"), ("POST", "/cancel"), ("GET", "/stream")]:
        r = await client.request(method, path + suffix, headers=thread_a.tenant.auth)
        assert r.status_code == 404, (suffix, r.text)


# --- public pages -----------------------------------------------------------------------------


async def test_health_routes_need_no_credential(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


async def test_console_is_served_whole_by_the_app(client: httpx.AsyncClient) -> None:
    """The page, every module it imports (transitively) and every stylesheet come from the
    app itself, with their media types; each vendored library ships its licence."""
    r = await client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert page.lower().startswith("<!doctype html>") and "message.appended" in page
    wanted = re.findall(r'(?:src|href)="(/console/[^"]+)"', page)
    assert any(w.endswith(".js") for w in wanted) and any(w.endswith(".css") for w in wanted)
    seen: set[str] = set()
    while wanted:
        path = wanted.pop()
        if path in seen:
            continue
        seen.add(path)
        asset = await client.get(path)
        assert asset.status_code == 200, path
        kind = asset.headers["content-type"]
        if path.endswith(".js"):
            assert "javascript" in kind, (path, kind)
            ours = path.startswith("/console/js/")
            for spec in re.findall(
                r'^import .*?from "([^"]+)";$', asset.text if ours else "", re.M
            ):
                assert spec.startswith("."), f"{path} imports {spec!r} from outside the app"
                wanted.append(posixpath.normpath(posixpath.join(posixpath.dirname(path), spec)))
        elif path.endswith(".css"):
            assert kind.startswith("text/css"), (path, kind)
    vendored = {p.split("/")[3] for p in seen if p.startswith("/console/vendor/")}
    assert vendored == {"cytoscape", "dompurify", "highlight", "marked"}
    for library in vendored:
        licence = await client.get(f"/console/vendor/{library}/LICENSE")
        assert licence.status_code == 200 and len(licence.text) > 500, library
