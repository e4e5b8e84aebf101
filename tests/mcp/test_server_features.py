"""The MCP server beyond its tools, on both revisions a client may speak (2025-11-25 with
`initialize`, 2026-07-28 with `server/discover`): ping, discovery, thread files as
resources, blueprints as prompts, log notifications, and the protected-resource metadata a
client reads on a 401. Driven by the official `mcp` client against a running system."""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable
from urllib.parse import quote

import httpx2
import mcp_types as types
import pytest
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_field_from_www_auth,
    extract_resource_metadata_from_www_auth,
)
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.helpers import assert_eventually
from tests.mcp.conftest import ERAS, Era, System, Tenant, call, mcp_session, new_tenant

TEMPLATE = "agency://agencies/{agencyId}/threads/{threadId}/files/{+path}"


def tool_call(tool: str, **arguments: object) -> ScriptToolCall:
    return ScriptToolCall(name=tool, arguments=arguments)


async def thread_with_files(session: ClientSession, caller: Tenant, files: dict[str, str]) -> str:
    """A thread whose agent wrote `files` in one completed run."""
    key = "mcp-files-" + caller.agency + "-" + "-".join(files)
    caller.llm.script(key, [
        ScriptStep(tool_calls=tuple(tool_call("write_file", path=p, content=c) for p, c in files.items())),
        ScriptStep(content="Written."),
    ])  # fmt: skip
    created = await call(session, "create_thread", agencyId=caller.agency, agentType="worker")
    outcome = await call(
        session, "invoke_and_wait", agencyId=caller.agency, threadId=created["id"], message=key
    )
    assert outcome["status"] == "completed", outcome
    return str(created["id"])


def file_uri(caller: Tenant, thread_id: str, path: str) -> str:
    return f"agency://agencies/{caller.agency}/threads/{thread_id}/files/{quote(path)}"


async def rejected(work: object) -> MCPError:
    with pytest.raises(MCPError) as refused:
        await work  # type: ignore[misc]
    return refused.value


@pytest.mark.parametrize("era", ERAS)
async def test_ping_is_answered_on_every_revision(caller: Tenant, era: Era) -> None:
    async with mcp_session(caller.url, caller.auth, era) as session:
        assert isinstance(await session.send_ping(), types.EmptyResult)


async def test_server_discover_names_the_versions_and_what_the_server_offers(
    caller: Tenant,
) -> None:
    async with mcp_session(caller.url, caller.auth, "discover") as session:
        found = session.discover_result
        assert found is not None
        assert "2026-07-28" in found.supported_versions
        capabilities = found.capabilities
        assert capabilities.tools is not None
        assert capabilities.resources is not None and capabilities.prompts is not None
        assert found.instructions is not None and "invoke_and_wait" in found.instructions
        assert session.server_info is not None and session.server_info.name == "agency"
        # Lists say how long they may be kept, and by whom.
        tools = await session.list_tools()
        assert (tools.ttl_ms, tools.cache_scope) == (300_000, "public")
        files = await session.list_resources()
        prompts = await session.list_prompts()
        assert (files.ttl_ms, files.cache_scope) == (0, "private")
        assert (prompts.ttl_ms, prompts.cache_scope) == (0, "private")


async def test_a_2025_client_negotiates_its_revision_and_sees_the_same_capabilities(
    caller: Tenant,
) -> None:
    async with mcp_session(caller.url, caller.auth, "initialize") as session:
        assert session.protocol_version == "2025-11-25"
        capabilities = session.server_capabilities
        assert capabilities is not None
        assert capabilities.resources is not None and capabilities.prompts is not None
        assert capabilities.logging is not None


@pytest.mark.parametrize("era", ERAS)
async def test_a_threads_files_are_resources_to_list_and_read(caller: Tenant, era: Era) -> None:
    files = {"notes.md": "# Notes\nfirst", "data/plan.txt": "step 1", "week 1.md": "é"}
    async with mcp_session(caller.url, caller.auth, era) as session:
        thread_id = await thread_with_files(session, caller, files)

        templates = await session.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == [TEMPLATE]

        listing = await session.list_resources()
        mine = {str(r.uri): r for r in listing.resources if thread_id in str(r.uri)}
        assert set(mine) == {file_uri(caller, thread_id, p) for p in files}
        notes = mine[file_uri(caller, thread_id, "notes.md")]
        assert notes.name == "notes.md" and notes.mime_type == "text/markdown"

        for path, content in files.items():
            read = await session.read_resource(file_uri(caller, thread_id, path))
            (text,) = read.contents
            assert isinstance(text, types.TextResourceContents)
            assert text.text == content and text.uri == file_uri(caller, thread_id, path)

        missing = await rejected(session.read_resource(file_uri(caller, thread_id, "nope.md")))
        assert "has no file 'nope.md'" in missing.error.message
        assert "data/plan.txt, notes.md, week 1.md" in missing.error.message
        assert file_uri(caller, thread_id, "week 1.md").endswith("/files/week%201.md")
        # The 2026-07-28 revision made a missing resource invalid params (-32602).
        assert missing.error.code == (-32002 if era == "initialize" else -32602)

        wrong = await rejected(session.read_resource("file:///etc/passwd"))
        assert wrong.error.code == -32602 and "unknown resource URI" in wrong.error.message


