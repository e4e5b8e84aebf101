"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector`, pinned in tests/js) against
`/mcp`, as a developer points it at Agency: with the tenant's key it lists and calls the
tools and lists the prompts; with a wrong key it shows the server's own message, both when
it stops at the 401 and when it goes on to look for OAuth (which Agency does not have)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.jsclients import JS, NODE_TIMEOUT, node_ready
from tests.mcp.conftest import System, Tenant

INSPECTOR = JS / "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
NO_OAUTH = "it takes a tenant's API key as a bearer token; send 'Authorization: Bearer <api key>'"


@dataclass(frozen=True)
class Answer:
    status: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error(self) -> str:
        """The message of the error the Inspector ends with (its last line on stderr)."""
        assert self.status != 0, self.out
        last = [line for line in self.err.splitlines() if line.startswith("{")][-1]
        message = json.loads(last)["error"]["message"]
        assert isinstance(message, str)
        return message


async def inspect(url: str, key: str, home: Path, *args: str, **env: str) -> Answer:
    """`mcp-inspector --cli <url>/mcp --header 'Authorization: Bearer <key>' args...`, with a
    home of its own (it keeps a catalog of servers there) and secrets kept in memory."""
    process = await asyncio.create_subprocess_exec(
        node_ready(),
        str(INSPECTOR),
        "--cli",
        f"{url}/mcp",
        "--header",
        f"Authorization: Bearer {key}",
        *args,
        cwd=home,
        env={**os.environ, "HOME": str(home), "MCP_INSPECTOR_SECRET_STORE": "memory", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=NODE_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"the Inspector gave no answer in {NODE_TIMEOUT} s") from None
    assert process.returncode is not None
    return Answer(status=process.returncode, out=out.decode(), err=err.decode())


async def test_the_inspector_lists_and_calls_tools_and_lists_prompts(
    caller: Tenant, tmp_path: Path
) -> None:
    tools = await inspect(caller.url, caller.key, tmp_path, "--method", "tools/list")
    assert tools.status == 0, tools.out
    names = {tool["name"] for tool in tools.json()["tools"]}
    assert {"list_agencies", "invoke_and_wait", "approve"} <= names

    called = await inspect(
        caller.url, caller.key, tmp_path, "--method", "tools/call", "--tool-name", "list_agencies"
    )
    assert called.status == 0, called.out
    result = called.json()
    assert result["isError"] is False
    assert [a["id"] for a in result["structuredContent"]["agencies"]] == [caller.agency]

    prompts = await inspect(caller.url, caller.key, tmp_path, "--method", "prompts/list")
    assert prompts.status == 0, prompts.out
    assert all(p["name"].startswith(f"{caller.agency}/") for p in prompts.json()["prompts"])


async def test_a_wrong_key_shows_the_servers_message(mcp_system: System, tmp_path: Path) -> None:
    wrong = "ak_01jdxxxxxxxxxxxxxxxxxxxxxx_not-a-key"
    # Stopping at the 401: the JSON-RPC error the server sent.
    stopped = await inspect(
        mcp_system.url, wrong, tmp_path, "--stored-auth-only", "--method", "tools/list"
    )
    assert "missing or invalid credentials" in stopped.error()

    # Going on to OAuth as an interactive client does: no authorization server is named, so
    # it registers at the API's origin and is refused with the same advice.
    oauth = await inspect(
        mcp_system.url,
        wrong,
        tmp_path,
        "--method",
        "tools/list",
        MCP_AUTO_OPEN_ENABLED="true",
    )
    message = oauth.error()
    assert "Dynamic Client Registration rejected (HTTP 400)" in message
    assert NO_OAUTH in message
