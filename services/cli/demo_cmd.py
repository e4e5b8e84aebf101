"""`agency demo`: a planning-and-files agent run against a running `agency up`, shown live."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import add_data_dir, running_endpoints
from agency.services.cli.threads_client_cmd import model_answer

DEMO_AGENCY = "demo"
DEMO_BLUEPRINT = {
    "name": "demo-planner",
    "description": "Plans its work, keeps notes in files, answers briefly.",
    "prompt": "You are a helpful planner. Write a todo list, keep notes in files, then answer.",
    "tags": ["default"],
}
DEFAULT_TASK = "Plan a three-day trip to Lisbon and keep notes in a file."
MULTI_BLUEPRINTS = (
    {
        "name": "demo-researcher",
        "description": "Researches one part of a question.",
        "prompt": "You research the part you are given and report briefly.",
        "tags": ["default"],
    },
    {
        "name": "demo-lead",
        "description": "Splits work between researchers and merges their reports.",
        "prompt": "You split the work between researchers with `task`, then merge their reports.",
        "tags": ["default"],
        "config": {"subagents": {"subagents": ["demo-researcher"]}},
    },
)
TERMINAL = {"run.completed", "run.error", "run.canceled"}

if TYPE_CHECKING:
    import httpx


def register(groups: Any) -> None:
    demo = groups.add_parser("demo", help="run a demo agent against `agency up` and watch it live")
    demo.add_argument("task", nargs="?", default=DEFAULT_TASK, help="what to ask the agent")
    demo.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the run")
    demo.add_argument(
        "--multi", action="store_true", help="a lead delegating to two subagents, shown as a tree"
    )
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


async def _demo_agency(client: httpx.AsyncClient) -> str:
    """The tenant's agency named `demo`, created by the first demo: each demo runs in it."""
    response = await client.get("/agencies")
    if response.status_code >= 400:
        raise DemoError(f"GET /agencies answered {response.status_code}: {response.text}")
    for agency in response.json():
        if agency.get("name") == DEMO_AGENCY:
            return str(agency["id"])
    created = await _post(client, "/agencies", {"name": DEMO_AGENCY})
    return str(created["id"])


async def _sse(client: httpx.AsyncClient, path: str) -> AsyncIterator[dict[str, Any]]:
    import httpx

    async with client.stream("GET", path, timeout=httpx.Timeout(10.0, read=None)) as response:
        if response.status_code >= 400:
            raise DemoError(f"GET {path} answered {response.status_code}")
        # One frame an event: `id:` and `data:` lines, then an empty line.
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line:
                if data:
                    yield json.loads("\n".join(data))
                data = []


class Printer:
    """Prints events as they come; model text streams in place, word by word."""

    def __init__(self, *, stream: bool = True) -> None:
        # Several threads talking at once would interleave their words: a tree shows
        # each answer whole, when it is complete.
        self._stream = stream
        self._streaming: dict[str, bool] = {}

    def __call__(self, event: dict[str, Any], indent: str = "", *, final: bool = True) -> None:
        thread = str(event.get("aggregate_id", ""))
        payload = event.get("payload", {})
        if event.get("type") == "model.delta":
            if not self._stream:
                return
            if not self._streaming.get(thread):
                print(f"{indent}  🤖 ", end="", flush=True)
                self._streaming[thread] = True
            print(payload.get("delta", ""), end="", flush=True)
            return
        if event.get("type") == "model.completed" and self._streaming.pop(thread, False):
            print(flush=True)
            text = ""
        else:
            text = (
                payload.get("message", {}).get("content", "")
                if event.get("type") == "model.completed"
                else ""
            )
        line = show(event, text, final=final)
        if line:
            print("\n".join(indent + part for part in line.split("\n")), flush=True)