async def test_another_tenants_thread_files_are_not_found(
    caller: Tenant, mcp_system: System
) -> None:
    async with mcp_session(caller.url, caller.auth) as session:
        thread_id = await thread_with_files(session, caller, {"secret.txt": "ours"})
    other = await new_tenant(mcp_system)
    for era in ERAS:
        async with mcp_session(other.url, other.auth, era) as theirs:
            refused = await rejected(
                theirs.read_resource(file_uri(caller, thread_id, "secret.txt"))
            )
            assert "HTTP 404" in refused.error.message
            assert "ours" not in refused.error.message
            listing = await theirs.list_resources()
            assert not [r for r in listing.resources if thread_id in str(r.uri)]


@pytest.mark.parametrize("era", ERAS)
async def test_blueprints_are_prompts_that_hand_a_message_to_the_agent(
    caller: Tenant, mcp_system: System, era: Era
) -> None:
    name = f"{caller.agency}/worker"
    async with mcp_session(caller.url, caller.auth, era) as session:
        listing = await session.list_prompts()
        prompts = {p.name: p for p in listing.prompts}
        assert {name, f"{caller.agency}/approver"} <= set(prompts)
        assert all(p.name.startswith(caller.agency + "/") for p in listing.prompts)
        (argument,) = prompts[name].arguments or []
        assert argument.name == "message" and argument.required

        got = await session.get_prompt(name, {"message": "summarise the notes"})
        (message,) = got.messages
        assert message.role == "user" and isinstance(message.content, types.TextContent)
        text = message.content.text
        assert "summarise the notes" in text
        assert f"agencyId `{caller.agency}`" in text and "agentType `worker`" in text

        unknown = await rejected(session.get_prompt(f"{caller.agency}/nobody", {"message": "x"}))
        assert unknown.error.code == -32602 and "unknown prompt" in unknown.error.message
        empty = await rejected(session.get_prompt(name, {}))
        assert "needs the argument 'message'" in empty.error.message

    other = await new_tenant(mcp_system)
    async with mcp_session(other.url, other.auth, era) as theirs:
        foreign = await rejected(theirs.get_prompt(name, {"message": "x"}))
        assert "unknown prompt" in foreign.error.message


async def test_a_2025_client_sets_its_log_level_and_hears_the_runs_at_that_level(
    caller: Tenant,
) -> None:
    heard: list[types.LoggingMessageNotificationParams] = []

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    def set_level(session: ClientSession, level: types.LoggingLevel) -> Awaitable[object]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            return session.set_logging_level(level)

    key = "mcp-log-2025-" + caller.agency
    caller.llm.script(key, [ScriptStep(content="Logged.", delay_ms=500)])
    # The thread's second run: its own key (the longer key a conversation mentions wins),
    # its steps counted from its own message.
    again_key = "mcp-log-again-" + caller.agency
    caller.llm.script(again_key, [ScriptStep(content="Again.", delay_ms=500)], count="turn")
    async with mcp_session(caller.url, caller.auth, logging_callback=logged) as session:
        created = await call(session, "create_thread", agencyId=caller.agency, agentType="worker")
        args = {"agencyId": caller.agency, "threadId": created["id"]}
        # No level asked for yet: a refused call is not logged.
        assert (await session.call_tool("cancel", args)).is_error

        await set_level(session, "warning")
        outcome = await call(session, "invoke_and_wait", message=key, **args)
        assert outcome["status"] == "completed"  # `info`, below `warning`
        assert (await session.call_tool("cancel", args)).is_error

        async def only_the_refusal() -> None:
            assert [m.level for m in heard] == ["warning"]

        # Notifications reach the callback on tasks of their own: wait for it.
        await assert_eventually(only_the_refusal)
        (warning,) = heard
        assert warning.logger == "agency" and isinstance(warning.data, dict)
        assert warning.data["event"] == "tool.refused"
        assert "has no active run" in warning.data["error"]

        heard.clear()
        await set_level(session, "info")
        again = await call(session, "invoke_and_wait", message=again_key, **args)

        async def the_outcome() -> None:
            assert heard and heard[-1].data == {
                "event": "run.outcome",
                "runId": again["runId"],
                "status": "completed",
            }

        await assert_eventually(the_outcome)
    events = [(m.level, m.data["event"]) for m in heard if isinstance(m.data, dict)]
    assert ("info", "run.progress") in events
    assert {level for level, _ in events} == {"info"}


