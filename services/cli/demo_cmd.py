"""`agency demo`: a planning-and-files agent run against a running `agency up`, shown live."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx

from services.cli.common import add_data_dir, running_endpoints

DEMO_BLUEPRINT = {
    "name": "demo-planner",
    "description": "Plans its work, keeps notes in files, answers briefly.",
    "prompt": "You are a helpful planner. Write a todo list, keep notes in files, then answer.",
    "tags": ["default"],
}
DEFAULT_TASK = "Plan a three-day trip to Lisbon and keep notes in a file."
TERMINAL = {"run.completed", "run.error", "run.canceled"}


def register(groups: Any) -> None:
    demo = groups.add_parser("demo", help="run a demo agent against `agency up` and watch it live")
    demo.add_argument("task", nargs="?", default=DEFAULT_TASK, help="what to ask the agent")
    demo.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the run")
    add_data_dir(demo)
    demo.set_defaults(handler=agency_demo)


class DemoError(Exception):
    pass


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    if response.status_code >= 400:
        raise DemoError(f"POST {path} answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result


async def _sse(client: httpx.AsyncClient, path: str) -> AsyncIterator[dict[str, Any]]:
    async with client.stream("GET", path, timeout=httpx.Timeout(10.0, read=None)) as response:
        if response.status_code >= 400:
            raise DemoError(f"GET {path} answered {response.status_code}")
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                yield json.loads("\n".join(data))
                data = []


def show(event: dict[str, Any]) -> str | None:
    kind, payload = event.get("type", ""), event.get("payload", {})
    match kind:
        case "run.started":
            return f"▶ run {payload.get('run_id')} started"
        case "model.delta":
            return None
        case "model.completed":
            message = payload.get("message", {})
            text = message.get("content", "")
            calls = ", ".join(
                f"{c['name']}({c.get('arguments', '')[:60]})" for c in message.get("tool_calls", [])
            )
            lines = [f"  🤖 {text}"] if text else []
            if calls:
                lines.append(f"  🔧 calls {calls}")
            return "\n".join(lines) or None
        case "todos.written":
            todos = payload.get("todos", [])
            return "  📋 todos:\n" + "\n".join(
                f"     [{t.get('status', 'pending'):<11}] {t.get('content')}" for t in todos
            )
        case "file.written":
            return f"  📄 wrote {payload.get('path')} ({len(payload.get('content', ''))} chars)"
        case "tool.output":
            return f"  ✓ {payload.get('tool_name')}: {str(payload.get('output', ''))[:80]}"
        case "tool.error":
            return f"  ✗ {payload.get('tool_name')}: {payload.get('error')}"
        case "run.completed":
            return f"■ completed\n\nFinal answer:\n{payload.get('result', '')}"
        case "run.error":
            return f"■ error: {payload.get('error')}"
        case "run.canceled":
            return "■ canceled"
    return None


async def agency_demo(args: argparse.Namespace) -> int:
    endpoints = running_endpoints(args)
    if not endpoints.api_url or not endpoints.api_key:
        print("agency: the running system has no API; start it with `agency up`", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=30) as client:
        try:
            agency = await _post(client, "/agencies", {"name": "demo"})
            agency_id = agency["id"]
            await _post(client, f"/agency/{agency_id}/blueprints", DEMO_BLUEPRINT)
            thread = await _post(client, f"/agency/{agency_id}/agents", {"agentType": "demo-planner"})
            thread_id = thread["id"]
            print(f"agency {agency_id}, thread {thread_id}")
            print(f"task: {args.task}\n")
            base = f"/agency/{agency_id}/agent/{thread_id}"
            invoked = await _post(
                client, f"{base}/invoke", {"messages": [{"role": "user", "content": args.task}]}
            )
            async with asyncio.timeout(args.timeout):
                async for event in _sse(client, f"{base}/stream?fromSeq=1"):
                    line = show(event)
                    if line:
                        print(line, flush=True)
                    payload = event.get("payload", {})
                    if event.get("type") in TERMINAL and payload.get("run_id") == invoked["runId"]:
                        break
        except DemoError as e:
            print(f"agency: {e}", file=sys.stderr)
            return 1
        except TimeoutError:
            print(f"agency: the run did not finish within {args.timeout:g} s", file=sys.stderr)
            return 1
    print(f"\nstate: {endpoints.api_url}{base}/state")
    return 0