def show(event: dict[str, Any], text: str = "", *, final: bool = True) -> str | None:
    kind, payload = event.get("type", ""), event.get("payload", {})
    match kind:
        case "run.started":
            return f"▶ run {payload.get('run_id')} started"
        case "model.completed":
            return model_answer(text, payload.get("message", {}).get("tool_calls", []))
        case "subagent.spawned":
            kind, child = payload.get("subagent_type"), payload.get("child_thread_id")
            return f"  ↳ spawned {kind} → thread {child}"
        case "subagent.completed":
            report = " ".join(str(payload.get("report", "")).split())[:80]
            return f"  ↲ {payload.get('child_thread_id')} {payload.get('outcome')}: {report}"
        case "todos.written":
            todos = payload.get("todos", [])
            return "  📋 todos:\n" + "\n".join(
                f"     [{t.get('status', 'pending'):<11}] {t.get('content')}" for t in todos
            )
        case "file.written":
            return f"  📄 wrote {payload.get('path')} ({len(payload.get('content', ''))} chars)"
        case "tool.output":
            output = " ".join(str(payload.get("output", "")).split())[:80]
            return f"  ✓ {payload.get('tool_name')}: {output}"
        case "tool.error":
            return f"  ✗ {payload.get('tool_name')}: {payload.get('error')}"
        case "run.completed":
            if not final:
                return "■ completed"
            return f"■ completed\n\nFinal answer:\n{payload.get('result', '')}"
        case "run.error":
            return f"■ error: {payload.get('error')}"
        case "run.canceled":
            return "■ canceled"
    return None


async def _watch_tree(client: httpx.AsyncClient, base: str, root: str, run_id: str) -> None:
    """The root's whole subagent tree, in stream order, indented by depth."""
    import asyncio

    depth = {root: 0}
    labels: dict[str, str] = {}
    printer = Printer(stream=False)
    next_seq = 1
    while True:
        response = await client.get(
            f"{base}/events",
            params={
                "correlationId": root,
                "fromSeq": next_seq,
                "limit": 500,
                "format": "envelope",
            },
        )
        if response.status_code >= 400:
            raise DemoError(f"GET {base}/events answered {response.status_code}: {response.text}")
        page = response.json()
        for event in page["events"]:
            next_seq = int(event["stream_seq"]) + 1
            thread = str(event.get("aggregate_id"))
            payload = event.get("payload", {})
            parent = (
                (payload.get("parent") or {}).get("thread_id")
                if event["type"] == "thread.created"
                else None
            )
            if parent is not None:
                depth[thread] = depth.get(parent, 0) + 1
                labels[thread] = chr(ord("A") + len(labels) % 26)
            indent = "    │ " * depth.get(thread, 0) + (
                f"{labels[thread]} " if thread in labels else ""
            )
            if event["type"] == "thread.created" and parent is not None:
                print(f"{indent}┌ thread {thread} ({payload.get('agent_type')})", flush=True)
            printer(event, indent, final=thread == root)
            if thread == root and event["type"] in TERMINAL and payload.get("run_id") == run_id:
                return
        if not page["hasMore"]:
            await asyncio.sleep(0.3)


async def agency_demo(args: argparse.Namespace) -> int:
    import asyncio

    import httpx

    endpoints = running_endpoints(args)
    if not endpoints.api_url or not endpoints.api_key:
        print("agency: the running system has no API; start it with `agency up`", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=30) as client:
        try:
            agency_id = await _demo_agency(client)
            blueprints = MULTI_BLUEPRINTS if args.multi else (DEMO_BLUEPRINT,)
            for blueprint in blueprints:
                await _post(client, f"/agency/{agency_id}/blueprints", dict(blueprint))
            agent_type = "demo-lead" if args.multi else "demo-planner"
            thread = await _post(client, f"/agency/{agency_id}/agents", {"agentType": agent_type})
            thread_id = thread["id"]
            print(f"agency {agency_id}, thread {thread_id}")
            print(f"task: {args.task}\n")
            base = f"/agency/{agency_id}/agent/{thread_id}"
            invoked = await _post(
                client, f"{base}/invoke", {"messages": [{"role": "user", "content": args.task}]}
            )
            async with asyncio.timeout(args.timeout):
                if args.multi:
                    await _watch_tree(client, base, thread_id, invoked["runId"])
                else:
                    printer = Printer()
                    async for event in _sse(client, f"{base}/stream?format=envelope"):
                        printer(event)
                        payload = event.get("payload", {})
                        if (
                            event.get("type") in TERMINAL
                            and payload.get("run_id") == invoked["runId"]
                        ):
                            break
        except DemoError as e:
            print(f"agency: {e}", file=sys.stderr)
            return 1
        except TimeoutError:
            print(f"agency: the run did not finish within {args.timeout:g} s", file=sys.stderr)
            return 1
    print(f"\nstate: {endpoints.api_url}{base}/state")
    return 0