async def test_a_2026_client_asks_for_logs_on_each_request(caller: Tenant) -> None:
    heard: list[types.LoggingMessageNotificationParams] = []

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    key = "mcp-log-2026-" + caller.agency
    caller.llm.script(key, [
        ScriptStep(tool_calls=(tool_call("lookup_guarded", word="x"),), delay_ms=300),
    ])  # fmt: skip
    async with mcp_session(caller.url, caller.auth, "discover", logging_callback=logged) as quiet:
        created = await call(quiet, "create_thread", agencyId=caller.agency, agentType="worker")
        args = {"agencyId": caller.agency, "threadId": created["id"]}
        # No `logLevel` in the request's `_meta`: the refusal is not logged.
        assert (await quiet.call_tool("cancel", args)).is_error
        # `logging/setLevel` is gone from this revision.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            gone = await rejected(quiet.set_logging_level("debug"))
        assert gone.error.code == -32601

    async with mcp_session(
        caller.url, caller.auth, "discover", logging_callback=logged, log_level="notice"
    ) as session:
        paused = await call(session, "invoke_and_wait", message=key, **args)
        assert paused["status"] == "paused"

        async def the_pause() -> None:
            # `info` progress is below `notice`; the pause for a person is `notice`.
            assert [m.level for m in heard] == ["notice"]

        await assert_eventually(the_pause)
    (notice,) = heard
    assert notice.data == {
        "event": "run.outcome",
        "runId": paused["runId"],
        "status": "paused",
        "reason": "hitl",
        "pendingApproval": ["lookup_guarded"],
    }


async def test_protected_resource_metadata_says_bearer_only_and_the_401_points_to_it(
    mcp_system: System,
) -> None:
    wrong = {"Authorization": "Bearer ak_01jdxxxxxxxxxxxxxxxxxxxxxx_not-a-key"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(base_url=mcp_system.url, timeout=10) as http:
        refused = await http.post("/mcp", json=body, headers={**wrong, **accept})
        assert refused.status_code == 401
        message = refused.json()["error"]["message"]
        assert message.startswith("missing or invalid credentials")

        # What the SDK's OAuth support reads off the 401, with no credential sent to it.
        where = extract_resource_metadata_from_www_auth(refused)
        assert where == f"{mcp_system.url}/.well-known/oauth-protected-resource/mcp"
        assert extract_field_from_www_auth(refused, "error") == "invalid_token"
        description = extract_field_from_www_auth(refused, "error_description")
        assert description == message
        urls = build_protected_resource_metadata_discovery_urls(where, f"{mcp_system.url}/mcp")
        for url in {*urls, f"{mcp_system.url}/.well-known/oauth-protected-resource"}:
            document = await http.get(url)
            assert document.status_code == 200, url
            assert document.json() == {
                "resource": f"{mcp_system.url}/mcp",
                "bearer_methods_supported": ["header"],
                "resource_name": "Agency MCP server (bearer: a tenant's API key)",
            }

        # No credential at all: the same pointer, no error code (RFC 6750 §3.1).
        anonymous = await http.post("/mcp", json=body, headers=accept)
        assert anonymous.status_code == 401
        assert extract_field_from_www_auth(anonymous, "error") is None
        assert extract_resource_metadata_from_www_auth(anonymous) == where


async def test_versions_are_negotiated_per_revision(caller: Tenant) -> None:
    headers = {**caller.auth, "Accept": "application/json, text/event-stream"}
    client_info = {"name": "raw", "version": "1"}

    async def post(
        method: str, params: dict[str, object], extra: dict[str, str] | None = None
    ) -> dict[str, object]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with httpx2.AsyncClient(base_url=caller.url, timeout=10) as http:
            r = await http.post("/mcp", json=body, headers={**headers, **(extra or {})})
        if r.headers["content-type"].startswith("text/event-stream"):
            (data,) = [line[5:] for line in r.text.splitlines() if line.startswith("data:")]
            return dict(json.loads(data))
        return dict(r.json())

    for asked, answered in (("2025-06-18", "2025-06-18"), ("1999-01-01", "2025-11-25")):
        init: dict[str, object] = {
            "protocolVersion": asked,
            "capabilities": {},
            "clientInfo": client_info,
        }
        result = (await post("initialize", init))["result"]
        assert isinstance(result, dict) and result["protocolVersion"] == answered

    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": client_info,
    }
    modern = {"Mcp-Method": "tools/list", "Mcp-Protocol-Version": "2099-01-01"}
    error = (await post("tools/list", {"_meta": envelope}, modern))["error"]
    assert isinstance(error, dict) and error["code"] == -32022
    assert "2026-07-28" in error["data"]["supported"]


async def test_resources_are_listed_a_page_of_threads_at_a_time(
    mcp_system: System,
) -> None:
    owner = await new_tenant(mcp_system)
    async with mcp_session(owner.url, owner.auth, "discover") as session:
        oldest = await thread_with_files(session, owner, {"old.md": "first"})
        newer = [
            (await call(session, "create_thread", agencyId=owner.agency, agentType="worker"))["id"]
            for _ in range(20)
        ]
        first = await session.list_resources()
        assert first.resources == [] and first.next_cursor is not None
        second = await session.list_resources(
            params=types.PaginatedRequestParams(cursor=first.next_cursor)
        )
        assert [str(r.uri) for r in second.resources] == [file_uri(owner, oldest, "old.md")]
        assert second.next_cursor is None
        bad = await rejected(
            session.list_resources(params=types.PaginatedRequestParams(cursor="x"))
        )
        assert bad.error.code == -32602 and "invalid cursor" in bad.error.message
    assert len(set(newer)) == 20
