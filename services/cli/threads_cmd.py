"""`agency threads show T`: a thread's state, as the API serves it, made readable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agency.services.cli import threads_client_cmd
from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints


def register(groups: Any) -> None:
    sub = command_group(groups, "threads", "look at threads, create and run them")
    show = sub.add_parser("show", help="print a thread's state")
    show.add_argument("thread", help="thread id")
    show.add_argument("--tenant", default=None, help="tenant id (default: the system's default)")
    show.add_argument("--json", action="store_true", help="print the /state document as JSON")
    add_data_dir(show)
    show.set_defaults(handler=threads_show)
    threads_client_cmd.register(sub)


async def _agency_of(database_url: str, tenant: str, thread: str) -> str | None:
    import asyncpg

    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        value = await conn.fetchval(
            "SELECT agency_id FROM threads WHERE tenant_id = $1 AND thread_id = $2", tenant, thread
        )
    finally:
        await conn.close(timeout=5)
    return str(value) if value is not None else None


def render(document: dict[str, Any]) -> str:
    state, run = document.get("state", {}), document.get("run", {})
    thread = state.get("thread", {})
    lines = [
        f"thread   {state.get('threadId')}  agent {state.get('agentType')}  "
        f"model {state.get('model') or '-'}",
        f"created  {thread.get('createdAt')}",
        f"run      {run.get('runId') or '-'}  {run.get('status')}  step {run.get('step', 0)}"
        + (f"  ({run['reason']})" if run.get("reason") else ""),
        "",
        "messages:",
    ]
    for message in state.get("messages", []):
        text = " ".join(str(message.get("content", "")).split())
        calls = ", ".join(c["name"] for c in message.get("toolCalls", []) or [])
        lines.append(f"  {message.get('role'):<9} {text[:100]}" + (f"  → {calls}" if calls else ""))
    if state.get("todos"):
        lines += ["", "todos:"]
        lines += [f"  [{t.get('status'):<11}] {t.get('content')}" for t in state["todos"]]
    if state.get("files"):
        lines += ["", "files:"]
        lines += [f"  {path} ({len(content)} chars)" for path, content in state["files"].items()]
    if state.get("pendingToolCalls"):
        lines += ["", "awaiting approval:"]
        lines += [
            f"  {c.get('name')} {json.dumps(c.get('args'))}" for c in state["pendingToolCalls"]
        ]
    if state.get("subagents"):
        lines += ["", "subagents:"]
        lines += [
            f"  {s.get('childThreadId')} {s.get('status')} {str(s.get('report') or '')[:80]}"
            for s in state["subagents"]
        ]
    return "\n".join(lines)


async def threads_show(args: argparse.Namespace) -> int:
    import httpx

    from agency.contracts.ids import validate_token

    endpoints = running_endpoints(args)
    thread = validate_token("thread id", args.thread)
    tenant = validate_token("tenant id", args.tenant or endpoints.tenant_id or "")
    if not endpoints.api_url or not endpoints.api_key:
        print("agency: the running system has no API; start it with `agency up`", file=sys.stderr)
        return 2
    agency = await _agency_of(endpoints.database_url, tenant, thread)
    if agency is None:
        print(f"agency: no thread {thread} for tenant {tenant}", file=sys.stderr)
        return 1
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=30) as client:
        response = await client.get(f"/agency/{agency}/agent/{thread}/state")
    if response.status_code != 200:
        print(f"agency: /state answered {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    document = response.json()
    print(json.dumps(document, indent=2) if args.json else render(document))
    return 0
