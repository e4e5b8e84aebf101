"""Agency as an MCP server: the official `mcp` client against `/mcp` on a running system."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from agency.services.api.app import create_app
from agency.services.api.server import run_api
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.mcp.conftest import ADMIN, System, Tenant, call, mcp_session, new_tenant, refusal

TOOLS = {
    "list_agencies",
    "list_blueprints",
    "create_thread",
    "invoke_and_wait",
    "get_state",
    "approve",
    "cancel",
    "terminate",
}


def tool_call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def thread(session: ClientSession, caller: Tenant, agent_type: str = "worker") -> str:
    created = await call(session, "create_thread", agencyId=caller.agency, agentType=agent_type)
    return str(created["id"])


async def test_lists_the_agency_tools_with_typed_input_schemas(caller: Tenant) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        listing = await session.list_tools()
        tools = {tool.name: tool for tool in listing.tools}
        assert set(tools) == TOOLS
        invoke = tools["invoke_and_wait"].input_schema
        assert invoke["type"] == "object"
        assert set(invoke["required"]) == {"agencyId", "threadId", "message"}
        assert invoke["properties"]["waitSeconds"]["maximum"] == 300
        assert invoke["additionalProperties"] is False
        assert tools["get_state"].annotations is not None
        assert tools["get_state"].annotations.read_only_hint is True
        assert tools["invoke_and_wait"].output_schema is not None


async def test_lists_agencies_and_blueprints_and_creates_a_thread(caller: Tenant) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        agencies = await call(session, "list_agencies")
        assert [a["id"] for a in agencies["agencies"]] == [caller.agency]
        blueprints = await call(session, "list_blueprints", agencyId=caller.agency)
        names = {b["name"] for b in blueprints["blueprints"]}
        assert {"worker", "approver"} <= names

        created = await call(
            session,
            "create_thread",
            agencyId=caller.agency,
            agentType="worker",
            metadata={"from": "mcp"},
        )
        assert created["agentType"] == "worker" and created["agencyId"] == caller.agency
        async with caller.http() as http:
            r = await http.get(f"/agency/{caller.agency}/agents")
        assert [t["id"] for t in r.json()] == [created["id"]]


async def test_invoke_and_wait_answers_the_completed_run_and_its_last_message(
    caller: Tenant,
) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        key = "mcp-run-" + caller.agency
        caller.llm.script(key, [
            ScriptStep(tool_calls=[tool_call("lookup", word="agent")]),
            ScriptStep(content="An agent acts for someone."),
        ])  # fmt: skip
        thread_id = await thread(session, caller)

        outcome = await call(
            session, "invoke_and_wait", agencyId=caller.agency, threadId=thread_id, message=key
        )

        assert outcome["status"] == "completed"
        assert outcome["lastMessage"] == "An agent acts for someone."
        assert outcome["pendingApproval"] == []
        state = await call(session, "get_state", agencyId=caller.agency, threadId=thread_id)
        assert state["run"]["runId"] == outcome["runId"]
        roles = [m["role"] for m in state["state"]["messages"]]
        assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_client_of_the_2026_revision_runs_an_agent_too(caller: Tenant) -> None:
    key = "mcp-modern-" + caller.agency
    caller.llm.script(key, [ScriptStep(content="Hello from the new revision.")])
    async with mcp_session(caller.url, caller.auth, era="discover") as session:
        assert session.discover_result is not None
        assert session.protocol_version == "2026-07-28"
        assert session.instructions is not None and "invoke_and_wait" in session.instructions
        listing = await session.list_tools()
        assert {tool.name for tool in listing.tools} == TOOLS
        thread_id = await thread(session, caller)
        outcome = await call(
            session, "invoke_and_wait", agencyId=caller.agency, threadId=thread_id, message=key
        )
    assert outcome["status"] == "completed"
    assert outcome["lastMessage"] == "Hello from the new revision."


async def test_invoke_and_wait_reports_the_runs_progress_while_it_waits(caller: Tenant) -> None:
    key = "mcp-progress-" + caller.agency
    caller.llm.script(key, [
        ScriptStep(tool_calls=[tool_call("lookup", word="slow")]),
        ScriptStep(content="Took a while.", delay_ms=1000),
    ])  # fmt: skip
    heard: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, message))

    async with mcp_session(caller.url, caller.auth) as session:
        thread_id = await thread(session, caller)
        outcome = await call(
            session,
            "invoke_and_wait",
            progress,
            agencyId=caller.agency,
            threadId=thread_id,
            message=key,
        )
    assert outcome["status"] == "completed"
    assert heard and all((m or "").startswith("run running, step ") for _, m in heard)
    assert [n for n, _ in heard] == list(range(1, len(heard) + 1))


async def test_invoke_with_the_same_idempotency_key_answers_the_same_run(caller: Tenant) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        key = "mcp-once-" + caller.agency
        caller.llm.script(key, [ScriptStep(content="once")])
        thread_id = await thread(session, caller)
        args = {"agencyId": caller.agency, "threadId": thread_id, "message": key}
        first = await call(session, "invoke_and_wait", idempotencyKey="k-1", **args)
        again = await call(session, "invoke_and_wait", idempotencyKey="k-1", **args)
        assert first["status"] == again["status"] == "completed"
        assert first["runId"] == again["runId"]


async def test_a_run_that_needs_approval_pauses_then_completes_once_approved(
    caller: Tenant,
) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        key = "mcp-hitl-" + caller.agency
        caller.llm.script(key, [
            ScriptStep(tool_calls=[tool_call("lookup", word="guarded")]),
            ScriptStep(content="Looked it up, with your approval."),
        ])  # fmt: skip
        thread_id = await thread(session, caller, "approver")

        paused = await call(
            session, "invoke_and_wait", agencyId=caller.agency, threadId=thread_id, message=key
        )
        assert paused["status"] == "paused" and paused["reason"] == "hitl"
        (pending,) = paused["pendingApproval"]
        assert pending["name"] == "lookup" and pending["args"] == {"word": "guarded"}

        done = await call(
            session, "approve", agencyId=caller.agency, threadId=thread_id, runId=paused["runId"]
        )
        assert done["runId"] == paused["runId"]
        assert done["status"] == "completed" and done["pendingApproval"] == []
        assert done["lastMessage"] == "Looked it up, with your approval."
        state = await call(session, "get_state", agencyId=caller.agency, threadId=thread_id)
        tool_messages = [m for m in state["state"]["messages"] if m["role"] == "tool"]
        assert tool_messages[0]["content"] == "definition of guarded"


async def test_cancel_stops_a_running_run(caller: Tenant) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        key = "mcp-cancel-" + caller.agency
        caller.llm.script(key, [ScriptStep(content="too slow", delay_ms=10_000)])
        thread_id = await thread(session, caller)
        started = await call(
            session,
            "invoke_and_wait",
            agencyId=caller.agency,
            threadId=thread_id,
            message=key,
            waitSeconds=0.5,
        )
        assert started["status"] == "running"

        canceled = await call(
            session, "cancel", agencyId=caller.agency, threadId=thread_id, reason="changed my mind"
        )
        assert canceled["runId"] == started["runId"]
        assert canceled["status"] == "canceled"
        assert "changed my mind" in (canceled["reason"] or "")


async def test_errors_come_back_as_tool_errors_saying_what_is_wrong(
    caller: Tenant, mcp_system: System
) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        unknown = await refusal(
            session, "get_state", agencyId=caller.agency, threadId="01JDXXXXXXXXXXXXXXXXXXXXXX"
        )
        assert "not found" in unknown or "no agent thread" in unknown
        assert "HTTP 404" in unknown

        missing = await refusal(session, "invoke_and_wait", agencyId=caller.agency)
        assert "invalid arguments for invoke_and_wait" in missing and "threadId" in missing

        wrong_type = await refusal(
            session, "create_thread", agencyId=caller.agency, agentType="nobody"
        )
        assert "unknown agentType 'nobody'" in wrong_type

        bad_id = await refusal(session, "approve", agencyId=caller.agency, threadId="a.>")
        assert "threadId" in bad_id and "only letters, digits" in bad_id

        idle = await thread(session, caller)
        nothing_to_cancel = await refusal(session, "cancel", agencyId=caller.agency, threadId=idle)
        assert "has no active run" in nothing_to_cancel and "HTTP 409" in nothing_to_cancel

        ended = await call(
            session, "terminate", agencyId=caller.agency, threadId=idle, reason="wrapped up"
        )
        assert ended == {"threadId": idle, "status": "terminating"}

        async def refused() -> None:
            answer = await refusal(
                session, "invoke_and_wait", agencyId=caller.agency, threadId=idle, message="hi"
            )
            assert "is terminated (wrapped up)" in answer and "HTTP 409" in answer

        await assert_eventually(refused)

        # Another tenant's thread is not found, exactly like one that does not exist.
        other = await new_tenant(mcp_system)
        async with mcp_session(other.url, {"Authorization": f"Bearer {other.key}"}) as theirs:
            foreign = await refusal(theirs, "get_state", agencyId=caller.agency, threadId=idle)
        assert "HTTP 404" in foreign


async def test_a_wrong_key_is_refused_before_mcp(mcp_system: System) -> None:
    wrong = {"Authorization": "Bearer ak_01jdxxxxxxxxxxxxxxxxxxxxxx_not-a-key"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=mcp_system.url, timeout=10) as http:
        for headers in (wrong, {}):
            r = await http.post("/mcp", json=body, headers={**headers, **accept})
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"].startswith("Bearer resource_metadata=")
            error = r.json()["error"]
            assert error["message"].startswith("missing or invalid credentials")

        admin = {"Authorization": f"Bearer {ADMIN}"}
        r = await http.post("/mcp", json=body, headers={**admin, **accept})
        assert r.status_code == 403, r.text
        assert "acts for no tenant" in r.json()["error"]["message"]

    with pytest.raises(ExceptionGroup) as refused:
        async with mcp_session(mcp_system.url, wrong):
            pass
    (error,) = refused.value.exceptions
    while isinstance(error, ExceptionGroup):
        (error,) = error.exceptions
    assert isinstance(error, MCPError)
    assert error.error.message.startswith("missing or invalid credentials")


async def test_a_server_stopping_answers_a_waiting_call_and_stops_in_time(
    mcp_system: System, caller: Tenant
) -> None:
    key = "mcp-stop-" + caller.agency
    caller.llm.script(key, [ScriptStep(content="too slow", delay_ms=10_000)])
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(run_api(mcp_system.deps, "127.0.0.1", 0, stop, started.set_result))
    url = await asyncio.wait_for(asyncio.shield(started), timeout=10)
    async with mcp_session(url, caller.auth) as session:
        thread_id = await thread(session, caller)
        args = {"agencyId": caller.agency, "threadId": thread_id, "message": key}
        waiting = asyncio.create_task(call(session, "invoke_and_wait", waitSeconds=120, **args))

        async def running() -> None:
            async with caller.http() as http:
                r = await http.get(f"/agency/{caller.agency}/agent/{thread_id}/state")
            assert r.json()["run"]["status"] == "running"

        await assert_eventually(running, timeout=10)
        stop.set()
        outcome = await asyncio.wait_for(waiting, timeout=5)
    assert outcome["status"] == "running"
    await asyncio.wait_for(server, timeout=10)


async def test_outside_the_apps_lifespan_mcp_answers_503(
    mcp_system: System, caller: Tenant
) -> None:
    app = create_app(mcp_system.deps)  # built, never started: its lifespan has not run
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {**caller.auth, "Accept": "application/json, text/event-stream"}
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        r = await http.post("/mcp", json=body, headers=headers)
    assert r.status_code == 503
    assert r.json()["error"]["message"] == "the MCP server is not running; retry shortly"
